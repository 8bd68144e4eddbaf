"""The rules of rules/measured.py: NET-LINK-001, judged on what ``gpufleet links`` measured (facts
``link_measurements``), a passing and a failing case (CASES); and ``assess``, the verdict the command's table shows:
host-limited by buffers or by congestion control, path-limited, ok, not measured."""

from __future__ import annotations

import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import measured
from rule_facts import healthy

MIB = 1024 * 1024


def _link(f):
    return f["link_measurements"][0]


def _provider_caps_it(f):
    """64 MiB buffers and BBR, yet 180 of 1000 Mbit/s: the path limits it."""
    _link(f).update(single_mbps=150.0, multi_mbps=180.0)


def _stock_buffers(f):
    """Stock buffers (4 MiB tcp_wmem max): 4 streams reach at most 4 x 186 Mbit/s over 180 ms - the host's limit."""
    _link(f).update(single_mbps=141.0, multi_mbps=400.0, sender_wmem_max=4 * MIB, receiver_rmem_max=6 * MIB)


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "NET-LINK-001": (_stock_buffers, _provider_caps_it),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


def _assess(**changes):
    facts = healthy()
    _link(facts).update(changes)
    return measured.assess(_link(facts), policy.validate({}, known_rules=rules.BY_ID))


def test_the_bdp_limit_is_the_smaller_buffer_over_the_rtt():
    out = _assess(sender_wmem_max=4 * MIB, receiver_rmem_max=6 * MIB, rtt_ms=180.0, streams=4)
    assert out["window_bytes"] == 4 * MIB
    assert out["bdp_limit_mbps"] == 186.4  # 4 MiB x 8 / 0.18 s
    assert out["bdp_limit_multi_mbps"] == 745.7


def test_stock_buffers_are_host_limited_whatever_the_path():
    out = _assess(single_mbps=141.0, multi_mbps=400.0, sender_wmem_max=4 * MIB)
    assert out["verdict"] == "host-limited (buffers)"
    assert "tcp_wmem" in out["why"]


def test_cubic_on_a_long_path_is_the_hosts_congestion_control():
    out = _assess(single_mbps=11.0, multi_mbps=42.0, congestion_control="cubic")
    assert out["verdict"] == "host-limited (congestion control)"


def test_good_buffers_and_bbr_far_below_declared_is_the_path():
    out = _assess(single_mbps=300.0, multi_mbps=420.0)
    assert out["verdict"] == "path-limited"
    assert "420 of 1000" in out["why"]


def test_at_the_threshold_the_link_is_ok():
    assert _assess(single_mbps=200.0, multi_mbps=500.0)["verdict"] == "ok"
    assert _assess(single_mbps=200.0, multi_mbps=499.0)["verdict"] == "path-limited"


def test_a_failed_measurement_is_not_measured_and_the_rule_skips():
    facts = healthy()
    _link(facts).update(error="iperf3: unable to connect", single_mbps=None, multi_mbps=None)
    pol = policy.validate({}, known_rules=rules.BY_ID)
    assert measured.assess(_link(facts), pol)["verdict"] == "not measured"
    finding = rules.BY_ID["NET-LINK-001"].check(facts, pol)
    assert finding["status"] == "skip" and "unable to connect" in finding["message"]


def test_an_audit_without_measurements_skips_saying_how_to_measure():
    facts = healthy()
    del facts["link_measurements"]
    finding = rules.BY_ID["NET-LINK-001"].check(facts, policy.validate({}, known_rules=rules.BY_ID))
    assert finding["status"] == "skip" and "gpufleet links" in finding["message"]


def test_unread_buffers_judge_nothing_below_the_threshold():
    assert _assess(single_mbps=100.0, multi_mbps=180.0, sender_wmem_max=None, receiver_rmem_max=None)["verdict"] == (
        "not measured"
    )
    assert _assess(multi_mbps=900.0, sender_wmem_max=None, receiver_rmem_max=None)["verdict"] == "ok"
