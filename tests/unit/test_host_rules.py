"""Issue 13: HOST-MEM-004 judges the memlock limit where GPU jobs run, HOST-CPU-002 counts what the clouds sell,
GPU-MEM-001 does not flag a full GPU alone, and an Arm (Grace Hopper) host is judged sensibly.

Host facts come from the real reader (module_utils/host.py) over mkroot fixture roots; GPU facts from rule_facts.
Each test marked "old code: ..." failed against the rules before this change (see the report of issue 13)."""

from __future__ import annotations

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import host as host_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_facts import gpu, healthy

mkroot = simulators.mkroot()


def _facts(tmp_path, overrides, name="root"):
    """The healthy 8 x H100 facts with the host part read from a fixture root built with ``overrides``."""
    facts = healthy()
    root = mkroot.build_root(tmp_path / name, overrides)
    host = host_mod.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    facts["host"]["memlock"] = host["memlock"]
    facts["host"]["cpu"] = host["cpu"]
    facts["host"]["numa"] = host["numa"]
    return facts, host


def _finding(facts, rule_id, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}[rule_id]


# ------------------------------------------------------------------ HOST-MEM-004


def test_wildcard_limits_line_does_not_reach_a_containerd_service(tmp_path):
    """old code: pass ("* soft memlock unlimited" counted although containerd's pods never see it). A Kubernetes node
    (kubelet + containerd): a pod has no ulimit of its own and inherits the runtime's."""
    facts, _ = _facts(
        tmp_path,
        {"job_services": [mkroot.job_service("kubelet.service"), mkroot.job_service("containerd.service")]},
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail", f
    assert "containerd.service" in f["message"] and "pid 2303" in f["message"] and "8 MiB" in f["message"]
    assert f["items"] == [
        {
            "unit": "containerd.service",
            "pid": 2303,
            "limit": "8 MiB",
            "problem": "containerd (pid 2303) runs with memlock 8 MiB",
        }
    ]
    assert f["observed"]["containerd.service"]["source"] == "no LimitMEMLOCK: systemd's default"


def test_slurmd_unit_with_infinity_passes_whatever_the_root_audit_has(tmp_path):
    """old code: fail (no limits.conf line and the root audit's own 8 MiB, which CAP_IPC_LOCK makes moot)."""
    facts, _ = _facts(
        tmp_path,
        {
            "memlock_kb": None,
            "process_memlock_kb": 8192,
            "job_services": [mkroot.job_service("slurmd.service", "infinity")],
        },
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass", f
    assert f["observed"]["slurmd.service"] == {
        "unit_limit": "unlimited",
        "source": "LimitMEMLOCK in /lib/systemd/system/slurmd.service",
        "running": [{"pid": 2101, "limit": "unlimited"}],
    }


def test_a_line_for_root_only_does_not_cover_users(tmp_path):
    """old code: pass (any soft line counted). limits.conf(5): only a root line applies to root, and root's own
    processes hold CAP_IPC_LOCK anyway; the users keep the default."""
    facts, _ = _facts(tmp_path, {"memlock_kb": None, "process_memlock_kb": 8192})
    facts["host"]["memlock"]["configured"] = [
        {"path": "/etc/security/limits.d/90-root.conf", "domain": "root", "type": "-", "value_kb": None}
    ]
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail", f
    assert "no soft memlock line for users" in f["message"]
    assert f["observed"]["audit_process"] == {"limit": "8 MiB", "cap_ipc_lock": True, "counted": False}


def test_an_unprivileged_session_is_evidence_a_root_one_is_not(tmp_path):
    facts, _ = _facts(
        tmp_path,
        {"memlock_kb": None, "process_memlock_kb": "unlimited", "process_uid": 1000, "process_cap_ipc_lock": False},
        "user",
    )
    assert _finding(facts, "HOST-MEM-004")["status"] == "pass"
    facts, _ = _facts(tmp_path, {"memlock_kb": None, "process_memlock_kb": "unlimited"}, "root")
    assert _finding(facts, "HOST-MEM-004")["status"] == "fail"  # root's unlimited says nothing about users
    facts, _ = _facts(
        tmp_path,
        {"memlock_kb": None, "process_memlock_kb": 64, "process_uid": 1000, "process_cap_ipc_lock": False},
        "user64",
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail" and "unprivileged session has 64 KiB" in f["message"]


def test_a_unit_fixed_on_disk_but_not_restarted_still_fails_and_says_restart(tmp_path):
    facts, _ = _facts(
        tmp_path,
        {
            "job_services": [
                mkroot.job_service("kubelet.service"),
                mkroot.job_service(
                    "containerd.service",
                    process_memlock_kb=8192,
                    dropins={"90-gpufleet-memlock.conf": "[Service]\nLimitMEMLOCK=infinity\n"},
                ),
            ]
        },
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail"
    assert "its unit now gives unlimited: restart containerd.service" in f["message"]


def test_installed_units_not_running_are_judged_by_their_unit_and_the_manager_default(tmp_path):
    facts, _ = _facts(
        tmp_path,
        {
            "systemd_default_memlock": "infinity",
            "job_services": [
                mkroot.job_service("kubelet.service", running=False),
                mkroot.job_service("crio.service", "64M", running=False),
            ],
        },
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail"
    assert [i["unit"] for i in f["items"]] == ["crio.service"]
    assert "LimitMEMLOCK in /lib/systemd/system/crio.service gives 64 MiB when started" in f["message"]
    assert f["observed"]["kubelet.service"]["source"] == "DefaultLimitMEMLOCK in /etc/systemd/system.conf"
    assert "not judged" in f["observed"]["kubelet.service"]["note"]
    # A policy that asks for 64 MiB only: both give enough.
    assert _finding(facts, "HOST-MEM-004", {"memory": {"min_memlock_kb": 65536}})["status"] == "pass"


def test_kubelet_is_read_but_pods_get_the_runtime_limit(tmp_path):
    """kubelet starts no container itself: a kubeadm kubelet.service (no LimitMEMLOCK) beside a containerd that
    gives infinity passes; kubelet alone leaves the judgement to limits.conf."""
    facts, _ = _facts(
        tmp_path,
        {"job_services": [mkroot.job_service("kubelet.service"), mkroot.job_service("containerd.service", "infinity")]},
        "k8s",
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and f["message"] == "containerd.service give jobs enough locked memory", f
    facts, _ = _facts(tmp_path, {"job_services": [mkroot.job_service("kubelet.service")]}, "kubelet")
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and "users' jobs may lock enough memory" in f["message"]


# ------------------------------------------------------------------ HOST-CPU-002


@pytest.mark.parametrize(
    "shape, threads, cores",
    [
        ("AWS p5.48xlarge", 192, 96),
        ("Google Cloud a3-highgpu-8g", 208, 104),
        ("Azure ND H100 v5", 96, 48),  # old code: fail (48 physical cores / 8 GPUs = 6 < 8)
    ],
)
def test_the_big_clouds_8_gpu_shapes_pass(shape, threads, cores):
    facts = healthy()
    facts["host"]["cpu"].update(threads=threads, cores=cores)
    f = _finding(facts, "HOST-CPU-002")
    assert f["status"] == "pass", (shape, f)
    assert f["observed"]["cpus_per_gpu"] == threads / 8


def test_fewer_cpus_than_any_cloud_shape_fails_low():
    facts = healthy()
    facts["host"]["cpu"].update(threads=64, cores=32)
    f = _finding(facts, "HOST-CPU-002")
    assert (f["status"], f["severity"]) == ("fail", "low")
    assert f["message"] == "too few CPUs for 8 GPUs: 8.0 logical CPUs per GPU"
    # An owner who also wants physical cores says so.
    facts["host"]["cpu"].update(threads=96, cores=48)
    f = _finding(facts, "HOST-CPU-002", {"cpu": {"min_cores_per_gpu": 8}})
    assert f["status"] == "fail" and "6.0 physical cores per GPU" in f["message"]


# ------------------------------------------------------------------ GPU-MEM-001


def test_full_gpu_memory_alone_is_not_a_finding():
    """old code: warn when swap activity is unknown; a full GPU alone is normal (frameworks preallocate)."""
    facts = healthy()
    for g in facts["gpu"]["gpus"]:
        g["memory"].update(used_mib=80281, used_pct=98.4)
    facts["host"]["memory"].update(swap_in_per_s=None, swap_out_per_s=None, psi_some_avg10=None)
    f = _finding(facts, "GPU-MEM-001")
    assert f["status"] == "skip" and "alone is normal" in f["message"]
    rationale = rules.BY_ID["GPU-MEM-001"].rationale
    assert "preallocates 75%" in rationale and "cannot be swapped" in rationale
    assert "spill to pinned host memory" not in rationale


# ------------------------------------------------------------------ aarch64: Grace Hopper


def test_grace_hopper_host_is_judged_sensibly(tmp_path):
    """One GH200: 72 Neoverse V2 cores; NVML puts the GPU on NUMA node 1, its own HBM, which has no CPUs.
    old code: GPU-NUMA-001 failed (the GPU's affinity 0-71 "reaches outside" the CPU-less node 1)."""
    facts, host = _facts(tmp_path, mkroot.grace_hopper())
    assert host["cpu"]["model"] == "ARM Neoverse-V2"
    g = gpu(0)
    g.update(name="NVIDIA GH200 480GB", numa_node=1, cpu_affinity="0-71")
    facts["gpu"]["gpus"] = [g]
    facts["gpu"]["gpu_count"] = 1
    facts["network"]["nics"][0]["numa_node"] = 0
    facts["network"]["nics"][1]["numa_node"] = 0
    assert _finding(facts, "HOST-CPU-002")["status"] == "pass"
    assert _finding(facts, "HOST-CPU-002")["observed"]["cpus_per_gpu"] == 72.0
    numa = _finding(facts, "GPU-NUMA-001")
    assert numa["status"] == "pass", numa
    assert _finding(facts, "HOST-CPU-001")["status"] == "pass"  # cppc_cpufreq on performance
    # The same GPU on node 0 with an affinity beyond the node's CPUs still fails.
    g.update(numa_node=0, cpu_affinity="0-80")
    assert _finding(facts, "GPU-NUMA-001")["status"] == "fail"


def test_without_an_rdma_device_the_memlock_limit_binds_no_gpu_job(tmp_path):
    """CUDA's pinned host memory is pinned by the driver, not mlock: only RDMA registration (InfiniBand, RoCE, EFA)
    counts against RLIMIT_MEMLOCK. A stock host with no RDMA device (Google Cloud A3 High: GPUDirect-TCPX) passes
    whatever limits.conf says; the same host with an HCA fails."""
    facts, _ = _facts(tmp_path, {"memlock_kb": 8192, "process_memlock_kb": 8192})
    assert _finding(facts, "HOST-MEM-004")["status"] == "fail"  # healthy() has eight ConnectX-7 ports
    facts["network"]["infiniband"] = []
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and "no RDMA device" in f["message"], f


def test_dockerd_and_a_runtime_without_kubelet_are_read_not_judged(tmp_path):
    """docker run --ulimit memlock=-1 gives a container its limit whatever dockerd has (NGC containers are run that
    way); without kubelet, containerd's containers get their limit from the tool that runs them. Users' limits.conf
    is what is judged then."""
    facts, _ = _facts(
        tmp_path,
        {"job_services": [mkroot.job_service("docker.service"), mkroot.job_service("containerd.service")]},
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and "users' jobs may lock enough memory" in f["message"], f
    # with kubelet beside it, the same containerd is judged (a pod inherits it)
    facts, _ = _facts(
        tmp_path,
        {"job_services": [mkroot.job_service("kubelet.service"), mkroot.job_service("containerd.service")]},
        "k8s-node",
    )
    assert _finding(facts, "HOST-MEM-004")["status"] == "fail"


# ------------------------------------------------------------------ HOST-CPU-001 under HWP


@pytest.mark.parametrize(
    "overrides, status, severity",
    [
        # stock Ubuntu on an Intel server: intel_pstate, powersave, EPP balance_performance -> a low warning
        ({"governor": "powersave"}, "warn", "low"),
        # the same driver steered to save power -> fails
        ({"governor": "powersave", "epp": "power"}, "fail", "high"),
        # acpi-cpufreq's powersave is the lowest clock -> fails
        ({"governor": "powersave", "scaling_driver": "acpi-cpufreq"}, "fail", "high"),
        ({}, "pass", "high"),
    ],
)
def test_powersave_under_hardware_p_states_is_a_warning_not_a_failure(tmp_path, overrides, status, severity):
    """old code: every stock Ubuntu server (intel_pstate powersave, EPP balance_performance) failed high."""
    facts, _ = _facts(tmp_path, overrides)
    f = _finding(facts, "HOST-CPU-001")
    assert (f["status"], f["severity"]) == (status, severity), f
    if status == "warn":
        assert "balance_performance" in f["message"] and "intel_pstate" in f["message"]
    # cpu.hwp_epp: [] makes the governor the only passing state
    if status == "warn":
        assert _finding(facts, "HOST-CPU-001", {"cpu": {"hwp_epp": []}})["status"] == "fail"


# ------------------------------------------------------------------ GPU-NUMA-001 with the GPU's node unknown


def _numa_unread(facts, indexes, reason="binding lacks nvmlDeviceGetNumaNodeId"):
    for g in facts["gpu"]["gpus"]:
        if g["index"] in indexes:
            g["numa_node"] = None
            g.setdefault("unsupported", {})["numa_node"] = reason


def test_numa_node_unknown_is_not_a_pass(tmp_path):
    """Issue 25: nvidia-ml-py 12.535 has no nvmlDeviceGetNumaNodeId; where sysfs says -1 too, every GPU's node was
    None and GPU-NUMA-001 passed without judging anything (one failing finding fewer than 12.560 gave on the same
    GPUs). old code: "pass" with the NICs all on node 0."""
    facts = healthy()
    _nic_all_on_node0(facts)
    assert _finding(facts, "GPU-NUMA-001")["status"] == "fail"  # what a binding that reads the node says
    # Affinity that spans both sockets: the node cannot be inferred -> unknown, never a pass.
    for g in facts["gpu"]["gpus"]:
        g["cpu_affinity"] = _all_cpus(facts)
    _numa_unread(facts, {g["index"] for g in facts["gpu"]["gpus"]})
    f = _finding(facts, "GPU-NUMA-001")
    assert f["status"] == "skip", f
    assert f["message"].startswith("unknown:") and "binding lacks nvmlDeviceGetNumaNodeId" in f["message"]


def test_numa_node_inferred_from_the_gpus_cpu_affinity():
    """A GPU whose node NVML cannot give but whose CPU affinity lies within one node is on that node (nvidia-smi
    topo -m's NUMA Affinity): the same failing finding as a binding that reads the node."""
    facts = healthy()
    _nic_all_on_node0(facts)
    expected = _finding(facts, "GPU-NUMA-001")
    _numa_unread(facts, {g["index"] for g in facts["gpu"]["gpus"]})
    f = _finding(facts, "GPU-NUMA-001")
    assert f["status"] == "fail" and f["severity"] == expected["severity"]
    assert [i["gpus"] for i in f["items"]] == [i["gpus"] for i in expected["items"]]
    assert f["observed"]["numa_node_from_cpu_affinity"] == sorted(g["index"] for g in facts["gpu"]["gpus"])


def test_numa_node_unknown_is_named_next_to_a_failure():
    facts = healthy()
    _nic_all_on_node0(facts)
    gpus = facts["gpu"]["gpus"]
    gpus[0]["cpu_affinity"] = _all_cpus(facts)
    _numa_unread(facts, {gpus[0]["index"]})
    f = _finding(facts, "GPU-NUMA-001")
    assert f["status"] == "fail"
    assert f"NUMA node of GPU {gpus[0]['index']} unknown" in f["message"]


def _nic_all_on_node0(facts):
    for nic in facts["network"]["nics"]:
        nic["numa_node"] = 0


def _all_cpus(facts):
    return ",".join(node["cpus"] for node in facts["host"]["numa"]["nodes"])
