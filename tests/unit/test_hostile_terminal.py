"""Hostile host strings before a terminal or the journal (issue 26): what a host, a worker or a job user wrote is
data, never terminal control. Each printing path is driven with crafted host data through the real code that
prints it (probe, remediate, rollback, audit progress and worker errors, the terminal and topology reports, the
CLI's error line) and, for the watch, a real process whose name holds an OSC escape and a newline and a kernel-log
line with escapes, read by the checker over the simulated NVML. The output must hold no ESC, C1 or bidi control and
no line that a host forged."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import report_fixtures
import rule_facts
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import balance
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as topo_view
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.terminal import render_terminal

from gpufleet import cli, workers
from gpufleet.commands import audit, probe, remediate, rollback
from gpufleet.runner import HostResult

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import reference  # noqa: E402

# A process name as a job can set it (prctl PR_SET_NAME: 15 bytes): retitles the window, then forges a line.
COMM = "\x1b]0;pwn\x07x\nFAKE"
# A host message: clear the screen, a C1 CSI, a CR+LF forged finding, a bidi override and an isolate.
MESSAGE = "boom\x1b[2J\x9b31m\r\nFAKE ok: all fixed \u202edexif\u2066x\u2069"
FORGED = "FAKE"
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def inert(text: str, lines: int | None = None) -> list[str]:
    """``text``'s lines, after asserting that none holds a control (C0 but the line breaks, DEL, C1), a line
    separator or a bidi control, that none was forged (starts with FAKE), and, with ``lines``, how many there are."""
    out = text.split("\n")
    if out and out[-1] == "":
        out.pop()
    for line in out:
        bad = [c for c in line if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in BIDI + "\u2028\u2029"]
        assert not bad, f"{line!r} keeps {bad!r}"
        assert not line.startswith(FORGED), f"a forged line: {line!r} in {text!r}"
    if lines is not None:
        assert len(out) == lines, out
    return out


# ----------------------------------------------------------------------------------------------------- probe


def _sample():
    """A probe sample (module_utils/probe.py's shape) with a job whose name is COMM, pinned to one CPU."""
    job = rule_facts.probe_job(COMM)
    gone = {"pid": 800, "visible": False, "error": "exited " + MESSAGE, "gpus": [1]}
    gpu = {
        "index": 0,
        "bus_id": "0000:18:00.0",
        "utilization": {"gpu_pct": 10.0, "memory_pct": 2.0, "reads": 4},
        "numa_node": 1,
        "local_cpus": "2-3",
        "local_cpus_busy_pct": 0.0,
        "processes": [700],
    }
    lost = {"index": 1, "lost": True, "error": MESSAGE, "processes": [800]}
    return {
        "available": True,
        "sample_seconds": 4.0,
        "reads": 4,
        "cpus_online": 4,
        "numa_nodes": {"0": "0-1", "1": "2-3"},
        "gpus": [gpu, lost],
        "processes": [job, gone],
        "memory": {"swap_in_per_s": 0.0, "swap_out_per_s": 0.0, "psi_some_avg10": 0.0},
    }


def test_probe_prints_a_hostile_process_name_as_data_on_its_own_line():
    sample = _sample()
    policy = pol_mod.validate({}, known_rules=rules.BY_ID)
    findings = rules.evaluate({"probe": sample}, policy, rules=balance.RULES)  # the real rules name the process
    assert any(COMM in (f.get("message") or "") for f in findings)
    out = io.StringIO()
    probe.print_host("gpu07", {"probe": sample, "findings": findings}, out=out)
    # head, GPU 0, its process, GPU 1 (lost), its exited process, then one line per balance rule: no line more
    lines = inert(out.getvalue(), 5 + len(findings))
    assert lines[2].startswith("    PID 700 \\x1b]0;pwn\\x07x\\nFAKE: 100.0% CPU")
    assert any("(\\x1b]0;pwn\\x07x\\nFAKE) pinned to CPUs 0" in line for line in lines)

    unreadable = io.StringIO()
    probe.print_host("gpu07", {"probe": {"available": False, "error": MESSAGE}}, out=unreadable)
    inert(unreadable.getvalue(), 1)


# --------------------------------------------------------------------------------------------------- remediate


def _report(run_id, status):
    """A report with one host, whose finding GPU-PWR-001 has ``status``."""
    finding = {
        "rule": "GPU-PWR-001",
        "status": status,
        "severity": "high",
        "area": "power",
        "title": "power limit",
        "fix": {"role": "gpu_runtime"},
    }
    return {"run": {"id": run_id}, "hosts": {"gpu01": {"status": "ok", "findings": [finding]}}}


def _event(kind, host, task, res, role="gpu_runtime", action="gpufleet.tuning.gpu_settings"):
    return {
        "event": kind,
        "event_data": {"host": host, "task": task, "role": role, "res": res, "resolved_action": action},
    }


def test_remediate_progress_summary_and_failures_keep_host_words_inside_their_lines():
    progress = io.StringIO()
    watch = remediate.Watcher(stream=progress)
    # what the playbook's events carry from a host: a changed task, a role's refusal, a role variable's value
    facts = {
        "gpufleet_blocked": [f"driver upgrade refused: {MESSAGE}"],
        "gpufleet_role_overrides": [
            {"variable": "gpu_runtime_power_limit", "value": MESSAGE, "policy_key": "power.limit", "policy_value": 1}
        ],
        "gpufleet_restart_required": [MESSAGE],
    }
    watch(_event("runner_on_ok", "gpu01", f"set power {MESSAGE}", {"changed": True, "ansible_facts": facts}))
    watch(_event("runner_on_failed", "gpu01", f"apply {MESSAGE}", {"msg": MESSAGE}))
    watch(_event("runner_on_unreachable", "gpu01", "ping", {"msg": MESSAGE}))
    inert(progress.getvalue(), 3)

    summary = watch.summary(_report("r1", "fail"), _report("r2", "fail"))
    # the override, the refusal, the host's summary (its restart_required holds the message)
    inert(remediate.render_remediation(summary), 3)

    failed = io.StringIO()
    remediate.print_failed({"gpu01": MESSAGE, "gpu02": f"set power: {COMM}"}, out=failed)
    inert(failed.getvalue(), 2)


# ---------------------------------------------------------------------------------------------------- rollback


def test_rollback_prints_a_hosts_failure_message_on_one_line():
    hosts = {
        "gpu01": HostResult("gpu01", status="failed", message=f"rollback: {MESSAGE}"),
        "gpu02": HostResult("gpu02", actions={rollback.ROLLBACK_ACTION: {"run_id": COMM, "restored": [1]}}),
    }
    out = io.StringIO()
    code, unrecorded = rollback.print_hosts(hosts, None, out=out)
    lines = inert(out.getvalue(), 3)  # gpu02's restored entry on a line of its own (issue 29)
    assert code == 2 and unrecorded == []
    assert lines[0].startswith("gpu01: rollback FAILED: rollback: boom\\x1b[2J\\x9b31m\\r\\nFAKE")


# ------------------------------------------------------------------------------------- audit: progress, workers


def test_audit_progress_and_worker_errors_are_cleaned():
    progress = io.StringIO()
    tick = audit.Progress(2, stream=progress)
    res = {"findings": [{"status": "fail"}]}
    tick({"event": "runner_on_ok", "event_data": {"host": COMM, "resolved_action": audit.AUDIT_ACTION, "res": res}})
    tick({"event": "runner_on_failed", "event_data": {"host": "gpu02", "resolved_action": audit.AUDIT_ACTION}})
    inert(progress.getvalue(), 2)

    worker = workers.Worker(region="eu", url="ssh://ops@exec-eu", host="exec-eu")
    said = io.StringIO()
    # what an execution node's stderr can say (its last line, as the worker reports it)
    audit.print_workers([workers.WorkerRun(worker, {}, "failed", 1, error=MESSAGE, wall_s=1.5)], out=said)
    inert(said.getvalue(), 1)


# ------------------------------------------------------------------------- the terminal and topology reports


def test_the_terminal_report_escapes_bidi_controls_from_a_host():
    report = {
        "run": {"id": "r1", "incomplete_reason": MESSAGE},
        "hosts": {
            "gpu\u202e10upg": {"status": "failed", "message": MESSAGE, "findings": []},
        },
    }
    text = render_terminal(report)
    inert(text)
    assert "gpu\\u202e10upg" in text and "\\u2066x\\u2069" in text


def test_the_topology_view_escapes_bidi_controls_from_a_host():
    text = topo_view.render_host("gpu01", {"status": "failed", "message": MESSAGE})
    inert(text, 2)
    assert text.endswith("\\u202edexif\\u2066x\\u2069")


# ----------------------------------------------------------------------------------------------- CLI errors


def test_a_usage_error_quoting_a_report_stays_one_line(tmp_path, capsys):
    """`gpufleet report merge` of two copies of one run names the run id, which the report (a host's run, a
    worker's) carries: the CLI's error line shows it escaped."""
    report = report_fixtures.load("sample-v1.json")
    report["run"]["id"] = COMM + " \u202e"
    for part in ("a", "b"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "report.json").write_text(json.dumps(report))
    assert cli.main(["report", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "o")]) == 3
    lines = inert(capsys.readouterr().err, 1)
    assert lines[0].startswith("gpufleet: cannot merge: ") and "(\\x1b]0;pwn\\x07x\\nFAKE \\u202e)" in lines[0]


# ------------------------------------------------------------------------------------------ the watch's journal

PR_SET_NAME = 15


def _named_process(name: str) -> subprocess.Popen:
    """A real process named ``name`` (prctl PR_SET_NAME, as any job can) pinned to CPU 0, until killed."""
    code = (
        "import ctypes, os, sys, time\n"
        "os.sched_setaffinity(0, {0})\n"
        f"ctypes.CDLL(None).prctl({PR_SET_NAME}, sys.argv[1].encode(), 0, 0, 0)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.fixture
def watched_host(sim_lib, tmp_path):
    """The PCIe L40S reference server, with a hostile AER line in its kernel log and a real GPU process on GPU 0
    whose name is COMM; the checker's configuration samples the processes (watch.probe_seconds)."""
    built = reference.build(tmp_path / "ref", hosts=["pcie-l40s"])["pcie-l40s"]["dir"]
    with (built / "root" / "var" / "log" / "kern.log").open("a", encoding="utf-8") as log:
        log.write(
            "Nov 29 08:10:00 l40s-node-01 kernel: pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error "
            "received: 0000:01:00.0 \x1b[2J\x1b]0;pwn\x07 \u202eevil\u2066 \x9b31m\n"
        )
    child = _named_process(COMM)
    try:
        assert f"({COMM})" in Path(f"/proc/{child.pid}/stat").read_text()
        state = built / "nvml.state"
        state.write_text(state.read_text() + f"gpu.0.processes={child.pid}:1073741824\n")
        out = tmp_path / "out"
        config = {
            "host": "pcie-l40s",
            "policy": {
                "watch": {
                    "textfile_dir": str(out / "textfile"),
                    "state_file": str(out / "state" / "s.json"),
                    "probe_seconds": 1,
                }
            },
            "audit": {
                "root": str(built / "root"),
                "ethtool_path": str(REPO / "tests" / "fixtures" / "ethtool" / "fake-ethtool"),
                "sample_seconds": 0,
            },
        }
        (tmp_path / "watch.json").write_text(json.dumps(config))
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / ".collections"),
            "LD_LIBRARY_PATH": str(sim_lib.parent),
            "FAKE_NVML_STATE": str(state),
            "FAKE_ETHTOOL_DIR": str(built / "ethtool"),
        }
        yield {"config": tmp_path / "watch.json", "env": env, "pid": child.pid}
    finally:
        child.kill()
        child.wait()


def test_the_watchs_journal_has_one_inert_line_per_event(watched_host):
    """The checker as the timer runs it (its own process; stdout is the journal under systemd)."""
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import checker\n"
            "sys.exit(checker.main(sys.argv[1:]))",
            "--config",
            str(watched_host["config"]),
        ],
        capture_output=True,
        text=True,
        env=watched_host["env"],
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = inert(run.stdout)
    # every line is an event of the checker's own: a finding that started, the baseline note, the run's summary
    assert all(" started " in line or line.startswith(("baseline ", "gpufleet-watch ")) for line in lines), lines
    pinned = [line for line in lines if line.startswith("HOST-BAL-003 started failing")]
    assert pinned and f"PID {watched_host['pid']} (\\x1b]0;pwn\\x07x\\nFAKE) pinned to CPUs 0" in pinned[0]
    aer = [line for line in lines if line.startswith("HOST-HLT-002 started failing")]
    assert aer and aer[0].endswith("0000:01:00.0 \\x1b[2J\\x1b]0;pwn\\x07 \\u202eevil\\u2066 \\x9b31m")
