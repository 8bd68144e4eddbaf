"""The simulators under tests/sim as modules, for tests: each is a script with a CLI, not a package, so it is loaded
by its path, once, under one name (``gpufleet_sim_<name>``) that every test shares.

- ``mkroot()``: tests/sim/host/mkroot.py, fixture host roots (/proc, /sys, /etc) for host_info and the host rules;
- ``netroot()``: tests/sim/host/netroot.py, the network part of such a root (NICs, TCP settings, InfiniBand);
- ``profiles()``: tests/sim/nvml/profiles.py, state files of the simulated libnvidia-ml.so.1;
- ``pcitree()``: tests/sim/host/pcitree.py, sysfs PCIe hierarchies of real platforms (HGX H100, PCIe L40S, a VM).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SIM = Path(__file__).resolve().parent / "sim"


def load(name: str, path: Path) -> ModuleType:
    """The module of the file ``path`` as ``sys.modules[name]``, executed the first time only."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def mkroot() -> ModuleType:
    return load("gpufleet_sim_mkroot", SIM / "host" / "mkroot.py")


def netroot() -> ModuleType:
    return load("gpufleet_sim_netroot", SIM / "host" / "netroot.py")


def profiles() -> ModuleType:
    return load("gpufleet_sim_profiles", SIM / "nvml" / "profiles.py")


def pcitree() -> ModuleType:
    return load("gpufleet_sim_pcitree", SIM / "host" / "pcitree.py")
