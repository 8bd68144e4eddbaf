"""A simulated fleet in a temp dir for fault tests: demo hosts (tests/sim/demo.py) built under ``<tmp>/fleet``, an
inventory whose every path points into it (remediation writes only there, locks included), and stand-ins for hosts
that are slow, hung or gone."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

REGIONS = {"ap_southeast": ("sg-",), "eu_west": ("fra-",), "us_east": ("iad-",)}
# The demo fleet's policy (inventories/demo), so that demo.EXPECTED holds for these hosts too.
POLICY = {
    "site": "{{ group_names | intersect(['ap_southeast', 'eu_west', 'us_east']) | first }}",
    "sites": {
        "ap_southeast": {
            "links": {"eu_west": {"rtt_ms": 160, "bandwidth_gbps": 1}, "us_east": {"rtt_ms": 220, "bandwidth_gbps": 1}}
        },
        "eu_west": {
            "links": {
                "ap_southeast": {"rtt_ms": 160, "bandwidth_gbps": 1},
                "us_east": {"rtt_ms": 80, "bandwidth_gbps": 10},
            }
        },
        "us_east": {
            "links": {
                "ap_southeast": {"rtt_ms": 220, "bandwidth_gbps": 1},
                "eu_west": {"rtt_ms": 80, "bandwidth_gbps": 10},
            }
        },
    },
    "network": {"min_mtu": 9000},
}
EXPECTED = demo.EXPECTED


def build(tmp: Path) -> Path:
    """The eight demo hosts under ``tmp/fleet`` (about 2 s)."""
    fleet = tmp / "fleet"
    demo.build(fleet)
    return fleet


def demo_inventory(tmp: Path, sim_lib: Path) -> Path:
    """The demo fleet built under ``tmp/fleet`` and a copy of inventories/demo at ``tmp/inventory`` pointed at it
    (its local-connection part, group_vars/all/local.yml: the hosts' directory, the stand-in ethtool, the
    simulated NVML library ``sim_lib``); the inventory's directory."""
    build(tmp)
    inv = tmp / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inv)
    local = inv / "group_vars" / "all" / "local.yml"
    gv = yaml.safe_load(local.read_text())
    gv["gpufleet_demo_dir"] = str(tmp / "fleet")
    gv["gpufleet_ethtool_path"] = str(REPO / "tests/fixtures/ethtool/fake-ethtool")
    gv["gpufleet_environment"]["LD_LIBRARY_PATH"] = str(sim_lib.parent)
    local.write_text(yaml.safe_dump(gv))
    return inv


def clone(fleet: Path, source: str, name: str) -> None:
    """A new simulated host ``name`` with the files of demo host ``source``."""
    shutil.copytree(fleet / source, fleet / name, symlinks=True)


def host_vars(fleet: Path, name: str, sim_dir: Path, python: str = sys.executable) -> dict:
    """Variables of a simulated host running locally on its own files under ``fleet/name``."""
    root = fleet / name / "root"
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": python,
        "gpufleet_audit_root": str(root),
        "gpufleet_ethtool_path": str(REPO / "tests" / "fixtures" / "ethtool" / "fake-ethtool"),
        "gpufleet_sample_seconds": 0,
        "gpufleet_environment": {
            "LD_LIBRARY_PATH": str(sim_dir),
            "FAKE_NVML_STATE": str(fleet / name / "nvml.state"),
            "FAKE_ETHTOOL_DIR": str(fleet / name / "ethtool"),
        },
        "gpufleet_become": False,
        "gpufleet_allow_local_changes": True,  # a simulated host on this machine, meant to be remediated
        "gpufleet_rollback_dir": str(root / "var/lib/gpufleet/rollback"),
        "gpufleet_lock_path": str(root / "run/gpufleet/remediation.lock"),
        "host_tuning_root": str(root),
        "network_tuning_root": str(root),
        "gpu_runtime_config_file": str(root / "etc/gpufleet/gpu-runtime.json"),
        "gpu_runtime_apply_script": str(root / "usr/local/libexec/gpufleet/gpufleet-gpu-apply"),
        "gpu_runtime_unit_dir": str(root / "etc/systemd/system"),
        "gpu_runtime_state_dir": str(root / "var/lib/gpufleet"),
    }


def inventory(path: Path, hosts: dict[str, dict]) -> Path:
    """Write an inventory of ``hosts`` (name -> variables), grouped by region like the demo fleet."""
    groups: dict[str, dict] = {g: {"hosts": {}} for g in REGIONS}
    for name, variables in hosts.items():
        group = next((g for g, prefixes in REGIONS.items() if name.startswith(prefixes)), "us_east")
        groups[group]["hosts"][name] = variables
    data = {"all": {"vars": {"gpufleet_policy": POLICY}, "children": groups}}
    path.write_text(yaml.safe_dump(data, sort_keys=True))
    return path


def sleeper(path: Path, seconds: float, then: str | None = sys.executable) -> str:
    """An executable that sleeps, then runs ``then`` with its arguments (None: exits 255 like ssh that gave up).

    As a host's ``ansible_python_interpreter`` it makes every module call on that host slow; as its
    ``ansible_ssh_executable`` it is a link that never answers. The sleep is bounded, so nothing outlives a test
    for long even if it is left behind.
    """
    tail = f'exec {then} "$@"' if then else "exit 255"
    path.write_text(f"#!/bin/sh\nsleep {seconds}\n{tail}\n")
    path.chmod(0o755)
    return str(path)
