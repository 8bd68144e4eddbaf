"""The balance probe (module_utils/probe.py): its /proc parsers, and one whole sample through unmodified pynvml over
the simulated libnvidia-ml.so.1 with fixture /proc and /sys trees that the test advances during the window (the
probe's ``sleep`` is where time passes: the fixture's counters move there, as a kernel's would)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import rule_facts
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml, probe, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import balance

HZ = 100


def _stat(pid, name, ticks, threads, cpu, state="R"):
    """A /proc/<pid>/stat line (proc_pid_stat(5)); utime carries all the ticks."""
    fields = [state, "1", str(pid), str(pid), "0", "-1", "4194304", "0", "0", "0", "0", str(ticks), "0"]
    fields += ["0", "0", "20", "0", str(threads), "0", "100", "1000", "100"] + ["0"] * 14 + [str(cpu)] + ["0"] * 13
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


def test_pid_stat_name_with_spaces_and_parentheses():
    text = _stat(4242, "pt_data (worker) 3)", 1234, 7, 5)
    assert probe.parse_pid_stat(text) == {
        "name": "pt_data (worker) 3)",
        "state": "R",
        "ticks": 1234,
        "threads": 7,
        "processor": 5,
        "start": 100,
    }
    assert probe.parse_pid_stat("") is None
    assert probe.parse_pid_stat("garbage") is None


def test_proc_stat_busy_counts_irq_and_steal_and_not_iowait():
    before = probe.parse_proc_stat_cpus("cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\ncpu1 0 0 0 0\n")
    after = probe.parse_proc_stat_cpus("cpu0 160 0 60 820 60 5 5 10 0 0\ncpu1 0 0 0 100\nintr 1 2\n")
    # cpu0: busy +60 user +10 system +5 irq +5 softirq +10 steal = 90 of 90 + 20 idle + 10 iowait = 120
    assert probe.busy_pct(before, after, [0]) == 75.0
    assert probe.busy_pct(before, after, [1]) == 0.0
    assert probe.busy_pct(before, after, [0, 1]) == round(100 * 90 / 220, 1)
    assert probe.busy_pct(before, after, [7]) is None


class Host:
    """Fixture /proc and /sys under one root, with counters the test moves forward."""

    def __init__(self, root: Path):
        self.root = root
        self.cpu = {0: [0, 0], 1: [0, 0], 2: [0, 0], 3: [0, 0]}  # busy, idle jiffies
        self.swap = [1000, 2000]
        self.procs: dict[int, dict] = {}

    def write(self, path: str, text: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def flush(self) -> None:
        self.write("/proc/stat", "".join(f"cpu{c} {b} 0 0 {i} 0 0 0 0 0 0\n" for c, (b, i) in self.cpu.items()))
        self.write("/proc/vmstat", f"nr_free_pages 1\npswpin {self.swap[0]}\npswpout {self.swap[1]}\n")
        self.write("/proc/meminfo", "MemTotal: 1000 kB\nSwapTotal: 8388608 kB\nSwapFree: 2097152 kB\n")
        self.write("/proc/pressure/memory", "some avg10=31.50 avg60=20.00 avg300=5.00 total=1\nfull avg10=1.00\n")
        for pid, p in self.procs.items():
            if p.get("gone"):
                for path in sorted((self.root / f"proc/{pid}").rglob("*"), reverse=True):
                    path.unlink() if path.is_file() else path.rmdir()
                continue
            ticks = sum(t for t, _cpu in p["tasks"].values())
            first_cpu = next(iter(p["tasks"].values()))[1]
            self.write(f"/proc/{pid}/stat", _stat(pid, p["name"], ticks, len(p["tasks"]), first_cpu))
            self.write(f"/proc/{pid}/status", f"Name:\t{p['name']}\nCpus_allowed_list:\t{p['allowed']}\n")
            for tid, (t, cpu) in p["tasks"].items():
                self.write(f"/proc/{pid}/task/{tid}/stat", _stat(tid, p["name"], t, len(p["tasks"]), cpu))


@pytest.fixture
def sim_nvml(sim_lib, profiles, tmp_path, monkeypatch):
    """pynvml bound in-process to the simulated library (restored afterwards); returns a state writer."""
    import pynvml

    saved = pynvml.nvmlLib
    state_path = tmp_path / "nvml.state"
    monkeypatch.setenv("FAKE_NVML_STATE", str(state_path))

    def write(overrides):
        profiles.write_state(state_path, profiles.build_state("h100", gpus=2, driver="550", overrides=overrides))

    nv = nvml.load_pynvml(str(sim_lib))
    yield nv, write, state_path
    pynvml.nvmlLib = saved
    cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
    if isinstance(cache, dict):
        cache.clear()


def _balance(sample, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate({"probe": sample}, policy, rules=balance.RULES)}


def test_one_sample_of_a_starved_far_pinned_job_while_the_host_swaps(tmp_path, sim_nvml, profiles):
    nv, write_state, state_path = sim_nvml
    host = Host(tmp_path / "root")
    # GPU 0 (bus 18) on NUMA node 1 per sysfs, local CPUs 2-3; node 0 has CPUs 0-1. NVML says otherwise
    # (profile: node 0, CPUs 0-55,112-167): sysfs wins.
    host.write("/sys/bus/pci/devices/0000:18:00.0/numa_node", "1\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/local_cpulist", "2-3\n")
    host.write("/sys/devices/system/node/node0/cpulist", "0-1\n")
    host.write("/sys/devices/system/node/node1/cpulist", "2-3\n")
    # PID 700 holds GPU 0: two threads pinned to CPU 0 (far from the GPU). PID 800 holds GPU 1 and exits mid-way.
    host.procs[700] = {"name": "python3", "allowed": "0", "tasks": {700: (500, 0), 701: (100, 0)}}
    host.procs[800] = {"name": "infer", "allowed": "0-3", "tasks": {800: (10, 3)}}
    host.flush()
    write_state(
        [
            "gpu.0.processes=700:2147483648",
            "gpu.1.processes=800:1073741824",
            "gpu.0.utilization_gpu=10",
            "gpu.0.utilization_memory=2",
            "gpu.1.utilization_gpu=95",
        ]
    )
    reads = []

    def sleep(seconds):
        # One second passes per read: CPU 0 fully busy (the job's main thread 95 ticks, its loader 5),
        # CPUs 1-3 idle; 150 pages swapped in and 250 out; GPU 0's utilization alternates 10 and 30.
        reads.append(seconds)
        host.cpu[0][0] += HZ
        for c in (1, 2, 3):
            host.cpu[c][1] += HZ
        tasks = host.procs[700]["tasks"]
        tasks[700] = (tasks[700][0] + 95, 0)
        tasks[701] = (tasks[701][0] + 5, 0)
        host.swap[0] += 150
        host.swap[1] += 250
        host.procs[800]["gone"] = host.procs[800].get("gone") or len(reads) == 2
        host.flush()
        profiles.write_state(
            state_path,
            {**profiles.read_state(state_path), "gpu.0.utilization_gpu": "30" if len(reads) % 2 else "10"},
        )
        clock.now += 1.0

    class Clock:
        now = 100.0

        def __call__(self):
            return self.now

    clock = Clock()
    fs = HostFS(str(host.root))
    sample = probe.collect(nv, sys_fs=fs, proc_fs=fs, sample_seconds=4, reads=4, sleep=sleep, clock=clock, hz=HZ)

    assert sample["available"] and sample["sample_seconds"] == 4.0 and sample["reads"] == 4
    assert sample["cpus_online"] == 4
    assert sample["numa_nodes"] == {"0": "0-1", "1": "2-3"}
    g0, g1 = sample["gpus"]
    assert (g0["bus_id"], g0["numa_node"], g0["local_cpus"]) == ("0000:18:00.0", 1, "2-3")
    assert g0["utilization"] == {"gpu_pct": 20.0, "memory_pct": 2.0, "reads": 4}
    assert g0["local_cpus_busy_pct"] == 0.0 and g0["processes"] == [700]
    # GPU 1 has no sysfs entry in the fixture: NVML's node and affinity.
    state = profiles.read_state(state_path)
    assert (g1["numa_node"], g1["local_cpus"]) == (int(state["gpu.1.numa_node"]), state["gpu.1.cpu_affinity"])
    job, gone = sample["processes"]
    assert job == rule_facts.probe_job("python3")
    assert gone["pid"] == 800 and not gone["visible"] and "exited" in gone["error"] and gone["gpus"] == [1]
    assert sample["memory"] == {
        "swap_in_per_s": 150.0,
        "swap_out_per_s": 250.0,
        "swap_total_mib": 8192,
        "swap_used_mib": 6144,
        "psi_some_avg10": 31.5,
    }

    findings = _balance(sample)
    assert {k: f["status"] for k, f in findings.items()} == {
        "HOST-BAL-001": "fail",
        "HOST-BAL-002": "fail",
        "HOST-BAL-003": "fail",
        "HOST-BAL-004": "fail",
    }
    assert [i["pid"] for f in findings.values() for i in f["items"]] == [700] * 4
    assert findings["HOST-BAL-002"]["items"][0]["allowed_has_no_local_cpu"] is True
    # The exited process is not judged; with the job not saturating (GPU busy) HOST-BAL-001 passes.
    job["saturation_pct"] = 40.0
    assert _balance(sample)["HOST-BAL-001"]["status"] == "pass"


def test_a_proc_that_does_not_move_gives_figures_since_boot(tmp_path, sim_nvml):
    """A fixture /proc (the demo fleet's) that nothing advances: the sample says so and gives each CPU's busy share
    since boot and the process's CPU time since it started, not '?' (no tick counted) nor 0 % CPU; swap rates are
    unknown. The job started 100 ticks (1 s) after boot, /proc/uptime says 11 s: 10 s of its 2000 ticks = 200 %."""
    nv, write_state, _state_path = sim_nvml
    host = Host(tmp_path / "root")
    host.write("/sys/bus/pci/devices/0000:18:00.0/numa_node", "0\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/local_cpulist", "0-1\n")
    host.write("/proc/uptime", "11.00 30.00\n")
    host.cpu = {0: [300, 800], 1: [100, 1000], 2: [0, 1100], 3: [0, 1100]}
    host.procs[700] = {"name": "python3", "allowed": "0-1", "tasks": {700: (1500, 0), 701: (500, 1)}}
    host.flush()
    write_state(["gpu.0.processes=700:2147483648", "gpu.0.utilization_gpu=90"])
    fs = HostFS(str(host.root))
    sample = probe.collect(nv, sys_fs=fs, proc_fs=fs, sample_seconds=0.5, reads=1, hz=HZ)

    assert sample["proc_static"] is True
    assert sample["gpus"][0]["local_cpus_busy_pct"] == round(100 * 400 / 2200, 1)
    job = sample["processes"][0]
    assert job["visible"] and job["cpu_pct"] == 200.0 and job["busiest_thread_pct"] == 150.0
    assert job["last_cpu"] == {"0": {"threads": 1, "cpu_pct": 150.0}, "1": {"threads": 1, "cpu_pct": 50.0}}
    assert job["allowed_busy_pct"] == round(100 * 400 / 2200, 1) and job["saturation_pct"] == 100.0
    assert sample["memory"]["swap_in_per_s"] is None and sample["memory"]["swap_out_per_s"] is None


def test_no_driver_is_a_fact_and_the_rules_skip(sim_nvml, tmp_path):
    nv, _write, state_path = sim_nvml
    assert not state_path.exists()
    sample = probe.collect(nv, sys_fs=HostFS(str(tmp_path)), proc_fs=HostFS(str(tmp_path)), sample_seconds=0.1)
    assert not sample["available"] and "DriverNotLoaded" in sample["error"]
    assert {f["status"] for f in _balance(sample).values()} == {"skip"}


def test_an_audit_without_a_sample_skips_with_the_command_to_run():
    findings = _balance(None)
    for rule_id in ("HOST-BAL-001", "HOST-BAL-002", "HOST-BAL-003", "HOST-BAL-004"):
        assert findings[rule_id]["status"] == "skip"
        assert findings[rule_id]["message"] == "no probe sample: run gpufleet probe"


@pytest.mark.parametrize("key", ["gpu_idle_pct", "cpu_saturated_pct", "far_numa_pct"])
@pytest.mark.parametrize("value", [0, 101, -5])
def test_probe_percents_out_of_range_name_the_key(key, value):
    with pytest.raises(pol_mod.PolicyError, match=rf"policy\.probe\.{key}: must be"):
        pol_mod.validate({"probe": {key: value}})


def test_live_proc_of_this_process_reads():
    """The parsers against the running kernel's own files (not a fixture): this test's own process."""
    live = probe.read_process(HostFS("/"), os.getpid())
    assert live["stat"]["name"] and live["stat"]["threads"] >= 1 and live["tasks"]
    assert probe.parse_proc_stat_cpus(HostFS("/").read("/proc/stat"))
    assert probe._parse_cpus(live["allowed"])


def test_far_numa_needs_the_nodes_and_one_node_has_no_far_one():
    from rule_facts import healthy

    sample = healthy()["probe"]
    sample["numa_nodes"] = {}
    assert _balance(sample)["HOST-BAL-002"]["status"] == "skip"
    sample["numa_nodes"] = {"0": "0-223"}
    finding = _balance(sample)["HOST-BAL-002"]
    assert finding["status"] == "pass" and "one NUMA node" in finding["message"]
