"""host_info's logic (plugins/module_utils/host.py, memlock.py, systemd_unit.py, kernel_log.py's reading) against
mkroot fixture trees, and mkroot itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, memlock, systemd_unit
from ansible_collections.gpufleet.tuning.plugins.module_utils import host as h
from ansible_collections.gpufleet.tuning.plugins.module_utils import kernel_log as klog
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

REPO = Path(__file__).resolve().parents[2]
MKROOT = REPO / "tests" / "sim" / "host" / "mkroot.py"


mkroot = simulators.mkroot()


def collect(root, **kwargs):
    kwargs.setdefault("sample_seconds", 0)
    return h.collect(HostFS(str(root)), **kwargs)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return mkroot.build_root(tmp_path_factory.mktemp("healthy") / "root")


# ---------------------------------------------------------------- pure parsers


@pytest.mark.parametrize("text, value", [("10\n", 10), ("  0 ", 0), ("-1", -1), ("", None), (None, None), ("x", None)])
def test_to_int(text, value):
    assert decoders.to_int(text) == value


def test_parse_cpuinfo_and_model():
    text = "processor\t: 0\nmodel name\t: Xeon X\ncpu MHz\t\t: 2000.5\n\nprocessor\t: 1\nmodel name\t: Xeon X\n\n"
    blocks = h.parse_cpuinfo(text)
    assert [b["processor"] for b in blocks] == ["0", "1"]
    assert blocks[0]["cpu MHz"] == "2000.5"
    assert h.cpu_model(blocks) == "Xeon X"
    assert h.cpu_model(h.parse_cpuinfo("processor : 0\nBogoMIPS : 50.00\n")) is None


def test_parse_meminfo_plain_and_per_node():
    assert h.parse_meminfo("MemTotal:  1024 kB\nHugePages_Total:   4\nbad line\n") == {
        "MemTotal": 1024,
        "HugePages_Total": 4,
    }
    assert h.parse_meminfo("Node 1 MemTotal:       2048 kB\nNode 1 MemFree:   512 kB\n") == {
        "MemTotal": 2048,
        "MemFree": 512,
    }


def test_parse_vmstat_and_psi():
    assert h.parse_vmstat("pswpin 12\npswpout 34\nbroken\nx y\n") == {"pswpin": 12, "pswpout": 34}
    psi = h.parse_psi("some avg10=35.10 avg60=20.00 avg300=5.00 total=123\nfull avg10=12.50 avg60=1 total=9\n")
    assert psi["some"]["avg10"] == 35.1 and psi["full"]["avg10"] == 12.5
    assert h.parse_psi(None) == {}


@pytest.mark.parametrize(
    "text, value",
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never", "always"),
        ("always defer defer+madvise [madvise] never", "madvise"),
        ("madvise\n", "madvise"),
        (None, None),
        ("always madvise never", None),
    ],
)
def test_parse_bracketed(text, value):
    assert h.parse_bracketed(text) == value


def test_parse_proc_limits():
    head = "Limit                     Soft Limit           Hard Limit           Units     \n"
    assert memlock.parse_proc_limits(
        head + "Max locked memory         8388608              8388608              bytes\n"
    ) == (
        8192,
        8192,
    )
    assert memlock.parse_proc_limits(
        head + "Max locked memory         65536                unlimited            bytes\n"
    ) == (
        64,
        None,
    )
    with pytest.raises(ValueError):
        memlock.parse_proc_limits(head + "Max open files 1024 1024 files\n")


def test_parse_limits_conf():
    text = (
        "# comment\n*  soft memlock 1024 # inline\n@gpu hard memlock unlimited\nroot - memlock infinity\n"
        "*  soft nofile 1024\n* soft memlock lots\n* bogus memlock 5\n"
    )
    assert memlock.parse_limits_conf(text, "/etc/security/limits.conf") == [
        {"path": "/etc/security/limits.conf", "domain": "*", "type": "soft", "value_kb": 1024},
        {"path": "/etc/security/limits.conf", "domain": "@gpu", "type": "hard", "value_kb": None},
        {"path": "/etc/security/limits.conf", "domain": "root", "type": "-", "value_kb": None},
    ]


def test_parse_os_release_and_proc_version():
    assert h.parse_os_release("ID=debian\nVERSION_ID=\"12\"\nPRETTY_NAME='Debian 12'\n# c=x\n") == {
        "ID": "debian",
        "VERSION_ID": "12",
        "PRETTY_NAME": "Debian 12",
    }
    text = "Linux version 6.1.0-21-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP"
    assert h.parse_proc_version(text) == ("6.1.0-21-amd64", "#1 SMP")
    assert h.parse_proc_version(None) == (None, None)


def test_swap_rates():
    assert h.swap_rates({"pswpin": 100, "pswpout": 10}, {"pswpin": 300, "pswpout": 10}, 2.0) == (100.0, 0.0)
    assert h.swap_rates({"pswpin": 1}, {"pswpin": 2}, 0) == (None, None)
    assert h.swap_rates({}, {"pswpin": 2}, 1.0) == (None, None)
    # A counter reset (never negative)
    assert h.swap_rates({"pswpin": 5, "pswpout": 5}, {"pswpin": 0, "pswpout": 0}, 1.0) == (0.0, 0.0)


# ---------------------------------------------------------------- collect() on fixture roots


def test_healthy_default_root_exactly(healthy):
    got = collect(healthy)
    assert got == {
        "cpu": {
            "model": "Intel(R) Xeon(R) Platinum 8480+",
            "sockets": 2,
            "cores": 112,
            "threads": 224,
            "governors": {"performance": "0-223"},
            "scaling_driver": "intel_pstate",
            "epp": {"performance": "0-223"},
            "userspace": None,
            "freq_mhz": {"min": 800, "max": 3800, "current_avg": 2000},
            "boost": True,
        },
        "numa": {
            "nodes": [
                {"id": 0, "cpus": "0-55,112-167", "memory_total_mib": 1048576, "memory_free_mib": 926250},
                {"id": 1, "cpus": "56-111,168-223", "memory_total_mib": 1048576, "memory_free_mib": 926250},
            ],
            "balancing": False,
        },
        "memory": {
            "total_mib": 2097152,
            "available_mib": 1950000,
            "swap_total_mib": 0,
            "swap_used_mib": 0,
            "swap_in_per_s": None,
            "swap_out_per_s": None,
            "sample_seconds": 0.0,
            "psi_some_avg10": 0.0,
            "psi_full_avg10": 0.0,
        },
        # The vm.* values the root was written with, read back.
        "vm": {k: mkroot.DEFAULTS[k] for k in mkroot.VM_KEYS},
        "thp": {"enabled": "madvise", "defrag": "madvise"},
        "hugepages": {"total": 0, "free": 0, "size_kb": 2048},
        "memlock": {
            "process_soft_kb": None,
            "process_hard_kb": None,
            "configured": [
                {"path": "/etc/security/limits.d/90-gpu.conf", "domain": "*", "type": "soft", "value_kb": None},
                {"path": "/etc/security/limits.d/90-gpu.conf", "domain": "*", "type": "hard", "value_kb": None},
            ],
            "process_uid": 0,
            "process_cap_ipc_lock": True,
            "systemd_default": None,
            "services": [],
        },
        "irqbalance": {"installed": True, "running": True},
        "tuned": {"profile": None},
        "irq": {"devices": 0, "irqs": 0, "pinned": [], "driver_set": 0, "unreadable": 0},
        "kernel": {"release": "5.15.0-105-generic", "version": "#115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024"},
        "os": {"id": "ubuntu", "version_id": "22.04", "pretty_name": "Ubuntu 22.04.4 LTS"},
        "kernel_log": {
            "source": "file",
            "error": None,
            "lines_scanned": 7,
            "xid": [],
            "aer": {"corrected": 0, "uncorrected": 0, "fatal": 0, "last": None},
            "sxid": [],
        },
        "unsupported": {
            "memory.swap_in_per_s": "sampling off (sample_seconds=0)",
            "memory.swap_out_per_s": "sampling off (sample_seconds=0)",
        },
    }


def test_governors_per_cpulist_and_boost_off(tmp_path):
    root = mkroot.build_root(
        tmp_path / "r", {"governor": "powersave", "governors": {"0-55,112-167": "performance"}, "boost": False}
    )
    cpu = collect(root)["cpu"]
    assert cpu["governors"] == {"performance": "0-55,112-167", "powersave": "56-111,168-223"}
    assert cpu["boost"] is False


def test_acpi_cpufreq_boost_file(tmp_path):
    root = mkroot.build_root(tmp_path / "r", {"scaling_driver": "acpi-cpufreq", "governor": "ondemand"})
    cpu = collect(root)["cpu"]
    assert cpu["scaling_driver"] == "acpi-cpufreq" and cpu["boost"] is True
    assert cpu["governors"] == {"ondemand": "0-223"}


def test_small_single_socket_host(tmp_path):
    overrides = {
        "sockets": 1,
        "cores_per_socket": 16,
        "threads_per_core": 2,
        "mem_total_mib": 262144,
        "mem_available_mib": 200000,
        "os": "debian12",
        "thp_enabled": "always",
        "thp_defrag": "always",
        "numa_balancing": 1,
        "memlock_kb": 65536,
        "process_memlock_kb": 64,
        "process_memlock_hard_kb": 8192,
        "irqbalance": False,
        "overcommit_memory": 2,
        "swappiness": 60,
        "hugepages_total": 512,
        "hugepages_free": 100,
    }
    got = collect(mkroot.build_root(tmp_path / "r", overrides))
    assert (got["cpu"]["sockets"], got["cpu"]["cores"], got["cpu"]["threads"]) == (1, 16, 32)
    assert got["numa"]["nodes"] == [{"id": 0, "cpus": "0-31", "memory_total_mib": 262144, "memory_free_mib": 190000}]
    assert got["numa"]["balancing"] is True
    assert got["os"] == {"id": "debian", "version_id": "12", "pretty_name": "Debian GNU/Linux 12 (bookworm)"}
    assert got["thp"] == {"enabled": "always", "defrag": "always"}
    assert [c["value_kb"] for c in got["memlock"]["configured"]] == [65536, 65536]
    assert (got["memlock"]["process_soft_kb"], got["memlock"]["process_hard_kb"]) == (64, 8192)
    assert got["irqbalance"] == {"installed": True, "running": False}
    assert got["vm"]["overcommit_memory"] == 2 and got["vm"]["swappiness"] == 60
    assert got["hugepages"] == {"total": 512, "free": 100, "size_kb": 2048}
    assert got["memory"]["total_mib"] == 262144 and got["memory"]["available_mib"] == 200000


def test_swapping_host(tmp_path):
    root = mkroot.build_root(
        tmp_path / "r",
        {"swap_total_mib": 8192, "swap_used_mib": 6000, "psi_memory_some_avg10": 35.0, "psi_memory_full_avg10": 12.5},
    )
    mem = collect(root)["memory"]
    assert (mem["swap_total_mib"], mem["swap_used_mib"]) == (8192, 6000)
    assert (mem["psi_some_avg10"], mem["psi_full_avg10"]) == (35.0, 12.5)


def test_vm_without_cpufreq_psi_or_numa_balancing(tmp_path):
    root = mkroot.build_root(
        tmp_path / "r", {"cpufreq": False, "psi": False, "numa_balancing": None, "irqbalance_installed": False}
    )
    got = collect(root)
    assert got["cpu"]["governors"] == {} and got["cpu"]["scaling_driver"] is None and got["cpu"]["boost"] is None
    assert got["cpu"]["freq_mhz"] == {"min": None, "max": None, "current_avg": 2000}  # from /proc/cpuinfo
    assert got["memory"]["psi_some_avg10"] is None and got["numa"]["balancing"] is None
    assert got["irqbalance"] == {"installed": False, "running": True}
    for key in ("cpu.governors", "cpu.boost", "cpu.freq_mhz.max", "memory.psi_some_avg10", "numa.balancing"):
        assert key in got["unsupported"], key
    assert "cpu.freq_mhz.current_avg" not in got["unsupported"]


# ---------------------------------------------------------------- IRQ affinity (issue 12: pinned by hand is kept)

NODE0 = "0-55,112-167"


def _hgx_irqs(nic_affinity="node", gpu_affinity="all", nic_hint=None):
    """Two 8-queue NICs (node 0 and 1) and two GPUs (node 0 and 1), as on an HGX host."""
    return [
        mkroot.irq_device("nic", "0000:17:00.0", 120, 8, name="ens1f0", numa_node=0, affinity=nic_affinity,
                          hint=nic_hint),
        mkroot.irq_device("nic", "0000:9b:00.0", 140, 8, name="ens2f0", numa_node=1),
        mkroot.irq_device("gpu", "0000:18:00.0", 200, 1, numa_node=0, affinity=gpu_affinity),
        mkroot.irq_device("gpu", "0000:9a:00.0", 201, 1, numa_node=1),
    ]  # fmt: skip


def test_irqs_spread_over_their_node_are_not_pinned(tmp_path):
    irq = collect(mkroot.build_root(tmp_path / "r", {"irq_devices": _hgx_irqs()}))["irq"]
    assert irq == {"devices": 4, "irqs": 18, "pinned": [], "driver_set": 0, "unreadable": 0}


def test_irqs_pinned_by_hand_are_reported(tmp_path):
    # set_irq_affinity-style pinning: one CPU per queue of ens1f0, and GPU 0's vector on CPU 4.
    devices = _hgx_irqs(nic_affinity=[str(i) for i in range(8)], gpu_affinity="4")
    got = collect(mkroot.build_root(tmp_path / "r", {"irq_devices": devices, "irqbalance": False}))
    irq = got["irq"]
    assert irq["devices"] == 4 and irq["irqs"] == 18 and irq["driver_set"] == 0
    assert irq["pinned"][:2] == [
        {"irq": 120, "device": "ens1f0", "cpus": "0", "numa_node": 0},
        {"irq": 121, "device": "ens1f0", "cpus": "1", "numa_node": 0},
    ]
    assert irq["pinned"][-1] == {"irq": 200, "device": "0000:18:00.0", "cpus": "4", "numa_node": 0}
    assert len(irq["pinned"]) == 9 and "irq.pinned" not in got["unsupported"]


def test_the_active_tuned_profile_is_read(tmp_path):
    """Issue 27: host_tuning leaves the governor to an active TuneD profile; the audit's reader says which is active
    (the role slurped active_profile itself before, and took an emptied one - tuned-adm off - for an active one)."""
    root = mkroot.build_root(tmp_path / "r")
    assert collect(root)["tuned"] == {"profile": None}
    (root / "etc/tuned").mkdir(parents=True, exist_ok=True)
    (root / "etc/tuned/active_profile").write_text("")
    assert collect(root)["tuned"] == {"profile": None}
    (root / "etc/tuned/active_profile").write_text("throughput-performance\n")
    assert collect(root)["tuned"] == {"profile": "throughput-performance"}


def test_irq_masks_the_driver_chose_are_not_hand_pinned(tmp_path):
    # mlx5 sets each vector's affinity to its hint (irq_set_affinity_and_hint): not an owner's decision.
    queues = [str(i) for i in range(8)]
    irq = collect(mkroot.build_root(tmp_path / "r", {"irq_devices": _hgx_irqs(nic_affinity=queues, nic_hint=queues)}))
    assert irq["irq"]["pinned"] == [] and irq["irq"]["driver_set"] == 8


def test_irq_of_a_device_without_numa_node_must_cover_every_cpu(tmp_path):
    devices = [mkroot.irq_device("nic", "0000:17:00.0", 120, 2, name="eth0", numa_node=-1, affinity=NODE0)]
    irq = collect(mkroot.build_root(tmp_path / "r", {"irq_devices": devices}))["irq"]
    assert [p["irq"] for p in irq["pinned"]] == [120, 121] and irq["pinned"][0]["numa_node"] is None


def test_nvswitch_and_audio_functions_are_not_gpus(tmp_path):
    root = mkroot.build_root(tmp_path / "r", {"irq_devices": _hgx_irqs()})
    for pci, pci_class, irq in (("0000:05:00.0", "0x068000", 300), ("0000:18:00.1", "0x040300", 301)):
        dev = root / "sys/devices/pci0000:00" / pci
        (dev / "msi_irqs").mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text(pci_class + "\n")
        (dev / "msi_irqs" / str(irq)).write_text("msix\n")
        (root / "sys/bus/pci/devices" / pci).symlink_to(f"../../../devices/pci0000:00/{pci}")
        (root / f"proc/irq/{irq}").mkdir(parents=True)
        (root / f"proc/irq/{irq}/smp_affinity_list").write_text("0\n")
    irq = collect(root)["irq"]
    assert irq["devices"] == 4 and irq["pinned"] == []


def test_unreadable_irq_affinity_is_reported(tmp_path):
    root = mkroot.build_root(tmp_path / "r", {"irq_devices": _hgx_irqs()})
    for name in ("smp_affinity_list", "smp_affinity", "affinity_hint"):
        (root / "proc/irq/200" / name).unlink()
    got = collect(root)
    assert got["irq"]["unreadable"] == 1 and got["irq"]["pinned"] == []
    assert got["unsupported"]["irq.pinned"].startswith("1 of 18 NIC/GPU IRQs")


@pytest.mark.parametrize(
    "text, cpus",
    [("00000000,0000000f", [0, 1, 2, 3]), ("00000001,00000000", [32]), ("0\n", []), ("", None), ("zz", None)],
)
def test_parse_cpumask(text, cpus):
    assert h.parse_cpumask(text) == cpus


def test_empty_root_is_all_null_with_reasons(tmp_path):
    got = collect(tmp_path)
    assert got["cpu"]["model"] is None and got["cpu"]["threads"] is None
    assert got["numa"]["nodes"] == []
    assert got["memory"]["total_mib"] is None and got["vm"]["swappiness"] is None
    assert got["kernel"] == {"release": None, "version": None}
    assert got["os"] == {"id": None, "version_id": None, "pretty_name": None}
    assert got["irqbalance"] == {"installed": False, "running": False}
    assert got["kernel_log"]["source"] == "file" and "/var/log/kern.log" in got["kernel_log"]["error"]
    for key in (
        "cpu.model",
        "cpu.sockets",
        "numa.nodes",
        "memory.total_mib",
        "vm.swappiness",
        "thp.enabled",
        "kernel.release",
        "os",
        "hugepages",
        "memlock.process_soft_kb",
    ):
        assert key in got["unsupported"], key


def test_kernel_version_from_proc_version_only(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/version").write_text("Linux version 6.8.0-31-generic (buildd@x) (gcc 13) #31-Ubuntu SMP x\n")
    assert collect(tmp_path)["kernel"] == {"release": "6.8.0-31-generic", "version": "#31-Ubuntu SMP x"}


def test_swap_rates_sampled_between_two_reads(tmp_path):
    root = mkroot.build_root(tmp_path / "r", {"pswpin": 1000, "pswpout": 50})
    ticks = iter([100.0, 100.1, 102.0])
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        (root / "proc/vmstat").write_text("pswpin 1600\npswpout 250\n")

    got = collect(root, sample_seconds=2.0, clock=lambda: next(ticks), sleep=sleep)
    mem = got["memory"]
    assert slept == [pytest.approx(1.9)]
    assert (mem["swap_in_per_s"], mem["swap_out_per_s"], mem["sample_seconds"]) == (300.0, 100.0, 2.0)
    assert "memory.swap_in_per_s" not in got["unsupported"]


def test_meanwhile_runs_inside_the_sample(tmp_path):
    # The audit's GPU and NIC reads run between the two /proc/vmstat reads: their time shortens the wait.
    root = mkroot.build_root(tmp_path / "r", {"pswpin": 1000, "pswpout": 50})
    ticks = iter([100.0, 101.5, 102.0])
    calls, slept = [], []

    def meanwhile():
        calls.append("meanwhile")
        (root / "proc/vmstat").write_text("pswpin 2000\npswpout 50\n")

    got = collect(root, sample_seconds=2.0, clock=lambda: next(ticks), sleep=slept.append, meanwhile=meanwhile)
    assert calls == ["meanwhile"]
    assert slept == [pytest.approx(0.5)]
    assert (got["memory"]["swap_in_per_s"], got["memory"]["swap_out_per_s"]) == (500.0, 0.0)


def test_sampling_really_waits(healthy):
    import time

    start = time.monotonic()
    mem = collect(healthy, sample_seconds=0.3)["memory"]
    assert time.monotonic() - start >= 0.3
    assert mem["sample_seconds"] >= 0.3
    assert (mem["swap_in_per_s"], mem["swap_out_per_s"]) == (0.0, 0.0)


def test_kernel_log_file_with_xids_and_aer(tmp_path):
    extra = [
        mkroot.xid_line(79, pci="0000:5d:00"),
        mkroot.xid_line(48, pci="0000:18:00"),
        mkroot.xid_line(48, pci="0000:9a:00", pid=None),
        mkroot.xid_line(13, pci="0000:18:00"),
    ]
    extra += mkroot.aer_lines("corrected") + mkroot.aer_lines("corrected") + mkroot.aer_lines("fatal")
    root = mkroot.build_root(tmp_path / "r", {"kern_log_extra": extra})
    log = collect(root)["kernel_log"]
    assert log["source"] == "file" and log["error"] is None
    assert log["lines_scanned"] == 7 + len(extra)
    assert [(x["code"], x["count"], x["severity"]) for x in log["xid"]] == [
        (13, 1, "low"),
        (48, 2, "critical"),
        (79, 1, "critical"),
    ]
    assert log["xid"][1]["pci"] == ["0000:18:00", "0000:9a:00"]
    assert log["xid"][1]["last"] == extra[2]
    assert (log["aer"]["corrected"], log["aer"]["uncorrected"], log["aer"]["fatal"]) == (2, 0, 1)


def test_kernel_log_file_only_the_last_lines(tmp_path):
    lines = [mkroot.xid_line(79)] + [f"kernel: filler {i}" for i in range(50)]
    root = mkroot.build_root(tmp_path / "r", {"kern_log_lines": lines})
    log = collect(root, kernel_log_lines=50)["kernel_log"]
    assert log["lines_scanned"] == 50 and log["xid"] == []
    log = collect(root, kernel_log_lines=51)["kernel_log"]
    assert [x["code"] for x in log["xid"]] == [79]


def test_tail_file_reads_backwards(tmp_path):
    path = tmp_path / "big.log"
    path.write_text("".join(f"line {i}\n" for i in range(20000)))
    got = klog.tail_file(str(path), 5000, block=1000)
    assert len(got) == 5000 and got[0] == "line 15000" and got[-1] == "line 19999"
    assert klog.tail_file(str(path), 30000)[0] == "line 0"


def test_kernel_log_other_file_and_none(healthy):
    log = collect(healthy, kernel_log="file", kernel_log_file="/var/log/messages")["kernel_log"]
    assert log["source"] == "file" and "/var/log/messages" in log["error"] and log["lines_scanned"] == 0
    log = collect(healthy, kernel_log="none")["kernel_log"]
    assert log == {
        "source": "none",
        "error": None,
        "lines_scanned": 0,
        "xid": [],
        "aer": {"corrected": 0, "uncorrected": 0, "fatal": 0, "last": None},
        "sxid": [],
    }


def test_commands_are_not_run_on_another_root(healthy):
    log = collect(healthy, kernel_log="dmesg")["kernel_log"]
    assert log["source"] == "dmesg" and "cannot run" in log["error"]


# ---------------------------------------------------------------- kernel log from commands (live root)


class FakeRun:
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        assert isinstance(argv, list), "commands must be argument lists"
        self.calls.append(argv)
        return self.answers[argv[0]]


NOW = 1717200000.0  # 2024-06-01T00:00:00Z


def test_dmesg_first_with_time_filter():
    out = (
        "2024-05-30T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, old, outside the window\n"
        "2024-05-31T23:00:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, DBE\n"
        "2024-05-31T23:30:00,000000+00:00 kernel: other\n"
    )
    run = FakeRun({"dmesg": (0, out, "")})
    log = klog.read_kernel_log(HostFS("/"), run, "auto", count=100, hours=24, now=NOW)
    assert run.calls == [["dmesg", "--kernel", "--time-format", "iso"]]
    assert log["source"] == "dmesg" and log["error"] is None and log["lines_scanned"] == 2
    assert [x["code"] for x in log["xid"]] == [48]
    log = klog.read_kernel_log(HostFS("/"), run, "auto", count=1, hours=0, now=NOW)
    assert log["lines_scanned"] == 1 and log["xid"] == []


def test_journal_when_dmesg_is_refused():
    run = FakeRun(
        {
            "dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"),
            "journalctl": (
                0,
                "-- Logs begin --\n2024-05-31T23:00:00+0000 h kernel: NVRM: Xid (PCI:0000:18:00): 74, NVLink\n",
                "",
            ),
        }
    )
    log = klog.read_kernel_log(HostFS("/"), run, "auto", count=300, hours=6, now=NOW)
    assert run.calls[1] == ["journalctl", "-k", "--no-pager", "-o", "short-iso", "-n", "300", "--since=-6h"]
    assert log["source"] == "journal" and log["error"] is None and log["lines_scanned"] == 1
    assert log["xid"][0]["code"] == 74 and log["xid"][0]["severity"] == "high"


def test_nothing_readable_is_source_none_with_the_reasons():
    run = FakeRun(
        {
            "dmesg": (127, "", "dmesg: command not found"),
            "journalctl": (0, "-- No entries --\n", "No journal files were found.\n"),
        }
    )
    log = klog.read_kernel_log(HostFS("/"), run, "auto", count=10, hours=0, now=NOW)
    assert run.calls[1][-1] == "10"  # no --since with hours=0
    assert log["source"] == "none" and log["lines_scanned"] == 0
    assert log["error"] == "dmesg: dmesg: command not found; journalctl: No journal files were found."


def test_explicit_source_keeps_its_name_on_error():
    run = FakeRun({"journalctl": (1, "", "Failed to open journal\n")})
    log = klog.read_kernel_log(HostFS("/"), run, "journal", now=NOW)
    assert log["source"] == "journal" and log["error"] == "journalctl: Failed to open journal"
    assert [c[0] for c in run.calls] == ["journalctl"]


def test_auto_on_live_root_without_runner():
    log = klog.read_kernel_log(HostFS("/"), None, "auto", now=NOW)
    assert log["source"] == "none" and "cannot run" in log["error"]


def test_bad_kernel_log_mode():
    with pytest.raises(ValueError, match="kernel_log must be one of"):
        klog.read_kernel_log(HostFS("/"), None, "syslog")


# ---------------------------------------------------------------- mkroot


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_mkroot_is_deterministic(tmp_path):
    overrides = {"governor": "powersave", "swap_total_mib": 8192, "swap_used_mib": 100, "kern_log_extra": ["x"]}
    a = _tree(mkroot.build_root(tmp_path / "a", overrides))
    b = _tree(mkroot.build_root(tmp_path / "b", overrides))
    assert a == b and len(a) > 2000


def test_mkroot_rejects_bad_overrides(tmp_path):
    with pytest.raises(ValueError, match="unknown override 'governer'"):
        mkroot.build_root(tmp_path / "a", {"governer": "powersave"})
    with pytest.raises(ValueError, match="swap_used_mib"):
        mkroot.build_root(tmp_path / "b", {"swap_total_mib": 10, "swap_used_mib": 20})
    with pytest.raises(ValueError, match="thp_enabled"):
        mkroot.build_root(tmp_path / "c", {"thp_enabled": "sometimes"})
    with pytest.raises(ValueError, match="os must be one of"):
        mkroot.build_root(tmp_path / "d", {"os": "windows"})


def test_mkroot_never_overwrites_foreign_directories(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        mkroot.build_root(tmp_path / "mine", replace=True)
    assert (tmp_path / "mine" / "keep.txt").exists()
    root = mkroot.build_root(tmp_path / "r")
    with pytest.raises(FileExistsError):
        mkroot.build_root(root)
    mkroot.build_root(root, {"swappiness": 60}, replace=True)
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"


def test_mkroot_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, str(MKROOT), str(tmp_path / "r"), "--set", "sockets=1", "--set", "governor=powersave",
         "--set", 'kern_log_lines=["a", "b"]'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    root = Path(out.stdout.strip())
    assert (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text() == "powersave\n"
    assert (root / "var/log/kern.log").read_text() == "a\nb\n"
    marker = json.loads((root / mkroot.MARKER).read_text())
    assert marker["settings"]["sockets"] == 1
    bad = subprocess.run([sys.executable, str(MKROOT), str(tmp_path / "x"), "--set", "nope=1"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "unknown override 'nope'" in bad.stderr
    keys = subprocess.run([sys.executable, str(MKROOT), "--list-keys"], capture_output=True, text=True, check=True)
    assert 'governor="performance"' in keys.stdout


def test_every_override_key_is_documented():
    doc = mkroot.__doc__
    missing = [k for k in mkroot.DEFAULTS if k not in doc]
    assert not missing, missing


def test_layout_matches_the_simulated_gpu_affinity():
    # tests/sim/nvml/profiles.py gives HGX GPUs these CPU affinities: the host fixture must agree.
    nodes = {}
    for c in mkroot.cpu_layout(mkroot.settings()):
        nodes.setdefault(c["node"], []).append(c["id"])
    assert [mkroot.cpulist(v) for _, v in sorted(nodes.items())] == ["0-55,112-167", "56-111,168-223"]


# ------------------------------------------- issue 13: memlock where jobs run, Arm hosts


@pytest.mark.parametrize(
    "value, limits",
    [
        ("infinity", (None, None)),
        ("64M", (65536, 65536)),
        ("8388608", (8192, 8192)),
        ("1G:infinity", (1048576, None)),
        ("512K", (512, 512)),
    ],
)
def test_parse_systemd_limit(value, limits):
    assert systemd_unit.parse_systemd_limit(value) == limits


def test_parse_systemd_limit_rejects_junk():
    with pytest.raises(ValueError):
        systemd_unit.parse_systemd_limit("lots")


def test_unit_assignments_only_in_their_section_in_order():
    text = "[Unit]\nLimitMEMLOCK=1\n[Service]\n# LimitMEMLOCK=2\nLimitMEMLOCK=64M\n; x\n"
    text += "LimitMEMLOCK=\nLimitMEMLOCK=infinity\n"
    assert systemd_unit.unit_assignments(text, "Service", "LimitMEMLOCK") == ["64M", "", "infinity"]


def test_job_services_units_dropins_default_and_processes(tmp_path):
    root = mkroot.build_root(
        tmp_path / "r",
        {
            "systemd_default_memlock": "64M",
            "job_services": [
                # containerd's upstream unit has no LimitMEMLOCK: DefaultLimitMEMLOCK applies to the process
                mkroot.job_service("containerd.service"),
                # an override drop-in wins over the packaged unit's line
                mkroot.job_service(
                    "slurmd.service", "16M", dropins={"override.conf": "[Service]\nLimitMEMLOCK=infinity\n"}
                ),
                mkroot.job_service("kubelet.service", running=False),
            ],
        },
    )
    mem = h.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")["memlock"]
    assert mem["systemd_default"] == {"soft_kb": 65536, "hard_kb": 65536, "source": "/etc/systemd/system.conf"}
    by_unit = {s["unit"]: s for s in mem["services"]}
    assert list(by_unit) == ["slurmd.service", "kubelet.service", "containerd.service"]
    assert by_unit["containerd.service"]["limit"] is None
    assert by_unit["containerd.service"]["processes"] == [
        {"pid": 2303, "soft_kb": 65536, "hard_kb": 65536, "error": None}
    ]
    slurmd = by_unit["slurmd.service"]
    assert slurmd["limit"] == {
        "soft_kb": None,
        "hard_kb": None,
        "source": "/etc/systemd/system/slurmd.service.d/override.conf",
    }
    assert slurmd["dropins"] == ["/etc/systemd/system/slurmd.service.d/override.conf"]
    assert by_unit["kubelet.service"]["processes"] == []


def test_masked_unit_is_absent_and_process_caps_are_read(tmp_path):
    root = mkroot.build_root(
        tmp_path / "r",
        {
            "job_services": [mkroot.job_service("docker.service", running=False)],
            "process_uid": 1000,
            "process_cap_ipc_lock": False,
        },
    )
    (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/system/docker.service").symlink_to("/dev/null")
    mem = h.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")["memlock"]
    assert mem["services"] == []
    assert (mem["process_uid"], mem["process_cap_ipc_lock"]) == (1000, False)


def test_arm_cpuinfo_model_from_implementer_and_part():
    blocks = h.parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n")
    assert h.cpu_model(blocks) == "ARM Neoverse-V2"
    assert h.arm_cpu_model("0x4e", "0x004") == "NVIDIA part 0x004"


def test_grace_hopper_root(tmp_path):
    """GH200: 72 Neoverse V2 cores, no SMT, one NUMA node with CPUs and CPU-less nodes for the GPU's memory."""
    root = mkroot.build_root(tmp_path / "gh", mkroot.grace_hopper())
    facts = h.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    cpu = facts["cpu"]
    assert (cpu["model"], cpu["sockets"], cpu["cores"], cpu["threads"]) == ("ARM Neoverse-V2", 1, 72, 72)
    assert cpu["scaling_driver"] == "cppc_cpufreq" and cpu["governors"] == {"performance": "0-71"}
    nodes = facts["numa"]["nodes"]
    assert [(n["id"], n["cpus"]) for n in nodes[:2]] == [(0, "0-71"), (1, "")]
    assert nodes[1]["memory_total_mib"] == 96 * 1024 and len(nodes) == 9
    assert "cpu.model" not in facts["unsupported"]
    # Without /proc/cpuinfo's MIDR fields, sysfs midr_el1 names the CPU too.
    (root / "proc/cpuinfo").write_text("processor\t: 0\n\n")
    assert h.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")["cpu"]["model"] == "ARM Neoverse-V2"
