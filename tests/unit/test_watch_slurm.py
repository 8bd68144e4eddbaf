"""watch/slurm.py on recorded Slurm 22.05 output (tests/fixtures/slurm/, recorded from the lab's real Slurm: see its
README): parsing `scontrol show node`, the drain reason, and reconcile()'s decisions (drain, update, resume, none,
foreign, suppressed, error) with the exact scontrol calls it makes. The live counterpart is
tests/integration/test_watch_slurm.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import slurm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
LOST = {"rule": "GPU-HLT-002", "severity": "critical", "message": "GPU(s) [3] fell off the bus or cannot be opened"}
ON = {"drain": True, "resume": True, "max_drained_fraction": 0.1}


def rec(name):
    return (FIXTURES / name).read_text()


class Scontrol:
    """Replays recorded scontrol output (the state of a Slurm cluster, not our code) and records every call."""

    def __init__(self, node_out, nodes_out=None, rc=0, err="", update_rc=0, update_err=""):
        self.node_out, self.nodes_out, self.rc, self.err = node_out, nodes_out, rc, err
        self.update_rc, self.update_err = update_rc, update_err
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        assert argv[0] == "scontrol"
        if argv[1:3] == ["show", "node"]:
            if self.rc:
                return self.rc, "", self.err
            if len(argv) == 4:
                return 0, self.node_out, ""
            assert self.nodes_out is not None, "unexpected scontrol show node (all nodes)"
            return 0, self.nodes_out, ""
        if argv[1] == "update":
            return self.update_rc, "", self.update_err
        raise AssertionError(f"unexpected call {argv!r}")

    @property
    def updates(self):
        return [c for c in self.calls if c[1] == "update"]


def node_block(nodes_text, name):
    blocks = nodes_text.strip().split("\n\n")
    return next(b for b in blocks if b.startswith(f"NodeName={name} ")) + "\n"


# ----------------------------------------------------------------------------------------------- parsing
def test_parse_nodes_mixed_states():
    nodes = {n["name"]: n for n in slurm.parse_nodes(rec("nodes-mixed.txt"))}
    assert sorted(nodes) == ["sl1", "sl2", "sl3"]
    assert (nodes["sl1"]["base"], nodes["sl1"]["flags"]) == ("IDLE", ["DRAIN"])
    # The comment says "Reason=none": the reason is the Reason line's, without the [user@time] suffix.
    assert nodes["sl1"]["reason"] == "maintenance: PSU swap"
    assert nodes["sl1"]["reason_user"] == "root"
    assert nodes["sl1"]["reason_time"] == "2026-12-01T19:04:58"
    assert nodes["sl1"]["partitions"] == ["gpu"]
    assert nodes["sl2"]["reason"] == "gpufleet: GPU-HLT-002 GPU(s) [3] fell off the bus or cannot be opened"
    assert nodes["sl2"]["partitions"] == ["gpu", "big"]
    assert nodes["sl3"]["state"] == "ALLOCATED+DRAIN"  # draining: a job still runs
    assert [n for n in nodes if slurm.drained_by_us(nodes[n])] == ["sl2", "sl3"]
    assert slurm.unavailable(nodes["sl1"]) and not slurm.drained_by_us(nodes["sl1"])


def test_parse_idle_down_and_just_resumed():
    (idle,) = slurm.parse_nodes(rec("node-idle.txt"))
    assert (idle["state"], idle["reason"], slurm.unavailable(idle)) == ("IDLE", None, False)
    (down,) = slurm.parse_nodes(rec("node-down-foreign.txt"))
    assert (down["base"], down["flags"]) == ("DOWN", ["DRAIN"])
    assert down["reason"] == "hw replaced, waiting for burn-in"
    (resumed,) = slurm.parse_nodes(rec("node-just-resumed.txt"))
    assert resumed["flags"] == ["NOT_RESPONDING"] and not slurm.unavailable(resumed)
    assert slurm.parse_nodes(rec("node-missing.stdout")) == []


def test_partition_sizes_from_nodes_match_scontrol_show_partition():
    """The circuit breaker sizes a partition by the nodes that list it; Slurm's own TotalNodes agrees."""
    nodes = slurm.parse_nodes(rec("nodes-idle.txt"))
    total = dict(re.findall(r"PartitionName=(\S+).*?TotalNodes=(\d+)", rec("partitions.txt"), re.S))
    assert total == {"gpu": "3", "big": "2"}
    for part, size in total.items():
        assert len([n for n in nodes if part in n["partitions"]]) == int(size)


def test_drained_nodes_agree_with_sinfo():
    nodes = slurm.parse_nodes(rec("nodes-breaker.txt"))
    drained = sorted(n["name"] for n in nodes if slurm.unavailable(n))
    sinfo = re.findall(r"^gpu\*\s+up\s+\S+\s+\d+\s+drain\s+(\S+)$", rec("sinfo-breaker.txt"), re.M)
    assert sinfo == ["sl[1-2]"] and drained == ["sl1", "sl2"]


# ------------------------------------------------------------------------------------------------- reason
def test_reason_names_the_rules_most_severe_first_and_is_stable():
    problems = [
        {"rule": "GPU-PWR-002", "severity": "high", "message": "GPU 1 power limit 500 W"},
        LOST,
        dict(LOST),  # the same rule twice: once in the reason
    ]
    reason = slurm.build_reason(problems)
    assert reason == (
        "gpufleet: GPU-HLT-002 GPU(s) [3] fell off the bus or cannot be opened; GPU-PWR-002 GPU 1 power limit 500 W"
    )
    assert slurm.build_reason(list(reversed(problems))) == reason


def test_reason_is_one_short_line_that_keeps_every_rule_id():
    problems = [
        {"rule": f"RULE-{i:03d}", "severity": "critical", "message": "a long\nmessage " + "x" * 300} for i in range(8)
    ]
    reason = slurm.build_reason(problems)
    assert len(reason) <= slurm.REASON_MAX and "\n" not in reason and reason.startswith("gpufleet: ")
    assert all(f"RULE-{i:03d}" in reason for i in range(8))
    many = [{"rule": f"RULE-{i:03d}", "severity": "critical", "message": "m"} for i in range(40)]
    assert len(slurm.build_reason(many)) <= slurm.REASON_MAX


# ---------------------------------------------------------------------------------------------- reconcile
def test_problem_on_an_idle_node_drains_it_with_the_reason():
    sc = Scontrol(rec("node-idle.txt"), rec("nodes-idle.txt"))
    out = slurm.reconcile(sc, "sl3", [LOST], True, ON)
    reason = "gpufleet: GPU-HLT-002 GPU(s) [3] fell off the bus or cannot be opened"
    assert out == {
        "action": "drain",
        "drained": True,
        "suppressed": False,
        "reason": reason,
        "message": "drained node sl3: " + reason,
    }
    assert sc.updates == [["scontrol", "update", "nodename=sl3", "state=drain", "reason=" + reason]]


def test_no_problem_on_an_idle_node_is_one_read():
    sc = Scontrol(rec("node-idle.txt"))
    out = slurm.reconcile(sc, "sl3", [], True, ON)
    assert (out["action"], out["drained"], out["reason"]) == ("none", False, None)
    assert sc.calls == [["scontrol", "show", "node", "sl3"]]


def test_already_ours_with_the_same_reason_is_not_drained_again():
    sl2 = node_block(rec("nodes-breaker.txt"), "sl2")
    sc = Scontrol(sl2)
    out = slurm.reconcile(sc, "sl2", [LOST], True, ON)
    assert (out["action"], out["drained"]) == ("none", True)
    assert sc.updates == []


def test_already_ours_keeps_its_reason_while_the_same_rules_fail():
    """The message's numbers may move between runs (another GPU, another wattage): no rewrite every run."""
    sl2 = node_block(rec("nodes-breaker.txt"), "sl2")
    sc = Scontrol(sl2)
    out = slurm.reconcile(sc, "sl2", [dict(LOST, message="GPU(s) [3, 5] fell off the bus")], True, ON)
    assert (out["action"], out["drained"]) == ("none", True)
    assert out["reason"] == "gpufleet: GPU-HLT-002 GPU(s) [3] fell off the bus or cannot be opened"  # as in Slurm
    assert sc.updates == []


def test_reason_rules():
    assert slurm.reason_rules("gpufleet: GPU-PWR-002 a; GPU-HLT-002 b; x") == ["GPU-HLT-002", "GPU-PWR-002", "x"]
    assert slurm.reason_rules("maintenance: GPU-HLT-002") == []
    assert slurm.reason_rules(None) == []


def test_already_ours_with_other_problems_rewrites_only_the_reason():
    sc = Scontrol(rec("node-draining-ours.txt"))  # draining with GPU-PWR-002's reason; now GPU-HLT-002 fails
    out = slurm.reconcile(sc, "sl3", [LOST], True, ON)
    assert (out["action"], out["drained"]) == ("update", True)
    assert sc.updates == [["scontrol", "update", "nodename=sl3", "reason=" + slurm.build_reason([LOST])]]


@pytest.mark.parametrize(
    "fixture,node", [("nodes-mixed.txt", "sl1"), ("node-down-foreign.txt", "sl3")], ids=["drained", "down"]
)
@pytest.mark.parametrize("problems", [[LOST], []], ids=["problem", "clean"])
def test_a_node_drained_or_down_by_someone_else_is_never_touched(fixture, node, problems):
    text = rec(fixture)
    sc = Scontrol(node_block(text, node) if fixture.startswith("nodes") else text)
    out = slurm.reconcile(sc, node, problems, True, ON)
    assert (out["action"], out["drained"]) == ("foreign", False)
    assert sc.updates == []
    assert "root" in out["message"] and "left alone" in out["message"]


def test_resume_only_when_on_clean_and_no_problem():
    sl2 = node_block(rec("nodes-breaker.txt"), "sl2")
    for settings, clean, problems in (
        (dict(ON, resume=False), True, []),  # resume off
        (ON, False, []),  # the run was not complete
        (ON, True, [LOST]),  # still a problem
    ):
        sc = Scontrol(sl2)
        out = slurm.reconcile(sc, "sl2", problems, clean, settings)
        assert out["action"] == "none" and out["drained"] is True, (settings, clean, problems)
        assert sc.updates == []
    sc = Scontrol(sl2)
    out = slurm.reconcile(sc, "sl2", [], True, ON)
    assert (out["action"], out["drained"]) == ("resume", False)
    assert sc.updates == [["scontrol", "update", "nodename=sl2", "state=resume"]]


@pytest.mark.parametrize(
    "fraction,floor,action,why",
    [
        (0.5, 0, "suppressed", "2 of 3 nodes already drained, down or failing"),
        (0.6, 0, "suppressed", "2 of 3 nodes already drained, down or failing"),
        (0.7, 0, "drain", None),
        (1.0, 1, "suppressed", "draining it would leave 0 of 3 nodes, below watch.slurm.min_available_nodes 1"),
    ],
)
def test_circuit_breaker_counts_every_unavailable_node_per_partition(fraction, floor, action, why):
    """sl3 is in gpu (sl1 drained by hand, sl2 by gpufleet: 2 of 3 take no jobs) and big (sl2: 1 of 2)."""
    sc = Scontrol(node_block(rec("nodes-breaker.txt"), "sl3"), rec("nodes-breaker.txt"))
    settings = dict(ON, max_drained_fraction=fraction, min_available_nodes=floor)
    out = slurm.reconcile(sc, "sl3", [LOST], True, settings)
    assert out["action"] == action
    assert out["suppressed"] is (action == "suppressed")
    assert out["drained"] is (action == "drain")
    assert len(sc.updates) == (1 if action == "drain" else 0)
    if action == "suppressed":
        assert "partition gpu" in out["message"] and why in out["message"] and "sl1,sl2" in out["message"]
        assert out["reason"] == slurm.build_reason([LOST])


def test_a_hand_drained_node_counts_for_the_breaker():
    """Partition gpu: sl1 drained by hand, sl2 by gpufleet: both take no jobs, 2 of 3 count (before, only
    gpufleet's own drains counted, and a partition thinned by hand or by other checks could be drained to nothing)."""
    nodes = slurm.parse_nodes(rec("nodes-breaker.txt"))
    sl3 = dict(next(n for n in nodes if n["name"] == "sl3"), partitions=["gpu"])
    assert slurm.breaker(nodes, sl3, 0.7, 0) == (False, None)
    hold, detail = slurm.breaker(nodes, sl3, 0.4, 0)
    assert hold and detail["nodes"] == ["sl1", "sl2"] and detail["size"] == 3 and detail["unavailable"] == 2


def test_a_down_node_counts_for_the_breaker():
    """A node set DOWN by hand (node-down-foreign.txt: DOWN+DRAIN) takes no jobs: it counts."""
    (down,) = slurm.parse_nodes(rec("node-down-foreign.txt"))
    (idle,) = slurm.parse_nodes(rec("node-idle.txt"))
    down = dict(down, name="sl2", partitions=["gpu"])
    me = dict(idle, partitions=["gpu"])
    assert slurm.breaker([down, me], me, 0.5, 0)[0] is True
    assert slurm.breaker([dict(down, base="IDLE", flags=[]), me], me, 0.5, 0) == (False, None)


@pytest.mark.parametrize("floor,action", [(1, "drain"), (2, "suppressed")])
def test_never_drains_below_min_available_nodes(floor, action):
    """All idle: draining sl3 leaves 2 of 3 nodes of gpu and 1 of 2 of big taking jobs."""
    sc = Scontrol(rec("node-idle.txt"), rec("nodes-idle.txt"))
    out = slurm.reconcile(sc, "sl3", [LOST], True, dict(ON, max_drained_fraction=1.0, min_available_nodes=floor))
    assert out["action"] == action
    if action == "suppressed":
        assert "partition big: draining it would leave 1 of 2 nodes, below watch.slurm.min_available_nodes 2" in (
            out["message"]
        )
        assert sc.updates == []


def test_the_node_read_by_the_caller_is_not_read_again():
    """reconcile(current=...) uses the node the checker already read (to see a resume) instead of a second call."""
    (idle,) = slurm.parse_nodes(rec("node-idle.txt"))
    sc = Scontrol(rec("node-idle.txt"), rec("nodes-idle.txt"))
    out = slurm.reconcile(sc, "sl3", [LOST], True, ON, current=idle)
    assert out["action"] == "drain"
    assert ["scontrol", "show", "node", "sl3"] not in sc.calls


def test_first_drain_always_allowed():
    sc = Scontrol(rec("node-idle.txt"), rec("nodes-idle.txt"))
    out = slurm.reconcile(sc, "sl3", [LOST], True, dict(ON, max_drained_fraction=0.01))
    assert out["action"] == "drain"


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"rc": 1, "err": rec("controller-down.stderr")}, "Unable to contact slurm controller"),
        ({"rc": 127, "err": "scontrol: command not found"}, "command not found"),
    ],
)
def test_scontrol_failing_is_an_error_and_changes_nothing(kwargs, text):
    sc = Scontrol(rec("node-idle.txt"), **kwargs)
    out = slurm.reconcile(sc, "sl3", [LOST], True, ON)
    assert (out["action"], out["drained"]) == ("error", False)
    assert text in out["message"] and "\n" not in out["message"]
    assert sc.updates == []


def test_unknown_node_is_an_error():
    sc = Scontrol(rec("node-missing.stdout"))
    out = slurm.reconcile(sc, "sl9", [LOST], True, ON)
    assert out["action"] == "error" and "sl9" in out["message"]
    assert sc.updates == []


def test_a_refused_drain_is_an_error():
    sc = Scontrol(rec("node-idle.txt"), rec("nodes-idle.txt"), update_rc=1, update_err="slurm_update error: x")
    out = slurm.reconcile(sc, "sl3", [LOST], True, ON)
    assert (out["action"], out["drained"]) == ("error", False) and "slurm_update error" in out["message"]


def test_draining_off_calls_nothing():
    sc = Scontrol(rec("node-idle.txt"))
    out = slurm.reconcile(sc, "sl3", [LOST], True, dict(ON, drain=False))
    assert out["action"] == "none" and sc.calls == []
