"""The rules of rules/memory.py: GPU-MEM-001 and HOST-MEM-001..005, a passing and a failing case each (CASES), and
their tests.

Issue 13: HOST-MEM-004 judges the memlock limit where GPU jobs run and GPU-MEM-001 does not flag a full GPU alone.
Host facts come from the real reader (module_utils/host.py) over mkroot fixture roots (rule_cases.host_facts); GPU
facts from rule_facts. Each test marked "old code: ..." failed against the rules before its change."""

from __future__ import annotations

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules, targets
from rule_cases import evaluate, gpus, host, host_facts, mkroot, set_
from rule_facts import healthy


def _full_and_swapping(f):
    for g in gpus(f):
        g["memory"].update(used_mib=80281, used_pct=98.4)
    host(f)["memory"].update(
        swap_total_mib=8192, swap_used_mib=6000, swap_in_per_s=850.0, swap_out_per_s=1200.0, psi_some_avg10=35.2
    )


def _full_not_swapping(f):
    for g in gpus(f):
        g["memory"].update(used_mib=80281, used_pct=98.4)


def _swappiness_60_with_swap(f):
    host(f)["vm"]["swappiness"] = 60
    host(f)["memory"]["swap_total_mib"] = 8192


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "GPU-MEM-001": (_full_not_swapping, _full_and_swapping),
    "HOST-MEM-001": (None, set_(lambda f: host(f)["memory"], swap_in_per_s=300.0, swap_out_per_s=500.0)),
    # Without swap vm.swappiness is moot (the healthy host has none, as most cloud GPU VMs): judged where swap exists.
    "HOST-MEM-002": (set_(lambda f: host(f)["vm"], swappiness=60), _swappiness_60_with_swap),
    # RHEL's default (enabled=always, defrag=madvise) passes; the stalls come from defrag=always.
    "HOST-MEM-003": (set_(lambda f: host(f)["thp"], enabled="always"), set_(lambda f: host(f)["thp"], defrag="always")),
    "HOST-MEM-004": (
        None,
        lambda f: host(f).update(
            memlock={
                "process_soft_kb": 8192,
                "process_hard_kb": 8192,
                "configured": [{"path": "/etc/security/limits.conf", "domain": "*", "type": "soft", "value_kb": 65536}],
            }
        ),
    ),
    "HOST-MEM-005": (
        set_(lambda f: host(f)["vm"], overcommit_memory=1),
        set_(lambda f: host(f)["vm"], overcommit_memory=2),
    ),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


def _finding(facts, rule_id, overrides=None):
    return evaluate(facts, overrides)[rule_id]


def test_classic_case_study_fails_memory_rules_together():
    facts = healthy()
    _full_and_swapping(facts)
    findings = evaluate(facts)
    failing = {k for k, f in findings.items() if f["status"] == "fail"}
    assert failing == {"GPU-MEM-001", "HOST-MEM-001"}
    assert findings["GPU-MEM-001"]["severity"] == "critical"
    assert [i["gpu"] for i in findings["GPU-MEM-001"]["items"]] == list(range(8))


def test_swappiness_is_moot_without_swap():
    facts = healthy()
    host(facts)["vm"]["swappiness"] = 60  # Ubuntu's default, on a cloud VM with no swap
    finding = evaluate(facts)["HOST-MEM-002"]
    assert finding["status"] == "pass" and "no swap" in finding["message"]
    host(facts)["memory"]["swap_total_mib"] = None  # unknown: judged as before
    assert evaluate(facts)["HOST-MEM-002"]["status"] == "fail"


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


# ------------------------------------------------------------------ HOST-MEM-004


def test_wildcard_limits_line_does_not_reach_a_containerd_service(tmp_path):
    """old code: pass ("* soft memlock unlimited" counted although containerd's pods never see it). A Kubernetes node
    (kubelet + containerd): a pod has no ulimit of its own and inherits the runtime's."""
    facts, _ = host_facts(
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
    facts, _ = host_facts(
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
    facts, _ = host_facts(tmp_path, {"memlock_kb": None, "process_memlock_kb": 8192})
    facts["host"]["memlock"]["configured"] = [
        {"path": "/etc/security/limits.d/90-root.conf", "domain": "root", "type": "-", "value_kb": None}
    ]
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail", f
    assert "no soft memlock line for users" in f["message"]
    assert f["observed"]["audit_process"] == {"limit": "8 MiB", "cap_ipc_lock": True, "counted": False}


def test_an_unprivileged_session_is_evidence_a_root_one_is_not(tmp_path):
    facts, _ = host_facts(
        tmp_path,
        {"memlock_kb": None, "process_memlock_kb": "unlimited", "process_uid": 1000, "process_cap_ipc_lock": False},
        "user",
    )
    assert _finding(facts, "HOST-MEM-004")["status"] == "pass"
    facts, _ = host_facts(tmp_path, {"memlock_kb": None, "process_memlock_kb": "unlimited"}, "root")
    assert _finding(facts, "HOST-MEM-004")["status"] == "fail"  # root's unlimited says nothing about users
    facts, _ = host_facts(
        tmp_path,
        {"memlock_kb": None, "process_memlock_kb": 64, "process_uid": 1000, "process_cap_ipc_lock": False},
        "user64",
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "fail" and "unprivileged session has 64 KiB" in f["message"]


def test_a_unit_fixed_on_disk_but_not_restarted_still_fails_and_says_restart(tmp_path):
    facts, _ = host_facts(
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
    facts, _ = host_facts(
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
    facts, _ = host_facts(
        tmp_path,
        {"job_services": [mkroot.job_service("kubelet.service"), mkroot.job_service("containerd.service", "infinity")]},
        "k8s",
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and f["message"] == "containerd.service give jobs enough locked memory", f
    facts, _ = host_facts(tmp_path, {"job_services": [mkroot.job_service("kubelet.service")]}, "kubelet")
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and "users' jobs may lock enough memory" in f["message"]


def test_without_an_rdma_device_the_memlock_limit_binds_no_gpu_job(tmp_path):
    """CUDA's pinned host memory is pinned by the driver, not mlock: only RDMA registration (InfiniBand, RoCE, EFA)
    counts against RLIMIT_MEMLOCK. A stock host with no RDMA device (Google Cloud A3 High: GPUDirect-TCPX) passes
    whatever limits.conf says; the same host with an HCA fails."""
    facts, _ = host_facts(tmp_path, {"memlock_kb": 8192, "process_memlock_kb": 8192})
    assert _finding(facts, "HOST-MEM-004")["status"] == "fail"  # healthy() has eight ConnectX-7 ports
    facts["network"]["infiniband"] = []
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and "no RDMA device" in f["message"], f


def test_dockerd_and_a_runtime_without_kubelet_are_read_not_judged(tmp_path):
    """docker run --ulimit memlock=-1 gives a container its limit whatever dockerd has (NGC containers are run that
    way); without kubelet, containerd's containers get their limit from the tool that runs them. Users' limits.conf
    is what is judged then."""
    facts, _ = host_facts(
        tmp_path,
        {"job_services": [mkroot.job_service("docker.service"), mkroot.job_service("containerd.service")]},
    )
    f = _finding(facts, "HOST-MEM-004")
    assert f["status"] == "pass" and "users' jobs may lock enough memory" in f["message"], f
    # with kubelet beside it, the same containerd is judged (a pod inherits it)
    facts, _ = host_facts(
        tmp_path,
        {"job_services": [mkroot.job_service("kubelet.service"), mkroot.job_service("containerd.service")]},
        "k8s-node",
    )
    assert _finding(facts, "HOST-MEM-004")["status"] == "fail"


# ------------------------------------------------------------------ targets (issue 27): what host_tuning sets
# Each fixable rule's target sits next to its check; host_tuning sets exactly what targets.compute returns. Before
# issue 27 the role computed them in Jinja (roles/host_tuning/tasks/targets.yml), so every test here failed then.


def _host_targets(facts, overrides=None, role_vars=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return targets.compute(facts, policy, role_vars, roles=("host_tuning",))


def _apply_memory(facts, t):
    host(facts)["vm"].update(swappiness=t["swappiness"], overcommit_memory=t["overcommit_memory"])
    host(facts)["thp"].update(enabled=t["thp_enabled"], defrag=t["thp_defrag"])


@pytest.mark.parametrize(
    "policy",
    [
        None,
        {"memory": {"max_swappiness": 5, "overcommit_memory": [1], "thp_enabled": ["never"], "thp_defrag": ["never"]}},
    ],
)
def test_setting_the_memory_targets_passes_the_checks(policy):
    facts = healthy()
    host(facts)["vm"].update(swappiness=60, overcommit_memory=2)
    host(facts)["memory"]["swap_total_mib"] = 8192
    host(facts)["thp"].update(enabled="always", defrag="always")
    rule_ids = ("HOST-MEM-002", "HOST-MEM-003", "HOST-MEM-005")
    assert {evaluate(facts, policy)[r]["status"] for r in rule_ids} == {"fail"}
    t = _host_targets(facts, policy)["roles"]["host_tuning"]
    _apply_memory(facts, t)
    after = evaluate(facts, policy)
    assert {r: after[r]["status"] for r in rule_ids} == dict.fromkeys(rule_ids, "pass"), t


def test_a_running_value_the_policy_accepts_is_kept_else_the_policys_first():
    facts = healthy()
    host(facts)["vm"]["overcommit_memory"] = 1
    host(facts)["thp"].update(enabled="never", defrag="always")
    t = _host_targets(facts)["roles"]["host_tuning"]
    assert (t["overcommit_memory"], t["thp_enabled"], t["thp_defrag"]) == (1, "never", "madvise")
    t = _host_targets(facts, {"memory": {"overcommit_memory": [0], "thp_enabled": ["madvise", "always"]}})
    assert (t["roles"]["host_tuning"]["overcommit_memory"], t["roles"]["host_tuning"]["thp_enabled"]) == (0, "madvise")
    # No acceptable value at all: the role leaves the setting alone.
    t = _host_targets(facts, {"memory": {"overcommit_memory": [], "thp_defrag": []}})["roles"]["host_tuning"]
    assert t["overcommit_memory"] is None and t["thp_defrag"] is None
    # Unreadable: the policy's first.
    host(facts)["vm"]["overcommit_memory"] = None
    assert _host_targets(facts)["roles"]["host_tuning"]["overcommit_memory"] == 0


def test_role_variables_take_the_policys_place_and_are_listed():
    facts = healthy()
    host(facts)["vm"]["overcommit_memory"] = 1
    role_vars = {
        "host_tuning_swappiness": 1,
        "host_tuning_overcommit_memory": 0,
        "host_tuning_thp_defrag": "never",
        "host_tuning_thp_enabled": None,  # not set
    }
    out = _host_targets(facts, None, role_vars)
    t = out["roles"]["host_tuning"]
    assert (t["swappiness"], t["overcommit_memory"], t["thp_enabled"], t["thp_defrag"]) == (1, 0, "madvise", "never")
    assert out["overrides"] == [
        {"variable": "host_tuning_swappiness", "value": 1, "policy_key": "memory.max_swappiness", "policy_value": 10},
        {
            "variable": "host_tuning_thp_defrag",
            "value": "never",
            "policy_key": "memory.thp_defrag",
            "policy_value": ["madvise", "defer", "defer+madvise", "never"],
        },
        {
            "variable": "host_tuning_overcommit_memory",
            "value": 0,
            "policy_key": "memory.overcommit_memory",
            "policy_value": [0, 1],
        },
    ]


def test_the_memlock_target_in_limits_conf_and_systemd_forms():
    facts = healthy()
    t = _host_targets(facts)["roles"]["host_tuning"]
    assert (t["memlock"], t["memlock_kb"], t["memlock_systemd"]) == ("unlimited", None, "infinity")
    t = _host_targets(facts, {"memory": {"min_memlock_kb": 1048576}})["roles"]["host_tuning"]
    assert (t["memlock"], t["memlock_kb"], t["memlock_systemd"]) == ("1048576", 1048576, "1048576K")
    for given, text, kb in (("infinity", "infinity", None), (-1, "-1", None), (65536, "65536", 65536)):
        t = _host_targets(facts, None, {"host_tuning_memlock": given})["roles"]["host_tuning"]
        assert (t["memlock"], t["memlock_kb"]) == (text, kb), given
    with pytest.raises(ValueError, match="host_tuning_memlock: '8M' is not a memlock limit"):
        _host_targets(facts, None, {"host_tuning_memlock": "8M"})


def test_memlock_drop_ins_go_to_the_units_the_check_judges_and_running_daemons_need_a_restart(tmp_path):
    facts, _ = host_facts(
        tmp_path,
        {
            "job_services": [
                mkroot.job_service("kubelet.service"),  # starts no job itself
                mkroot.job_service("containerd.service"),  # running with systemd's default 8 MiB
                mkroot.job_service("slurmd.service", running=False),
                mkroot.job_service("docker.service"),  # docker run --ulimit sets a container's limit
            ]
        },
    )
    t = _host_targets(facts)["roles"]["host_tuning"]
    assert t["memlock_services"] == ["slurmd.service", "containerd.service"]  # in host_info's order
    assert t["memlock_restart"] == ["containerd.service"]
    judged = {i["unit"] for i in evaluate(facts)["HOST-MEM-004"]["items"]}
    assert judged == {"containerd.service", "slurmd.service"}  # the check's units are the fix's
    # A policy the running daemon already meets: no restart.
    t = _host_targets(facts, {"memory": {"min_memlock_kb": 8192}})["roles"]["host_tuning"]
    assert t["memlock_restart"] == []
    # The owner's list wins (and is listed, with the units the check would have chosen).
    out = _host_targets(facts, None, {"host_tuning_memlock_services": []})
    assert (
        out["roles"]["host_tuning"]["memlock_services"] == [] and out["roles"]["host_tuning"]["memlock_restart"] == []
    )
    assert [(o["variable"], o["value"], o["policy_value"]) for o in out["overrides"]] == [
        ("host_tuning_memlock_services", [], ["slurmd.service", "containerd.service"])
    ]
