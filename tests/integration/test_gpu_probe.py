"""The balance probe end to end: `gpufleet probe` runs playbooks/probe.yml through ansible-runner, the gpu_probe module
reads unmodified pynvml over the simulated libnvidia-ml.so.1 and the real /proc of processes this test starts.

The stand-ins are real processes on this machine: a bounded busy loop pinned with taskset to CPU 0 (the input-bound
job: its simulated GPU is 7 % busy) and a sleeping, unpinned one (the balanced job: its GPU 96 % busy). Each is
listed as holding a simulated GPU (state key ``gpu.N.processes=<pid>:<bytes>``). The module's ``root`` points at a
/sys tree the test writes (the GPUs' NUMA node and local CPUs, the NUMA nodes); /proc is the running host's, which
is the only place the stand-ins' PIDs exist. Only the PIDs started here are killed; each stand-in also ends by itself
after LIFETIME seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import labkit
import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

LIFETIME = 300  # seconds a stand-in runs at most if the test dies before it kills it (a loaded CI machine: minutes)
BUSY = f"import time\nend = time.monotonic() + {LIFETIME}\nwhile time.monotonic() < end:\n    pass\n"
IDLE = f"import time\ntime.sleep({LIFETIME})\n"
SECONDS = 2.0


def _sysroot(path: Path, gpu_node: int, nodes: dict[int, str]) -> Path:
    """A /sys with the first simulated GPU (bus 0000:18:00.0) on ``gpu_node`` and the NUMA nodes ``nodes``."""
    dev = path / "sys/bus/pci/devices/0000:18:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(f"{gpu_node}\n")
    (dev / "local_cpulist").write_text(nodes[gpu_node] + "\n")
    for node, cpus in nodes.items():
        d = path / f"sys/devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    return path


@pytest.fixture(scope="module")
def standins():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs: the input-bound stand-in is pinned to one of them")
    started = []
    try:
        busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", BUSY])
        started.append(busy)
        idle = subprocess.Popen([sys.executable, "-c", IDLE])
        started.append(idle)
        yield {"busy": busy.pid, "idle": idle.pid}
    finally:
        for proc in started:
            proc.kill()  # by its own PID: only what this test started
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, profiles, sim_lib, standins):
    """Three simulated hosts on this machine: starved (busy loop on CPU 0, GPU 0 idle), balanced (sleeping
    process, GPU 0 busy), far (the busy loop again, but /sys puts GPU 0 on NUMA node 1 = CPU 1)."""
    tmp = tmp_path_factory.mktemp("probe")
    one_node = {0: ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))}
    hosts = {}
    for name, pid, util, nodes, gpu_node in (
        ("starved", standins["busy"], 7, one_node, 0),
        ("balanced", standins["idle"], 96, one_node, 0),
        ("far", standins["busy"], 7, {0: "0", 1: "1"}, 1),
    ):
        state = tmp / f"{name}.state"
        profiles.write_state(
            state,
            profiles.build_state(
                "h100",
                gpus=2,
                driver="550",
                overrides=[f"gpu.0.processes={pid}:4294967296", f"gpu.0.utilization_gpu={util}"],
            ),
        )
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "gpufleet_probe_root": str(_sysroot(tmp / f"{name}-root", gpu_node, nodes)),
            "gpufleet_environment": {"LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state)},
        }
    inventory = tmp / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return inventory


@pytest.fixture(scope="module")
def probed(fleet):
    result = run_playbook("probe.yml", str(fleet), extravars={"gpufleet_probe_seconds": SECONDS})
    out = {}
    for name, host in result.hosts.items():
        assert host.status == "ok", (name, host.message)
        out[name] = host.actions["gpufleet.tuning.gpu_probe"]
    return out


def _status(res):
    return {f["rule"]: f["status"] for f in res["findings"]}


def test_input_bound_job_pinned_to_one_cpu_fails_001_and_003(probed, standins):
    res = probed["starved"]
    proc = next(p for p in res["probe"]["processes"] if p["pid"] == standins["busy"])
    assert proc["visible"] and proc["name"].startswith("python")
    assert proc["allowed_cpus"] == "0" and proc["pinned"] and proc["gpus"] == [0]
    assert proc["last_cpu"].keys() == {"0"}  # it ran where it was pinned
    assert proc["cpu_pct"] > 30  # a busy loop, even on a shared CPU
    assert proc["saturation_pct"] >= 90  # CPU 0 busy all the window
    assert res["probe"]["gpus"][0]["utilization"] == {"gpu_pct": 7.0, "memory_pct": 0.0, "reads": 2}
    assert _status(res) == {
        "HOST-BAL-001": "fail",
        "HOST-BAL-002": "pass",  # one NUMA node
        "HOST-BAL-003": "fail",
        "HOST-BAL-004": "pass",
    }
    bal1 = next(f for f in res["findings"] if f["rule"] == "HOST-BAL-001")
    assert bal1["items"][0]["pid"] == standins["busy"] and "input-bound" in bal1["message"]


def test_balanced_job_passes(probed, standins):
    res = probed["balanced"]
    proc = next(p for p in res["probe"]["processes"] if p["pid"] == standins["idle"])
    assert proc["visible"] and not proc["pinned"] and proc["cpu_pct"] < 5
    assert set(_status(res).values()) == {"pass"}, res["findings"]


def test_root_is_for_sys_and_proc_stays_live_far_node(probed, standins):
    """/sys from the fixture puts GPU 0 on node 1 (CPU 1); the live /proc has the stand-in on CPU 0: far."""
    res = probed["far"]
    assert res["probe"]["numa_nodes"] == {"0": "0", "1": "1"}
    assert res["probe"]["gpus"][0]["numa_node"] == 1 and res["probe"]["gpus"][0]["local_cpus"] == "1"
    assert _status(res)["HOST-BAL-002"] == "fail"
    item = next(f for f in res["findings"] if f["rule"] == "HOST-BAL-002")["items"][0]
    assert item["pid"] == standins["busy"] and item["far_pct"] == 100.0 and item["allowed_has_no_local_cpu"]


def test_cli_prints_gpus_processes_findings_and_exits_by_fail_on(fleet, standins):
    def probe(*args):
        return subprocess.run(
            [sys.executable, "-m", "gpufleet.cli", "probe", "-i", str(fleet), "--seconds", "1", *args],
            capture_output=True,
            text=True,
            timeout=180,
        )

    proc = probe("-l", "starved", "--fail-on", "high")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"PID {standins['busy']} " in proc.stdout
    assert "GPU 0 0000:18:00.0: 7.0% busy" in proc.stdout
    assert "FAIL HOST-BAL-001 (high)" in proc.stdout and "FAIL HOST-BAL-003 (medium)" in proc.stdout
    assert probe("-l", "balanced", "--fail-on", "info").returncode == 0
    bad = probe("--seconds", "0")
    assert bad.returncode == 3 and "--seconds: must be between 0.5 and 60" in bad.stderr


def test_bad_input_is_named_not_a_traceback(tmp_path, sim_lib):
    """Each bad option fails that host with a message naming the option and what it takes."""
    cases = {
        "reads_zero": ({"reads": 0}, "reads: must be between 1 and 60, got 0"),
        "smi_backend": ({"backend": "nvidia-smi"}, "backend: nvidia-smi cannot be used by the probe"),
        "bad_policy": ({"policy": {"probe": {"gpu_idle_pct": 200}}}, "policy.probe.gpu_idle_pct: must be a percent"),
        "bad_root": ({"root": str(tmp_path / "nope")}, "root: not a directory"),
    }
    hosts = {name: labkit.local_host(probe_args=args) for name, (args, _msg) in cases.items()}
    inventory = labkit.write_inventory(tmp_path, hosts)
    probe_args = {key: "{{ probe_args." + key + " | default(omit) }}" for key in ("reads", "backend", "policy", "root")}
    task = {"name": "Probe", "gpufleet.tuning.gpu_probe": {**probe_args, "sample_seconds": 0.5}, "ignore_errors": True}
    playbook = labkit.write_play(tmp_path, labkit.play("Bad input", tasks=[task]))
    result = run_playbook(str(playbook), str(inventory))
    for name, (_args, message) in cases.items():
        res = result.hosts[name].results["Probe"]
        assert result.hosts[name].status == "failed" and message in res["msg"], (name, res)
        assert "Traceback (most recent call last)" not in str(res)
