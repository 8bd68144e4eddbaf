"""The watch's hardware baseline (plugins/module_utils/watch/baseline.py): a GPU gone from the PCI bus after a reset
or a reboot fails GPU-HLT-003 against the count recorded at install, where without it NVML and the bus agree on one
GPU fewer and the rule passes; NVSwitches and RDMA ports missing are named; an expected count set per group or host
in the policy layers wins over the baseline.

Facts are tests/unit/rule_facts.py's healthy 8 x H100 host (4 NVSwitches, 8 active 400 Gb/s InfiniBand ports); the
rules are the real catalog. The live counterpart is tests/integration/test_watch_role.py (a GPU removed from the
simulated host after install fails within one interval)."""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.module_utils import rules as catalog
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import from_option, validate
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import baseline, checker, drain
from rule_facts import healthy


def without_gpu(facts, index=7):
    """The GPU gone from the bus: neither NVML nor /sys/bus/pci lists it (a reset or a reboot that lost it)."""
    gone = facts["gpu"]["gpus"][index]
    facts["gpu"]["gpus"] = [g for g in facts["gpu"]["gpus"] if g is not gone]
    facts["gpu"]["gpu_count"] = len(facts["gpu"]["gpus"])
    address = gone["pci_bus_id"].lower()[4:]
    facts["gpu"]["pci"]["gpus"] = [f for f in facts["gpu"]["pci"]["gpus"] if f["address"] != address]
    return facts


def hlt003(facts, policy):
    return next(f for f in catalog.evaluate(facts, policy) if f["rule"] == "GPU-HLT-003")


def test_the_baseline_holds_gpus_nvswitches_and_active_rdma_ports():
    base = baseline.record(healthy(), 1764750000.0, "gpu-7")
    assert base["gpu_count"] == 8 and len(base["gpus"]) == 8 and base["gpus"][0] == "0000:18:00.0"
    assert base["nvswitches"] == 4
    assert base["rdma_ports"] == {f"mlx5_{i}/1": 400.0 for i in range(8)}
    assert (base["host"], base["recorded"], base["version"]) == ("gpu-7", 1764750000.0, baseline.VERSION)
    assert baseline.summary(base) == "8 GPU(s), 4 NVSwitch(es), 8 active RDMA port(s)"
    assert baseline.compare(base, healthy()) == []


def test_a_gpu_gone_from_the_bus_passes_without_a_count_and_fails_against_the_baseline():
    base = baseline.record(healthy(), 1.0, "h")
    facts = without_gpu(healthy())
    policy = validate({})
    assert hlt003(facts, policy)["status"] == "pass"  # the bug: NVML and the bus agree on 7
    judged = baseline.expected_gpu_count(policy, base)
    assert judged["health"]["expected_gpu_count"] == 8 and policy["health"]["expected_gpu_count"] is None
    finding = hlt003(facts, judged)
    assert (finding["status"], finding["severity"]) == ("fail", "critical")
    assert "7 usable GPU(s)" in finding["message"]
    assert "GPU-HLT-003" in [f["rule"] for f in drain.findings_that_drain([finding], "high")]
    assert baseline.compare(base, facts) == [
        "7 usable GPU(s), 8 at install",
        "GPU 0000:db:00.0 missing (on the PCI bus and usable at install)",
    ]


def test_a_count_in_the_policy_wins_over_the_baseline():
    base = baseline.record(healthy(), 1.0, "h")
    policy = validate({"health": {"expected_gpu_count": 4}})
    assert baseline.expected_gpu_count(policy, base) is policy
    assert baseline.expected_gpu_count(validate({}), None)["health"]["expected_gpu_count"] is None


def test_nvswitches_and_rdma_ports_missing_or_slower_are_named():
    base = baseline.record(healthy(), 1.0, "h")
    facts = healthy()
    facts["gpu"]["pci"]["nvswitches"] = facts["gpu"]["pci"]["nvswitches"][:3]
    facts["network"]["infiniband"][2]["state"] = "DOWN"
    facts["network"]["infiniband"][5]["rate_gbps"] = 200.0
    assert baseline.compare(base, facts) == [
        "3 NVSwitch(es), 4 at install",
        "RDMA port mlx5_2/1 not active (active at 400.0 Gb/s at install)",
        "RDMA port mlx5_5/1 at 200.0 Gb/s, 400.0 Gb/s at install",
    ]


def test_parts_this_run_could_not_read_are_not_reported_missing():
    base = baseline.record(healthy(), 1.0, "h")
    facts = healthy()
    facts["gpu"]["nvml"] = {"available": False, "error": "Driver Not Loaded"}
    facts["gpu"]["pci"] = {"available": False}
    facts["network"]["infiniband"] = None
    assert baseline.compare(base, facts) == []


def test_the_baseline_file_round_trips_next_to_the_state_file(tmp_path):
    path = baseline.path_for(str(tmp_path / "watch-state.json"))
    assert path == str(tmp_path / "watch-baseline.json")
    assert baseline.read(path) is None
    base = baseline.record(healthy(), 1.0, "h")
    baseline.write(path, base)
    assert baseline.read(path) == base
    (tmp_path / "watch-baseline.json").write_text('{"version": 99}')
    assert baseline.read(path) is None


def test_the_textfile_shows_the_baseline():
    config = {"host": "gpu-7", "site": None, "policy": validate({}), "version": "g0", "audit": {}}
    base = baseline.record(healthy(), 1764750000.0, "gpu-7")
    seen = baseline.snapshot(without_gpu(healthy()))
    state = {"findings": {}, "baseline": {"recorded": 1764750000.0, "counts": checker._counts(base),
                                          "seen": checker._counts(seen), "differences": ["x", "y"]}}
    text = checker.textfile(config, None, state, {"finished": 2.0, "wall": 0.1, "cpu": 0.1})
    assert 'gpufleet_watch_baseline{host="gpu-7",part="gpus"} 8' in text
    assert 'gpufleet_watch_baseline_seen{host="gpu-7",part="gpus"} 7' in text
    assert 'gpufleet_watch_baseline{host="gpu-7",part="nvswitches"} 4' in text
    assert 'gpufleet_watch_baseline_differences{host="gpu-7"} 2' in text
    assert 'gpufleet_watch_baseline_recorded_timestamp_seconds{host="gpu-7"} 1764750000.0' in text


def test_an_expected_count_per_group_or_host_comes_through_the_policy_layers():
    """gpufleet_policy (fleet) < gpufleet_policy_group < gpufleet_policy_host < overrides: the audit's layers, which
    the watch's configuration is merged from too (policy.from_option, run on the host by remediation_targets)."""
    fleet, group, host = {}, {"health": {"expected_gpu_count": 8}}, {"health": {"expected_gpu_count": 4}}
    assert from_option([fleet, group, None, None])["health"]["expected_gpu_count"] == 8
    assert from_option([fleet, group, host, None])["health"]["expected_gpu_count"] == 4
    facts = without_gpu(healthy())
    assert hlt003(facts, from_option([fleet, group, None, None]))["status"] == "fail"
    assert hlt003(facts, from_option([fleet, group, host, None]))["status"] == "warn"  # more than expected


def test_the_summary_line_counts_the_differences():
    config = {"host": "gpu-7", "policy": validate({})}
    result = {"findings": [], "summary": catalog.summarize([])}
    run = {"wall": 1.0, "cpu": 0.5}
    assert "baseline" not in checker.summary_line(config, result, [], run)
    line = checker.summary_line(config, result, [], run, ["7 usable GPU(s), 8 at install", "GPU x missing"])
    assert line.endswith("; 2 difference(s) from the baseline recorded at install")
