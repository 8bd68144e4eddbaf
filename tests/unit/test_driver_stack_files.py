"""The driver stack and PCI bus as gpu_info reads them from files (module_utils software.py and pci.py), over fixture
roots built by tests/sim/host/mkroot.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import pci, software
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

mkroot = simulators.mkroot()


def _fs(tmp_path, **overrides):
    small = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1}  # the CPUs do not matter here
    return HostFS(str(mkroot.build_root(tmp_path / "root", {**small, **overrides})))


@pytest.mark.parametrize("open_flavour, flavour", [(False, "proprietary"), (True, "open")])
def test_kernel_module_version_and_flavour(tmp_path, open_flavour, flavour):
    fs = _fs(tmp_path, nvidia_kernel_module="570.86.15", nvidia_kernel_module_open=open_flavour)
    assert software.kernel_module(fs) == {
        "version": "570.86.15",
        "flavour": flavour,
        "loaded": True,
        "source": "/proc/driver/nvidia/version",
    }


def test_no_module_loaded(tmp_path):
    assert software.kernel_module(_fs(tmp_path))["version"] is None


class _Module:
    """The two AnsibleModule methods kernel_module uses; modinfo's answer is canned (a library's state, not ours)."""

    def __init__(self, out, rc=0):
        self.out, self.rc, self.calls = out, rc, []

    def get_bin_path(self, name):
        return "/sbin/" + name

    def run_command(self, argv):
        self.calls.append(argv)
        return self.rc, self.out, ""


def test_modinfo_fallback_only_on_the_real_root(tmp_path):
    module = _Module("550.90.07\n")
    # On a fixture root commands are never run.
    assert software.kernel_module(_fs(tmp_path), module)["version"] is None and module.calls == []
    empty = tmp_path / "empty"
    empty.mkdir()

    class RealRoot(HostFS):
        """The real root, but with this test's empty directory behind every path."""

        def __init__(self):
            super().__init__("/")

        def path(self, path):
            return str(empty) + path

    found = software.kernel_module(RealRoot(), module)
    assert found == {"version": "550.90.07", "flavour": None, "loaded": False, "source": "modinfo"}
    assert module.calls == [["/sbin/modinfo", "-F", "version", "nvidia"]]
    assert software.kernel_module(RealRoot(), _Module("", rc=1))["version"] is None


def test_library_version_follows_the_so1_link(tmp_path):
    fs = _fs(tmp_path, nvidia_library_version="550.90.07")
    # A leftover library of the previous driver does not count: libnvidia-ml.so.1 points at the installed one.
    Path(fs.path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.183.01")).write_text("")
    assert software.library_version(fs) == {
        "version": "550.90.07",
        "versions": ["535.183.01", "550.90.07"],
        "source": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    }


def test_library_version_from_dpkg_when_no_file(tmp_path):
    fs = _fs(tmp_path)
    status = Path(fs.path("/var/lib/dpkg/status"))
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: libnvidia-compute-535\nStatus: deinstall ok config-files\nVersion: 535.183.01-0ubuntu1\n\n"
        "Package: libnvidia-compute-550\nStatus: install ok installed\nVersion: 550.90.07-0ubuntu0.22.04.1\n\n"
        "Package: nvidia-fabricmanager-550\nStatus: install ok installed\nVersion: 550.90.07-1\n"
    )
    assert software.library_version(fs) == {
        "version": "550.90.07",
        "versions": [],
        "source": "dpkg:libnvidia-compute-550",
    }
    assert software.fabricmanager_version(None, fs) == "550.90.07"


def test_cuda_compat_and_fabric_manager(tmp_path):
    fs = _fs(
        tmp_path,
        cuda_compat=[{"cuda": "12.8", "driver": "570.86.15"}],
        fabricmanager="550.90.07",
        fabricmanager_running=True,
    )
    assert software.cuda_compat(fs) == [{"cuda": "12.8", "driver": "570.86.15", "path": "/usr/local/cuda-12.8/compat"}]
    assert software.fabricmanager_version(None, fs) == "550.90.07"
    assert software.fabricmanager_running(fs) is True
    assert software.fabricmanager_running(_fs(tmp_path / "b", fabricmanager="550.90.07")) is False


def test_pci_scan_gpus_nvswitches_and_what_is_not_ours(tmp_path):
    devices = (
        mkroot.nvidia_gpus(["0000:18:00.0", "0000:2a:00.0"])
        + mkroot.nvidia_gpus(["0000:3a:00.0"], driver="vfio-pci")
        + mkroot.nvidia_gpus(["0000:5d:00.0"], driver=None)
        + [{"address": "0000:18:00.1", "kind": "audio", "device": "0x22ba", "driver": None}]
        + [{"address": "0000:18:00.4", "kind": "gpu", "device": "0x2330", "driver": "nvidia", "physfn": "0000:18:00.0"}]
        + mkroot.nvswitches(2)
    )
    found = pci.scan(_fs(tmp_path, nvidia_pci=devices))
    assert found["available"] is True
    assert [(g["address"], g["driver"], g["virtual"]) for g in found["gpus"]] == [
        ("0000:18:00.0", "nvidia", False),
        ("0000:18:00.4", "nvidia", True),
        ("0000:2a:00.0", "nvidia", False),
        ("0000:3a:00.0", "vfio-pci", False),
        ("0000:5d:00.0", None, False),
    ]
    assert [(s["address"], s["class"], s["device"]) for s in found["nvswitches"]] == [
        ("0000:05:00.0", "0x068000", "0x22a3"),
        ("0000:06:00.0", "0x068000", "0x22a3"),
    ]


def test_pci_scan_without_sysfs(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pci.scan(HostFS(str(empty)))["available"] is False


@pytest.mark.parametrize(
    "bus_id, address",
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("00000000:DB:00.0", "0000:db:00.0"),
        ("0000:3b:00", "0000:3b:00.0"),
        ("00000001:0A:00.0", "0001:0a:00.0"),
        (None, None),
        ("", None),
    ],
)
def test_sysfs_address(bus_id, address):
    assert pci.sysfs_address(bus_id) == address


def test_nvidia_smi_version_mismatch_is_named(tmp_path):
    """The nvidia-smi fallback: "Failed to initialize NVML: Driver/library version mismatch" is the same NVML error."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    smi.chmod(0o755)

    class Module:
        def run_command(self, argv):
            import subprocess

            proc = subprocess.run(argv, capture_output=True, text=True)
            return proc.returncode, proc.stdout, proc.stderr

    status, driver, gpus = gpu._read_nvidia_smi(Module(), str(smi))
    assert status["available"] is False and status["error_code"] == "LibRmVersionMismatch"
    assert "version mismatch" in status["error"] and gpus == []
