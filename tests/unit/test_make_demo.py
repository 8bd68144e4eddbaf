"""`make demo-local` says that it remediates before it does, and remediates nothing when told not to (issue 29)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _dry_run(*args: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proc = subprocess.run(
        ["make", "-n", "-C", str(REPO), "--no-print-directory", "demo-local", *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return proc.stdout.splitlines()


def test_demo_local_says_it_remediates_before_it_does():
    lines = _dry_run()
    remediate = next(i for i, line in enumerate(lines) if "gpufleet remediate" in line)
    said = [line for line in lines[:remediate] if line.startswith("echo") and "remediating" in line]
    assert said and "build/demo" in said[0], lines


def test_demo_local_remediate_no_stops_after_the_audit():
    lines = _dry_run("DEMO_REMEDIATE=no")
    assert any("gpufleet audit" in line for line in lines)
    assert not any("gpufleet remediate -i" in line and not line.startswith("echo") for line in lines), lines
