#!/usr/bin/env bash
# The rendered-page checks drive Debian's Chromium through Playwright (no browser download, which this network
# forbids). Install it from the Debian archive when it is missing; CI runs as root.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium
