"""Commands that change hosts never default to the machine they run on, and the remediation report says when a
role variable took the policy's place (issue 12)."""

from __future__ import annotations

import pytest

from gpufleet import cli
from gpufleet.commands import remediate


@pytest.mark.parametrize("command", [["remediate"], ["remediate", "--check"], ["rollback"], ["rollback", "--check"]])
def test_changing_commands_require_an_inventory(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(command)
    assert exc.value.code != 0
    assert "-i/--inventory" in capsys.readouterr().err


def _inventory_help(command: str) -> str:
    sub = cli.build_parser()._subparsers._group_actions[0].choices[command]
    return next(a.help for a in sub._actions if "--inventory" in a.option_strings)


@pytest.mark.parametrize("command", ["remediate", "rollback"])
def test_a_changing_command_says_its_inventory_is_of_hosts_to_change(command):
    assert "hosts to change" in _inventory_help(command) and "never tunes" in _inventory_help(command)


@pytest.mark.parametrize(("command", "verb"), [("probe", "sample"), ("links", "measure")])
def test_a_read_only_command_with_a_required_inventory_does_not_say_it_changes_hosts(command, verb):
    """`probe --help` called its read-only inventory "the hosts to change" (issue 29)."""
    text = _inventory_help(command)
    assert f"hosts to {verb}" in text and "change" not in text and "tunes" not in text


def test_audit_keeps_its_default_inventory():
    args = cli.build_parser().parse_args(["audit"])
    assert len(args.inventory) == 1 and args.inventory[0].endswith("inventories/local/hosts.yml")


def _report(run_id, findings):
    return {"run": {"id": run_id}, "hosts": {"h1": {"status": "ok", "findings": findings}}}


def test_role_overrides_reach_the_summary_and_the_terminal():
    failing = [{"rule": "NET-TCP-001", "status": "fail", "fix": {"role": "network_tuning"}}]
    override = {
        "variable": "network_tuning_buffer_bytes",
        "value": 16777216,
        "policy_key": "network.buffer_factor",
        "policy_value": 4.0,
    }
    summary = remediate.remediation_summary(
        _report("a", failing), _report("b", failing), {}, {}, False, {"h1": [override]}
    )
    assert summary["hosts"]["h1"]["role_overrides"] == [override]
    assert summary["hosts"]["h1"]["remaining_auto"] == ["NET-TCP-001"]
    text = remediate.render_remediation(summary)
    assert "network_tuning_buffer_bytes=16777216" in text
    assert "policy network.buffer_factor=4.0" in text


def test_no_overrides_means_an_empty_list():
    summary = remediate.remediation_summary(_report("a", []), _report("b", []), {}, {}, False)
    assert summary["hosts"]["h1"]["role_overrides"] == []
    assert "role variable" not in remediate.render_remediation(summary)


def test_refused_changes_are_reported_with_their_blocker():
    failing = [{"rule": "SW-DRV-001", "status": "fail", "fix": {"role": "nvidia_driver"}}]
    message = "driver 535.183.01 -> 550.90.07 refused: 1 compute process(es) on GPU 0; no reboot allowed"
    summary = remediate.remediation_summary(
        _report("a", failing), _report("b", failing), {}, {}, False, None, {"h1": [message]}
    )
    assert summary["hosts"]["h1"]["blocked"] == [message]
    assert summary["hosts"]["h1"]["remaining_auto"] == ["SW-DRV-001"]
    assert f"h1: refused: {message}" in remediate.render_remediation(summary)
