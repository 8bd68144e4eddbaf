"""The on-host checker's own logic (plugins/module_utils/watch/checker.py): configuration errors, what it logs, the
problems it reports, and a textfile whose finding series are the controller report's, name for name."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import prometheus_text
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import validate
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import checker
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.prometheus import render_prometheus

FINDINGS = [
    {
        "rule": "GPU-HLT-002",
        "status": "fail",
        "severity": "critical",
        "area": "health",
        "message": "GPU 3 lost",
        "items": [{"gpu": 3}],
    },
    {
        "rule": "GPU-PWR-002",
        "status": "fail",
        "severity": "high",
        "area": "power",
        "message": "capped",
        "items": [{"gpu": 1, "limit_w": 300}],
    },
    {
        "rule": "NET-MTU-001",
        "status": "warn",
        "severity": "medium",
        "area": "network",
        "message": "mtu",
        "items": [{"nic": "eth0"}],
    },
    {"rule": "HOST-MEM-002", "status": "pass", "severity": "low", "area": "memory", "message": "ok", "items": []},
]


def _write(tmp_path, config):
    path = tmp_path / "watch.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"host": "h", "colour": "red"}, "unknown key(s) colour"),
        ({"policy": {"watch": {"interval_seconds": 5}}}, "policy.watch.interval_seconds: must be >= 10"),
        ({"policy": {"watch": {"slurm": {"max_drained_fraction": 0}}}}, "max_drained_fraction: must be > 0"),
        ({"policy": {"watch": {"textfile_dir": "relative/dir"}}}, "watch.textfile_dir: must be an absolute path"),
        ({"policy": {"watch": {"problem_severity": "urgent"}}}, "is not a severity"),
        ({"audit": {"sample_seconds": "1"}}, "audit.sample_seconds: expected"),
        ({"audit": {"speed": 1}}, "audit.speed: unknown option"),
        ({"audit": {"backend": "dcgm"}}, "audit.backend: 'dcgm' is not one of auto, pynvml, nvidia-smi"),
        ({"environment": {"LD_LIBRARY_PATH": 3}}, "environment: expected an object of strings"),
    ],
)
def test_a_bad_configuration_names_the_field(tmp_path, config, message):
    with pytest.raises(checker.CheckError, match=re.escape(message)):
        checker.load_config(_write(tmp_path, config))


def test_a_bad_configuration_exits_2_with_one_line(tmp_path, capsys):
    path = _write(tmp_path, {"policy": {"watch": {"interval_seconds": 1}}})
    assert checker.main(["--config", path]) == checker.EXIT_UNKNOWN
    assert checker.main(["--config", path, "--mode", "npd"]) == checker.EXIT_UNKNOWN
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("interval_seconds" in line for line in lines)
    assert lines[1].startswith("gpufleet: could not check the host")


def test_a_missing_configuration_says_who_writes_it(tmp_path):
    with pytest.raises(checker.CheckError, match="the watch role writes it"):
        checker.load_config(str(tmp_path / "absent.json"))


def test_problems_are_failures_at_or_above_the_policy_severity():
    assert [f["rule"] for f in checker.problems(FINDINGS, "critical")] == ["GPU-HLT-002"]
    assert [f["rule"] for f in checker.problems(FINDINGS, "high")] == ["GPU-HLT-002", "GPU-PWR-002"]
    # a warning is never a problem: the checker drains only on what it is sure of
    assert "NET-MTU-001" not in [f["rule"] for f in checker.problems(FINDINGS, "info")]


def test_state_keeps_when_a_finding_started_and_logs_only_changes():
    first = checker.state_entries(FINDINGS, {}, 100.0)
    assert sorted(first) == ["GPU-HLT-002", "GPU-PWR-002", "NET-MTU-001"]
    assert first["GPU-HLT-002"]["where"] == "GPU 3" and first["NET-MTU-001"]["where"] == "eth0"
    assert checker.changes({}, first) == [
        "GPU-HLT-002 started failing on GPU 3 [critical]: GPU 3 lost",
        "GPU-PWR-002 started failing on GPU 1 [high]: capped",
        "NET-MTU-001 started warning on eth0 [medium]: mtu",
    ]
    later = [dict(f) for f in FINDINGS[1:]]
    later[0]["items"] = [{"gpu": 1}, {"gpu": 5}]
    later[1]["status"] = "fail"
    second = checker.state_entries(later, first, 400.0)
    assert second["GPU-PWR-002"]["since"] == 100.0  # still failing: the start time is kept
    assert second["NET-MTU-001"]["since"] == 400.0  # warn -> fail starts again
    assert checker.changes(first, second) == [
        "GPU-HLT-002 cleared (was failing on GPU 3)",
        "GPU-PWR-002 still failing, now on GPU 1, 5",
        "NET-MTU-001 started failing on eth0 [medium]: mtu",
    ]
    assert checker.changes(second, checker.state_entries(later, second, 700.0)) == []


def test_npd_message_fits_node_problem_detectors_default_length():
    config = {"policy": validate({})}
    many = [dict(FINDINGS[0], items=[{"gpu": i} for i in range(8)], rule=f"GPU-HLT-00{i}") for i in range(5)]
    message = checker.npd_message(config, {"findings": many}, many)
    assert len(message) <= checker.NPD_MESSAGE_MAX and message.startswith("gpufleet: GPU-HLT-000 GPU 0, 1")
    assert checker.npd_message(config, {"findings": []}, []) == "gpufleet: no critical+ findings"


def _config():
    return {"host": "gpu-7", "site": "eu_west", "policy": validate({}), "version": "g0123456789ab", "audit": {}}


def _result(findings):
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    gpu = {"nvml": {"available": True}, "gpus": [{"index": 0}]}
    return {"facts": {"gpu": gpu}, "findings": findings, "summary": rules.summarize(findings)}


def test_textfile_finding_series_are_the_controller_reports(tmp_path):
    """Same names, labels and values as gpufleet audit's gpufleet.prom for the same findings: an alert or a dashboard
    reads both alike."""
    state = {"findings": checker.state_entries(FINDINGS, {}, 100.0), "last_success": 100.0}
    run = {"finished": 100.0, "wall": 1.5, "cpu": 0.25}
    watch = checker.textfile(_config(), _result(FINDINGS), state, run)
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    # The controller exports only its catalog's rules (issue 26): its report carries the catalog, as fleet writes it.
    report = {"hosts": {"gpu-7": {"status": "ok", "findings": FINDINGS}}, "run": {"complete": True}}
    report["catalog"] = rules.catalog()
    audit = render_prometheus(report)

    def series(text, family):
        return sorted(line for line in text.splitlines() if line.startswith(f"gpufleet_{family}{{"))

    for family in ("finding", "host_findings"):
        assert series(watch, family) and series(watch, family) == series(audit, family)
    assert 'gpufleet_host_up{host="gpu-7",status="ok"} 1' in watch
    assert 'gpufleet_watch_last_success_timestamp_seconds{host="gpu-7"} 100.0' in watch
    assert re.search(
        r'gpufleet_watch_info\{host="gpu-7",site="eu_west",version="g0123456789ab",'
        r'policy_digest="sha256:[0-9a-f]{64}"\} 1',
        watch,
    )
    assert (
        'gpufleet_watch_finding_since_timestamp_seconds{host="gpu-7",rule="GPU-HLT-002",severity="critical",'
        'area="health",status="fail"} 100.0'
    ) in watch
    assert "watch_slurm" not in watch  # no Slurm families unless watch.slurm.drain
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is installed by scripts/install-deps.sh test"
    check = subprocess.run([promtool, "check", "metrics"], input=watch, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_run_that_could_not_check_keeps_the_last_success_and_says_so():
    state = {"findings": {}, "last_success": 50.0}
    text = checker.textfile(_config(), None, state, {"finished": 90.0, "wall": 0.2, "cpu": 0.1})
    assert 'gpufleet_watch_last_run_ok{host="gpu-7"} 0' in text
    assert 'gpufleet_watch_last_success_timestamp_seconds{host="gpu-7"} 50.0' in text
    # no finding series at all: a host that could not be checked never reads as clean
    assert "gpufleet_finding{" not in text and "gpufleet_host_findings{" not in text


def test_a_clean_run_needs_every_rule_evaluated_and_the_gpus_read():
    assert checker.is_clean(_result(FINDINGS))
    assert not checker.is_clean(_result(FINDINGS + [{"rule": "X", "status": "error"}]))
    assert not checker.is_clean({"facts": {"gpu": None}, "findings": FINDINGS})
    # the driver did not answer (DriverNotLoaded): every GPU rule skips, which is not "repaired"
    no_driver = {"nvml": {"available": False, "error_code": "DriverNotLoaded"}, "gpus": []}
    assert not checker.is_clean({"facts": {"gpu": no_driver}, "findings": FINDINGS})
    assert not checker.is_clean({"facts": {"gpu": {"nvml": {"available": True}, "gpus": []}}, "findings": FINDINGS})
    assert not checker.is_clean(None)


def test_one_series_per_rule_even_when_a_rule_repeats():
    twice = [FINDINGS[0], dict(FINDINGS[0], message="again")]
    assert len(prometheus_text.finding_samples("h", twice)) == 1


def test_the_host_module_runs_commands_as_the_readers_expect():
    """audit_core's contract without Ansible: (rc, stdout, stderr) as text, a missing program as 127."""
    module = checker.HostModule({})
    rc, out, err = module.run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], environ_update={"LC_ALL": "C"})
    assert (rc, out, err) == (3, "out\n", "err\n")
    assert module.run_command(["/nonexistent/tool"])[0] == 127
    assert module.get_bin_path("sh") and module.get_bin_path("no-such-tool-here") is None
    with pytest.raises(checker.CheckError, match="nvml_library: bad"):
        module.fail_json(msg="nvml_library: bad")
