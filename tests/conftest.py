"""Shared test setup: module_utils importable by their collection names, the simulated NVML library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import simulators

REPO = Path(__file__).resolve().parents[1]
SIM_DIR = REPO / "build" / "sim"
SIM_LIB = SIM_DIR / "libnvidia-ml.so.1"
FIXTURES = REPO / "tests" / "fixtures"

# `ansible_collections.gpufleet.tuning` resolves through the link in .collections.
if str(REPO / ".collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".collections"))


@pytest.fixture(scope="session")
def profiles():
    """tests/sim/nvml/profiles.py as a module (it is also a CLI, not a package)."""
    return simulators.profiles()


@pytest.fixture(scope="session")
def sim_lib() -> Path:
    """The simulated libnvidia-ml.so.1 (`make sim` builds it; built here if missing)."""
    if not SIM_LIB.exists():
        subprocess.run(["make", "-C", str(REPO), "sim"], check=True, env={**os.environ, "MAKEFLAGS": ""})
    return SIM_LIB
