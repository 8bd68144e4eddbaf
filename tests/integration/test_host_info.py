"""host_info through real Ansible (ansible-runner) against mkroot fixture roots and this machine's own root.

One playbook run covers every scenario: each inventory host is a local-connection host whose `root` points at its
own fixture tree, so the module runs exactly as on a real host, in its own process.
"""

from __future__ import annotations

import sys

import labkit
import pytest
import simulators
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import host
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

TASK = "Read host state"


mkroot = simulators.mkroot()

PLAYBOOK = f"""---
- name: Run host_info against fixture roots
  hosts: all
  gather_facts: false
  tasks:
    - name: {TASK}
      gpufleet.tuning.host_info:
        root: "{{{{ host_root | default('/') }}}}"
        sample_seconds: "{{{{ host_sample_seconds | default(0.2) }}}}"
        kernel_log: "{{{{ host_kernel_log | default('auto') }}}}"
        kernel_log_file: "{{{{ host_kernel_log_file | default(omit) }}}}"
        kernel_log_lines: "{{{{ host_kernel_log_lines | default(5000) }}}}"
        kernel_log_since_hours: "{{{{ host_kernel_log_since_hours | default(24) }}}}"
      check_mode: "{{{{ host_check_mode | default(false) }}}}"
"""

# host name -> mkroot overrides
ROOTS = {
    "healthy": {},
    "swapping": {
        "swap_total_mib": 8192,
        "swap_used_mib": 6000,
        "pswpin": 123456,
        "pswpout": 654321,
        "psi_memory_some_avg10": 35.0,
        "psi_memory_full_avg10": 12.0,
        "swappiness": 60,
        "mem_available_mib": 20000,
    },
    "powersave": {"governor": "powersave", "boost": False, "freq_max_mhz": 2000},
    "small": {
        "sockets": 1,
        "cores_per_socket": 16,
        "threads_per_core": 2,
        "os": "debian12",
        "kernel_release": "6.1.0-21-amd64",
        "kernel_version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.90-1 (2024-05-03)",
        "thp_enabled": "always",
        "numa_balancing": 1,
        "memlock_kb": 65536,
        "process_memlock_kb": 64,
        "irqbalance": False,
        "overcommit_memory": 2,
    },
    "vm": {"cpufreq": False, "psi": False, "numa_balancing": None, "irqbalance_installed": False, "irqbalance": False},
    "xid": {
        "kern_log_extra": [
            mkroot.xid_line(79, pci="0000:5d:00"),
            mkroot.xid_line(48, pci="0000:18:00"),
            mkroot.xid_line(48, pci="0000:9a:00", pid=None),
            mkroot.xid_line(13, pci="0000:18:00"),
            *mkroot.aer_lines("corrected"),
            *mkroot.aer_lines("uncorrected"),
            *mkroot.aer_lines("fatal"),
        ]
    },
    "nolog": {"kern_log": False},
    # NVIDIA GH200 (aarch64) running Slurm and containerd: slurmd ships LimitMEMLOCK=infinity (Slurm's own unit),
    # containerd's upstream unit sets none.
    "gh200": mkroot.grace_hopper(
        job_services=[
            mkroot.job_service("slurmd.service", "infinity"),
            mkroot.job_service("containerd.service"),
        ]
    ),
}

# host name -> (mkroot overrides or None for no root at all, extra host vars)
OPTIONS = {
    "checkmode": ({}, {"host_check_mode": True}),
    "nosample": ({}, {"host_sample_seconds": 0}),
    "lognone": ({}, {"host_kernel_log": "none"}),
    "lastlines": (
        {"kern_log_lines": [mkroot.xid_line(79)] + [f"kernel: filler {i}" for i in range(20)]},
        {"host_kernel_log_lines": 20},
    ),
    "bad_sample": ({}, {"host_sample_seconds": 11}),
    "bad_lines": ({}, {"host_kernel_log_lines": 0}),
    "bad_since": ({}, {"host_kernel_log_since_hours": -1}),
    "bad_mode": ({}, {"host_kernel_log": "syslog"}),
    "bad_file": ({}, {"host_kernel_log_file": "var/log/kern.log"}),
    "bad_root": (None, {"host_root": "/nonexistent/root"}),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host_info")
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts: dict[str, dict] = {}
    for name, overrides in ROOTS.items():
        hosts[name] = {**base, "host_root": str(mkroot.build_root(tmp / name, overrides))}
    for name, (overrides, extra) in OPTIONS.items():
        hostvars = {**base}
        if overrides is not None:
            hostvars["host_root"] = str(mkroot.build_root(tmp / name, overrides))
        hosts[name] = {**hostvars, **extra}
    # This machine itself: values vary, only types are checked.
    hosts["live"] = {**base, "host_sample_seconds": 0.1}
    inventory = tmp / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    playbook = tmp / "host_info.yml"
    playbook.write_text(PLAYBOOK)
    result = run_playbook(str(playbook), str(inventory), forks=10)
    assert set(result.hosts) == set(hosts), f"missing hosts: {set(hosts) - set(result.hosts)}"
    return result.hosts


def _host(fleet, name) -> dict:
    res = fleet[name]
    assert res.status == "ok", f"{name}: {res.status}: {res.message}"
    out = res.results[TASK]
    assert out["changed"] is False
    return out["host"]


def test_healthy(fleet, tmp_path):
    got = _host(fleet, "healthy")
    # Through Ansible, the CPU facts the reader finds in the same default root (tests/unit/test_host.py pins each
    # value of that root).
    direct = host.collect(HostFS(str(mkroot.build_root(tmp_path / "root", ROOTS["healthy"]))), sample_seconds=0)
    assert got["cpu"] == direct["cpu"] and got["cpu"]["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert [(n["id"], n["cpus"]) for n in got["numa"]["nodes"]] == [(0, "0-55,112-167"), (1, "56-111,168-223")]
    assert got["numa"]["balancing"] is False
    mem = got["memory"]
    assert (mem["total_mib"], mem["swap_total_mib"], mem["swap_used_mib"]) == (2097152, 0, 0)
    assert (mem["swap_in_per_s"], mem["swap_out_per_s"]) == (0.0, 0.0) and mem["sample_seconds"] >= 0.2
    assert got["vm"]["swappiness"] == 10 and got["thp"]["enabled"] == "madvise"
    assert got["memlock"]["process_soft_kb"] is None
    assert got["irqbalance"] == {"installed": True, "running": True}
    assert got["os"]["id"] == "ubuntu" and got["kernel"]["release"] == "5.15.0-105-generic"
    assert got["kernel_log"]["source"] == "file" and got["kernel_log"]["error"] is None
    assert got["kernel_log"]["xid"] == [] and got["kernel_log"]["lines_scanned"] == 7
    assert got["unsupported"] == {}


def test_grace_hopper_with_job_services(fleet):
    """aarch64: the model from CPU implementer/part, 72 cores without SMT, CPU-less NUMA nodes; the memlock limits
    of the job daemons' units and processes."""
    got = _host(fleet, "gh200")
    cpu = got["cpu"]
    assert (cpu["model"], cpu["sockets"], cpu["cores"], cpu["threads"]) == ("ARM Neoverse-V2", 1, 72, 72)
    assert cpu["scaling_driver"] == "cppc_cpufreq" and cpu["boost"] is None
    assert [(n["id"], n["cpus"], n["memory_total_mib"]) for n in got["numa"]["nodes"][:3]] == [
        (0, "0-71", 491520),
        (1, "", 98304),
        (2, "", 0),
    ]
    services = {s["unit"]: s for s in got["memlock"]["services"]}
    assert services["slurmd.service"]["limit"]["soft_kb"] is None
    assert services["slurmd.service"]["processes"][0]["soft_kb"] is None
    assert services["containerd.service"]["limit"] is None
    assert services["containerd.service"]["processes"] == [
        {"pid": 2303, "soft_kb": 8192, "hard_kb": 8192, "error": None}
    ]
    assert got["memlock"]["process_cap_ipc_lock"] is True
    assert set(got["unsupported"]) == {"cpu.boost"}


def test_swapping(fleet):
    mem = _host(fleet, "swapping")["memory"]
    assert (mem["swap_total_mib"], mem["swap_used_mib"], mem["available_mib"]) == (8192, 6000, 20000)
    assert (mem["psi_some_avg10"], mem["psi_full_avg10"]) == (35.0, 12.0)
    assert _host(fleet, "swapping")["vm"]["swappiness"] == 60


def test_powersave(fleet):
    cpu = _host(fleet, "powersave")["cpu"]
    assert cpu["governors"] == {"powersave": "0-223"}
    assert cpu["boost"] is False and cpu["freq_mhz"]["max"] == 2000


def test_small_host(fleet):
    got = _host(fleet, "small")
    assert (got["cpu"]["sockets"], got["cpu"]["cores"], got["cpu"]["threads"]) == (1, 16, 32)
    assert [n["cpus"] for n in got["numa"]["nodes"]] == ["0-31"]
    assert got["numa"]["balancing"] is True
    assert got["os"] == {"id": "debian", "version_id": "12", "pretty_name": "Debian GNU/Linux 12 (bookworm)"}
    assert got["kernel"] == {
        "release": "6.1.0-21-amd64",
        "version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.90-1 (2024-05-03)",
    }
    assert got["thp"]["enabled"] == "always"
    assert got["memlock"]["process_soft_kb"] == 64
    assert {(c["type"], c["value_kb"]) for c in got["memlock"]["configured"]} == {("soft", 65536), ("hard", 65536)}
    assert got["irqbalance"] == {"installed": True, "running": False}
    assert got["vm"]["overcommit_memory"] == 2


def test_vm_without_cpufreq(fleet):
    got = _host(fleet, "vm")
    assert got["cpu"]["governors"] == {} and got["cpu"]["boost"] is None
    assert got["memory"]["psi_some_avg10"] is None and got["numa"]["balancing"] is None
    assert got["irqbalance"] == {"installed": False, "running": False}
    assert {"cpu.governors", "cpu.boost", "memory.psi_some_avg10", "numa.balancing"} <= set(got["unsupported"])


def test_xids_and_aer_from_the_log_file(fleet):
    log = _host(fleet, "xid")["kernel_log"]
    assert [(x["code"], x["count"], x["severity"], x["pci"]) for x in log["xid"]] == [
        (13, 1, "low", ["0000:18:00"]),
        (48, 2, "critical", ["0000:18:00", "0000:9a:00"]),
        (79, 1, "critical", ["0000:5d:00"]),
    ]
    assert log["xid"][2]["meaning"] == "GPU has fallen off the bus"
    assert "GPU has fallen off the bus." in log["xid"][2]["last"]
    assert {k: log["aer"][k] for k in ("corrected", "uncorrected", "fatal")} == {
        "corrected": 1,
        "uncorrected": 1,
        "fatal": 1,
    }


def test_missing_log_file_is_not_a_failure(fleet):
    log = _host(fleet, "nolog")["kernel_log"]
    assert log["source"] == "file" and "/var/log/kern.log" in log["error"] and log["lines_scanned"] == 0


def test_check_mode_returns_the_same(fleet):
    assert _host(fleet, "checkmode")["cpu"] == _host(fleet, "healthy")["cpu"]


def test_options(fleet):
    mem = _host(fleet, "nosample")["memory"]
    assert (mem["swap_in_per_s"], mem["swap_out_per_s"], mem["sample_seconds"]) == (None, None, 0.0)
    assert _host(fleet, "lognone")["kernel_log"]["source"] == "none"
    last = _host(fleet, "lastlines")["kernel_log"]
    assert last["lines_scanned"] == 20 and last["xid"] == []


@pytest.mark.parametrize(
    "name, message",
    [
        ("bad_sample", "sample_seconds: must be from 0 to 10"),
        ("bad_lines", "kernel_log_lines: must be from 1 to 100000"),
        ("bad_since", "kernel_log_since_hours: must be 0"),
        ("bad_mode", "value of kernel_log must be one of: auto, dmesg, journal, file, none"),
        ("bad_file", "kernel_log_file: must be an absolute path"),
        ("bad_root", "root: not a directory: /nonexistent/root"),
    ],
)
def test_bad_input_is_a_clear_error(fleet, name, message):
    labkit.assert_clear_error(fleet[name], message)


def test_live_root_has_sane_types(fleet):
    got = _host(fleet, "live")
    cpu = got["cpu"]
    assert isinstance(cpu["threads"], int) and cpu["threads"] >= 1
    assert isinstance(cpu["governors"], dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in cpu["governors"].items())
    assert cpu["boost"] is None or isinstance(cpu["boost"], bool)
    mem = got["memory"]
    assert isinstance(mem["total_mib"], int) and mem["total_mib"] > 0
    assert isinstance(mem["swap_in_per_s"], float) and mem["swap_in_per_s"] >= 0
    assert mem["sample_seconds"] >= 0.1
    assert isinstance(got["vm"]["swappiness"], int)
    assert isinstance(got["irqbalance"]["running"], bool)
    assert isinstance(got["kernel"]["release"], str) and got["kernel"]["release"]
    assert all(isinstance(n["id"], int) for n in got["numa"]["nodes"])
    log = got["kernel_log"]
    assert log["source"] in ("dmesg", "journal", "none")
    assert (log["error"] is None) == (log["source"] != "none")
    assert isinstance(log["lines_scanned"], int) and isinstance(log["xid"], list)
    assert set(log["aer"]) == {"corrected", "uncorrected", "fatal", "last"}
    assert isinstance(got["unsupported"], dict)
