"""Which findings drain a Slurm node (plugins/module_utils/watch/drain.py) and the checker's Slurm step across runs
(watch/checker.py slurm_step): an Xid drains once; after a resume (by anyone) the same old line does not drain again,
a new one does; workload states and tuning findings never drain.

The findings come from the real rules over facts (tests/unit/rule_facts.py, kernel_log.scan of recorded-shape lines);
Slurm is a stand-in that keeps the nodes' state and answers `scontrol show node` in the shape recorded from the lab's
Slurm 22.05 (tests/fixtures/slurm/node-idle.txt); the live counterpart is tests/integration/test_watch_slurm_cluster.py.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import kernel_log
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules as catalog
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import validate
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import checker, drain, slurm
from rule_facts import healthy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
XID_79_OLD = "2026-12-03T09:15:02,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
XID_79_NEW = "2026-12-03T11:40:17,000001+00:00 NVRM: Xid (PCI:0000:5d:00): 79, pid=77, GPU has fallen off the bus."
XID_13 = "2026-12-03T11:41:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 13, pid=99, name=python, Graphics Exception"
XID_94 = "2026-12-03T11:42:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 94, pid=99, name=python, Contained ECC error"
SXID_FATAL = "2026-12-03T11:43:00+00:00 nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up"
SXID_NONFATAL = (
    "2026-12-03T11:44:00+00:00 nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 19084, Non-fatal, Link 10 AN1 Heartbeat"
)


def findings(lines=(), **change):
    """The real catalog over healthy facts with these kernel-log lines (and ``change`` applied to the facts)."""
    facts = healthy()
    facts["host"]["kernel_log"] = dict(
        {"source": "dmesg", "error": None, "lines_scanned": len(lines)}, **kernel_log.scan(list(lines))
    )
    for fn in change.values():
        fn(facts)
    return catalog.evaluate(facts, validate({}))


def gpu_memory_full_and_swapping(facts):
    for g in facts["gpu"]["gpus"]:
        g["memory"].update(used_mib=81000, free_mib=559, used_pct=99.3)
    facts["host"]["memory"].update(swap_in_per_s=5000.0, swap_out_per_s=9000.0, swap_used_mib=20000)


def lost_gpu(facts):
    facts["gpu"]["gpus"][3]["lost"] = True


# ----------------------------------------------------------------------------------------- the list is data
def test_every_drain_rule_is_a_health_rule_of_the_catalog():
    assert drain.DRAIN_RULES, "the drain list is empty"
    for rule_id in drain.DRAIN_RULES:
        assert rule_id in catalog.BY_ID, f"{rule_id} is not in the catalog"
        assert catalog.BY_ID[rule_id].area == "health", f"{rule_id} is not a health rule"
    assert set(drain.KERNEL_LOG_RULES) <= set(drain.DRAIN_RULES)


def test_workload_states_and_tuning_rules_are_not_on_the_list():
    never = [r.id for r in catalog.RULES if r.area != "health"]
    assert "GPU-MEM-001" in never and any(r.startswith("HOST-BAL-") for r in never)
    assert not set(never) & set(drain.DRAIN_RULES)


def test_the_drain_xids_are_the_fatal_ones_of_the_table():
    for code in drain.DRAIN_XID_CODES:
        assert kernel_log.XID_CODES[code][1] == "critical", code
    # application faults and contained/recorded events are not drain classes
    assert not {13, 31, 43, 45, 63, 92, 94} & set(drain.DRAIN_XID_CODES)


# ----------------------------------------------------------------------------------------- which findings drain
def _ids(found):
    return [f["rule"] for f in found]


def test_gpu_memory_full_while_swapping_fails_critical_but_never_drains():
    found = findings(memory=gpu_memory_full_and_swapping)
    mem = next(f for f in found if f["rule"] == "GPU-MEM-001")
    assert (mem["status"], mem["severity"]) == ("fail", "critical")
    assert "GPU-MEM-001" in _ids(checker.problems(found, "critical"))  # still a problem for npd and the journal
    assert drain.findings_that_drain(found, "high") == []


def test_a_lost_gpu_and_a_fatal_xid_drain():
    found = findings([XID_79_OLD], gpu=lost_gpu)
    out = drain.findings_that_drain(found, "high")
    assert _ids(out) == ["GPU-HLT-002", "HOST-HLT-001"]
    xid = out[1]
    assert [i["code"] for i in xid["items"]] == [79]
    assert xid["message"] == "Xid 79 at 0000:3b:00 in the kernel log (GPU has fallen off the bus)"


def test_application_and_contained_xids_and_non_fatal_sxids_do_not_drain():
    found = findings([XID_13, XID_94, SXID_NONFATAL])
    assert {f["rule"] for f in found if f["status"] == "fail"} >= {"HOST-HLT-001", "HOST-HLT-003"}
    assert drain.findings_that_drain(found, "high") == []
    with_fatal = drain.findings_that_drain(findings([XID_13, SXID_FATAL, SXID_NONFATAL]), "high")
    assert _ids(with_fatal) == ["HOST-HLT-003"] and [i["code"] for i in with_fatal[0]["items"]] == [20034]


def test_the_drain_severity_is_a_floor():
    found = findings(gpu=lost_gpu)
    assert _ids(drain.findings_that_drain(found, "critical")) == ["GPU-HLT-002"]
    regraded = catalog.evaluate(
        dict(healthy(), gpu=dict(healthy()["gpu"], gpus=[dict(g, lost=True) for g in healthy()["gpu"]["gpus"]])),
        validate({"rules": {"GPU-HLT-002": {"severity": "medium"}}}),
    )
    assert drain.findings_that_drain(regraded, "high") == []


def test_acknowledged_events_do_not_drain_and_newer_ones_do():
    old = findings([XID_79_OLD])
    position = drain.events(drain.findings_that_drain(old, "high"))
    assert position == {"time": kernel_log.line_time(XID_79_OLD), "lines": []}
    assert drain.findings_that_drain(old, "high", position) == []
    both = findings([XID_79_OLD, XID_79_NEW])
    (xid,) = drain.findings_that_drain(both, "high", position)
    assert xid["items"][0]["last_time"] == kernel_log.line_time(XID_79_NEW)


def test_lines_without_a_time_stamp_are_matched_by_their_text():
    bare = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    position = drain.events(drain.findings_that_drain(findings([bare]), "high"))
    assert position == {"time": None, "lines": [bare]}
    assert drain.findings_that_drain(findings([bare]), "high", position) == []
    other = bare.replace("pid=1234", "pid=5678")
    assert _ids(drain.findings_that_drain(findings([bare, other]), "high", position)) == ["HOST-HLT-001"]


def test_an_acknowledged_position_holds_for_its_boot_or_a_log_file():
    ack = {"boot_id": "boot-a", "time": 100.0, "lines": []}
    assert drain.applies(ack, "boot-a", "dmesg") is ack
    assert drain.applies(ack, "boot-b", "dmesg") is None  # dmesg shows only this boot: all of it is new
    assert drain.applies(ack, "boot-b", "journal") is None
    assert drain.applies(ack, "boot-b", "file") is ack  # a log file spans boots: compared by time
    assert drain.applies(None, "boot-a", "dmesg") is None


# ------------------------------------------------------------------------------------ the checker across runs
class Slurm:
    """The state of a one-partition Slurm cluster (not our code): `scontrol show node` answers in the recorded shape
    of Slurm 22.05 (tests/fixtures/slurm/node-idle.txt), `scontrol update` changes the state as slurmctld does."""

    TEMPLATE = (FIXTURES / "node-idle.txt").read_text()

    def __init__(self, names=("gn1", "gn2", "gn3", "gn4")):
        self.nodes = {n: {"state": "IDLE", "reason": None} for n in names}
        self.updates = []

    def block(self, name):
        node = self.nodes[name]
        text = self.TEMPLATE.replace("sl3", name).replace("State=IDLE ", f"State={node['state']} ")
        text = text.replace("Partitions=gpu,big ", "Partitions=gpu ")
        if node["reason"]:
            reason = f"   Reason={node['reason']} [root@2026-12-03T10:00:00]\n"
            text = text.replace("   BootTime=", reason + "   BootTime=")
        return text

    def __call__(self, argv):
        assert argv[0] == "scontrol"
        if argv[1:3] == ["show", "node"]:
            names = argv[3:] or sorted(self.nodes)
            return 0, "\n".join(self.block(n) for n in names), ""
        assert argv[1] == "update", argv
        self.updates.append(argv)
        fields = dict(a.split("=", 1) for a in argv[2:])
        node = self.nodes[fields["nodename"]]
        if fields.get("state") == "drain":
            node["state"] = "IDLE+DRAIN"
        elif fields.get("state") == "resume":
            node.update(state="IDLE", reason=None)
        if "reason" in fields:
            node["reason"] = fields["reason"]
        return 0, "", ""

    def resume(self, name):
        """What `scontrol update nodename=NAME state=resume` by a person does."""
        self.nodes[name].update(state="IDLE", reason=None)


@pytest.fixture
def host(tmp_path):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("0b2c7f4e-boot-one\n")
    config = {
        "host": "gn2",
        "policy": validate({"watch": {"slurm": {"drain": True, "resume": True, "node_name": "gn2"}}}),
        "audit": {"root": str(tmp_path)},
    }
    cluster = Slurm()

    class Host:
        state: dict = {}
        log: list = []

        def run(self, found):
            lines = []
            self.state = dict(self.state)
            result = {"facts": copy.deepcopy(healthy()), "findings": found}
            result["facts"]["host"]["kernel_log"] = {"source": "dmesg"}
            self.state["slurm"], self.state["drain"] = checker.slurm_step(
                config, result, self.state, cluster, lines.append
            )
            self.log = lines
            return cluster.nodes["gn2"]["state"]

        def reboot(self, boot):
            (tmp_path / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")

    h = Host()
    h.cluster = cluster
    return h


def test_an_xid_drains_once_and_a_resume_is_respected_until_a_new_one(host):
    assert host.run(findings([XID_79_OLD])) == "IDLE+DRAIN"
    assert host.cluster.nodes["gn2"]["reason"] == (
        "gpufleet: HOST-HLT-001 Xid 79 at 0000:3b:00 in the kernel log (GPU has fallen off the bus)"
    )
    assert host.run(findings([XID_79_OLD])) == "IDLE+DRAIN"  # stays drained, nothing acknowledged yet
    assert len(host.cluster.updates) == 1

    host.cluster.resume("gn2")  # the operator reset the GPU and resumed the node
    for _ in range(3):
        assert host.run(findings([XID_79_OLD])) == "IDLE"
        assert "slurm: no drain for HOST-HLT-001 (no fatal event that a resume has not followed)" in host.log
    assert len(host.cluster.updates) == 1
    assert host.state["drain"]["acknowledged"]["time"] == kernel_log.line_time(XID_79_OLD)

    assert host.run(findings([XID_79_OLD, XID_79_NEW])) == "IDLE+DRAIN"
    assert "Xid 79" in host.cluster.nodes["gn2"]["reason"]


def test_the_watchs_own_resume_does_not_happen_while_an_xid_is_unacknowledged(host):
    """resume is on and nothing else fails: the Xid still holds the node until someone resumes it."""
    host.run(findings([XID_79_OLD]))
    assert host.run(findings([XID_79_OLD])) == "IDLE+DRAIN"


def test_a_node_drained_by_someone_else_keeps_the_events_pending(host):
    host.run(findings([XID_79_OLD]))
    host.cluster.nodes["gn2"]["reason"] = "RMA ticket 4711"  # a person took the node over
    assert host.run(findings([XID_79_OLD])) == "IDLE+DRAIN"
    assert host.state["drain"]["acknowledged"] is None and host.state["drain"]["drained_for"]
    host.cluster.resume("gn2")
    assert host.run(findings([XID_79_OLD])) == "IDLE"


def test_after_a_reboot_the_boots_own_events_are_new(host):
    """dmesg shows only the running boot: an Xid 79 logged again after a reboot drains, even at an older-looking
    time stamp (a clock not yet synchronised)."""
    host.run(findings([XID_79_NEW]))
    host.cluster.resume("gn2")
    assert host.run(findings([XID_79_NEW])) == "IDLE"
    host.reboot("9e1d-boot-two")
    assert host.run(findings([XID_79_OLD])) == "IDLE+DRAIN"


def test_state_problems_drain_again_after_a_resume(host):
    """A GPU still lost after the resume is a state, not an old event: it drains again."""
    host.run(findings([XID_79_OLD], gpu=lost_gpu))
    host.cluster.resume("gn2")
    assert host.run(findings([XID_79_OLD], gpu=lost_gpu)) == "IDLE+DRAIN"
    assert slurm.reason_rules(host.cluster.nodes["gn2"]["reason"]) == ["GPU-HLT-002"]


def test_memory_full_and_swapping_never_drains_through_the_checker(host):
    assert host.run(findings(memory=gpu_memory_full_and_swapping)) == "IDLE"
    assert host.cluster.updates == []
    assert "slurm: no drain for GPU-MEM-001 (not a drain rule)" in host.log


def test_a_row_remap_failure_drains_a_pending_remap_does_not():
    def remap(**state):
        def change(facts):
            facts["gpu"]["gpus"][2]["remapped_rows"].update(state)

        return change

    pending = [f for f in findings(rows=remap(pending=True)) if f["rule"] == "GPU-HLT-001"]
    assert (pending[0]["status"], pending[0]["severity"]) == ("fail", "high")
    assert drain.findings_that_drain(pending, "high") == []
    failed = [f for f in findings(rows=remap(failure=True)) if f["rule"] == "GPU-HLT-001"]
    assert (failed[0]["status"], failed[0]["severity"]) == ("fail", "critical")
    assert _ids(drain.findings_that_drain(failed, "high")) == ["GPU-HLT-001"]
    assert set(drain.RULE_MIN_SEVERITY) <= set(drain.DRAIN_RULES)
