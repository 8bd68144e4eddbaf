"""audit_report (an action plugin) validates its options with ActionBase.validate_argument_spec, the module argument
spec validator: a bad call fails with a message naming the option, never a traceback, and nothing is written."""

from __future__ import annotations

import sys

import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

CASES = {
    "unknown option": ({"out_dir": "OUT", "outdir": "OUT"}, "Unsupported parameters for"),
    "missing out_dir": ({"started_at": "2026-12-01T00:00:00Z"}, "missing required arguments: out_dir"),
    "empty out_dir": ({"out_dir": ""}, "out_dir: must not be empty"),
    # before: a dict went on to the report builder and broke there
    "policy_sources not a list": ({"out_dir": "OUT", "policy_sources": {"a": 1}}, "policy_sources"),
}


def test_bad_arguments_fail_clearly(tmp_path):
    out = tmp_path / "reports"
    tasks = [
        {
            "name": name,
            "gpufleet.tuning.audit_report": {k: (str(out) if v == "OUT" else v) for k, v in args.items()},
            "ignore_errors": True,
        }
        for name, (args, _message) in CASES.items()
    ]
    tasks.append({"name": "Good call", "gpufleet.tuning.audit_report": {"out_dir": str(out / "good"), "stamp": "run1"}})
    play = [{"name": "audit_report arguments", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = {
        "all": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))

    host = run_playbook(str(tmp_path / "play.yml"), str(tmp_path / "hosts.yml")).hosts["localhost"]
    for name, (args, message) in CASES.items():
        res = host.results[name]
        assert "files" not in res, (name, res)  # failed: nothing written
        assert message in res["msg"] and "Traceback" not in res["msg"], (name, res["msg"])
        if "outdir" in args:
            assert "outdir" in res["msg"] and "out_dir" in res["msg"], res["msg"]  # names it and the supported ones
    assert not (out / "run1").exists() and sorted(p.name for p in out.iterdir()) == ["good"]
    assert host.results["Good call"]["files"]["json"].endswith("run1/report.json")
