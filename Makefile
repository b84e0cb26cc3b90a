# posbook — two commands on a fresh clone:
#   make book   build the HTML book (_build/html/index.html), executing every chapter
#   make test   unit tests, every chapter executed, strict book build, rendered pages checked in Chromium
# Both create and reuse .venv (pinned by requirements.txt).

SHELL := bash
# -e: stop at the first failing command; -o pipefail: a failing command piped into `tee` still fails the target.
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.posbook-installed
VENDOR_STAMP := _build/vendored-js/.stamp
# Where the chapters' execution leaves each figure's phone variant and the book build finds it (posbook.viz).
export POSBOOK_PHONE_FIGURES := $(CURDIR)/_build/phone-figures
JB_FLAGS := --warningiserror --nitpick --keep-going --builder html

.PHONY: help book test unit execute build-book browser check-pages clean

help:
	@echo "make book  - build the HTML book into _build/html (executes every chapter)"
	@echo "make test  - run every test (unit, notebooks, strict build, rendered pages)"

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(VENDOR_STAMP): vendor/package.json vendor/package-lock.json tools/vendor_js.py
	npm ci --prefix vendor --no-audit --no-fund --ignore-scripts
	$(PY) tools/vendor_js.py
	touch $@

# make test adds --elsewhere: the chapters that train or time run a second time, in another floating-point environment.
RUN_NOTEBOOKS_FLAGS ?=
execute: $(STAMP)
	$(PY) tools/run_notebooks.py $(RUN_NOTEBOOKS_FLAGS)

# A full build every time: an incremental Sphinx build would not repeat the warnings of unchanged pages.
build-book: $(STAMP) $(VENDOR_STAMP)
	rm -rf _build/html _build/jupyter_execute _build/.doctrees
	$(VENV)/bin/jupyter-book build . $(JB_FLAGS)

book: execute
	$(MAKE) --no-print-directory build-book
	@echo "The book is at _build/html/index.html"

unit: $(STAMP)
	mkdir -p _build/reports
	$(PY) -m pytest tests --junitxml=_build/reports/unit.xml -o junit_family=xunit2

browser:
	bash tools/ensure_chromium.sh

check-pages: $(STAMP) browser
	$(PY) -m pytest tests_book -p no:cacheprovider --junitxml=_build/reports/pages.xml -o junit_family=xunit2

test: $(STAMP)
	rm -rf _build/reports && mkdir -p _build/reports && date +%s > _build/reports/started
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory book RUN_NOTEBOOKS_FLAGS=--elsewhere
	$(MAKE) --no-print-directory check-pages
	$(PY) tools/report.py

clean:
	rm -rf _build
