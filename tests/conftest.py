"""The device the suite runs on: ``POSBOOK_DEVICE`` (else CUDA where there is a GPU, else the CPU), through the
``device`` fixture, so ``POSBOOK_DEVICE=cuda pytest tests -m on_device`` runs the device-parametrised cases on a
GPU. Cases marked ``cuda`` need one and are skipped without it; the summary's last lines say how many, so a
CPU-only run never reads as a GPU check."""

from __future__ import annotations

import pytest
import torch

import posbook as pb

NO_CUDA = "needs a CUDA GPU; this machine has none (tools/gpu_check.py runs these on one)"


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU; skipped, and counted in the summary, without one")
    config.addinivalue_line("markers", "on_device: runs on the device of POSBOOK_DEVICE (set on every test that "
                                       "takes the device fixture)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.on_device)
        if item.get_closest_marker("cuda") is not None and not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason=NO_CUDA))


@pytest.fixture(autouse=True)
def _claims_as_in_the_build(monkeypatch):
    """Claims raise, log nothing and train seed 0 in every test, whatever the shell running the suite says
    (posbook.claims reads POSBOOK_CLAIMS, POSBOOK_CLAIMS_LOG, POSBOOK_SEED and POSBOOK_BOOK_BUILD)."""
    for name in ("POSBOOK_CLAIMS", "POSBOOK_CLAIMS_LOG", "POSBOOK_SEED", "POSBOOK_BOOK_BUILD"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def device() -> torch.device:
    """The device under test: posbook.default_device() (POSBOOK_DEVICE, else cuda, mps or cpu)."""
    return pb.default_device()


def pytest_terminal_summary(terminalreporter):
    # A skipped report's longrepr is (file, line, "Skipped: <reason>"): the reason says whether it was for CUDA.
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if isinstance(report.longrepr, tuple) and NO_CUDA in str(report.longrepr[-1])]
    ran = [report for key in ("passed", "failed") for report in terminalreporter.stats.get(key, [])
           if "on_device" in report.keywords and report.when == "call"]
    if ran or skipped:
        terminalreporter.section("devices")
    if ran:
        terminalreporter.write_line(f"{len(ran)} device-parametrised test(s) ran on {pb.default_device()}")
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} CUDA-only test(s) skipped: {NO_CUDA}")
