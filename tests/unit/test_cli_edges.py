"""The CLI edges an operator meets first (issue 15): a closed pipe, repeated -i, usage errors, --forks, report diff's
inputs, the terminal's wording and colours, --help, the remediation summary. Pipes and exit codes are checked with
real subprocesses and a real shell pipe; ansible-playbook runs for real."""

from __future__ import annotations

import copy
import io
import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpufleet import cli, exits, preflight, runner
from gpufleet.commands import COMMANDS, options, remediate

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "reports" / "sample-v1.json"
GPUFLEET = [sys.executable, "-m", "gpufleet.cli"]


def _pipe(command: str) -> subprocess.CompletedProcess:
    """``command`` in bash with pipefail: the exit status is gpufleet's when head closes the pipe first."""
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120, cwd=REPO
    )


# 1. A closed pipe ends quietly, as coreutils and git do (killed by SIGPIPE: the shell reports 141).
@pytest.mark.parametrize("command", ["catalog", "policy", "catalog --markdown"])
def test_a_reader_that_stops_early_ends_it_quietly(command):
    """The old CLI printed a BrokenPipeError traceback and exited 1 (the code of failing findings).

    `head -n 0` exits without reading, before gpufleet writes: the write always meets a closed pipe. With
    `head -1` it does unless the whole output fit in the pipe before head exited (then gpufleet ends normally,
    as `seq 3 | head -1` does): either way, nothing on stderr."""
    proc = _pipe(f"{' '.join(GPUFLEET)} {command} | head -n 0")
    assert (proc.returncode, proc.stdout, proc.stderr) == (141, "", "")  # 128 + SIGPIPE, as coreutils and git
    proc = _pipe(f"{' '.join(GPUFLEET)} {command} | head -1")
    assert proc.stdout.count("\n") == 1
    assert proc.stderr == ""
    assert proc.returncode in (0, 141)


def test_coreutils_end_the_same_way():
    """What gpufleet imitates, measured on this machine rather than assumed."""
    proc = _pipe("yes | head -1")
    assert (proc.returncode, proc.stderr) == (141, "")
    proc = _pipe("sh -c 'sleep 0.3; exec git --version' | head -n 0")  # git writes after head has gone
    assert (proc.returncode, proc.stderr) == (141, "")


# 2. Repeated -i are merged, as ansible-playbook merges them.
def _inventory(path: Path, hosts: list[str]) -> str:
    lines = ["all:", "  hosts:"] + [f"    {h}: {{ansible_connection: local}}" for h in hosts]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_repeated_inventories_are_all_kept(tmp_path):
    """The old -i kept only the last inventory."""
    a, b = _inventory(tmp_path / "a.yml", ["alpha"]), _inventory(tmp_path / "b.yml", ["beta"])
    args = cli.build_parser().parse_args(["audit", "-i", a, "-i", b])
    assert args.inventory == [a, b]
    assert sorted(preflight.inventory_hosts(args.inventory, None, {}, None)) == ["alpha", "beta"]
    assert cli.build_parser().parse_args(["remediate", "-i", a, "-i", b]).inventory == [a, b]


def test_a_playbook_runs_on_the_hosts_of_every_inventory(tmp_path):
    """Each inventory reaches ansible-playbook as its own -i: a real run over two inventories answers for both."""
    a, b = _inventory(tmp_path / "a.yml", ["alpha"]), _inventory(tmp_path / "b.yml", ["beta"])
    playbook = tmp_path / "ping.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Say hello\n      ansible.builtin.debug: {msg: hi}\n"
    )
    result = runner.run_playbook(str(playbook), [a, b])
    assert sorted(result.hosts) == ["alpha", "beta"]


# 3. Usage errors exit 3 (2 is for hosts not audited); --forks must be at least 1.
@pytest.mark.parametrize(
    "argv, message",
    [
        (["audit", "--forks", "0"], "must be at least 1, got 0"),
        (["audit", "--forks", "-3"], "must be at least 1, got -3"),
        (["audit", "-f", "many"], "'many' is not a whole number"),
        (["audit", "--no-such-option"], "unrecognized arguments"),
        (["no-such-command"], "invalid choice"),
        ([], "required"),
        (["report", "diff", "only-one"], "required"),
        (["audit", "--fail-on", "severe"], "invalid choice"),
    ],
)
def test_usage_errors_exit_3(argv, message):
    """argparse exits 2 on these, the code the README keeps for unreachable hosts."""
    proc = subprocess.run([*GPUFLEET, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == exits.EXIT_USAGE, proc.stderr
    assert message in proc.stderr and "usage: gpufleet" in proc.stderr


# 4. report diff: only gpufleet reports, files or run directories.
@pytest.mark.parametrize(
    "content, message",
    [
        ('{"a": 1}', "not a gpufleet report (schema 'gpufleet.report/v1' expected, got None)"),
        ("[1, 2]", "not a gpufleet report"),
        ("not json", "not a gpufleet report: not JSON"),
        ('{"schema": "gpufleet.report/v1", "hosts": []}', "not a valid gpufleet report"),
    ],
)
def test_report_diff_refuses_what_is_not_a_report(tmp_path, capsys, content, message):
    """The old diff printed '?' for any JSON and exited 0."""
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert cli.main(["report", "diff", str(SAMPLE), str(bad)]) == exits.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_report_diff_takes_run_directories(tmp_path, capsys):
    """reports/<run>, reports/latest and reports (its latest run) are read like their report.json."""
    reports = tmp_path / "reports"
    old = json.loads(SAMPLE.read_text())
    new = copy.deepcopy(old)
    new["run"]["id"] = "second-run"
    for run, doc in (("20261130T080000Z", old), ("20261201T080000Z", new)):
        (reports / run).mkdir(parents=True)
        (reports / run / "report.json").write_text(json.dumps(doc))
    (reports / "latest").symlink_to("20261201T080000Z")
    for newer in (reports / "latest", reports, reports / "20261201T080000Z" / "report.json"):
        assert cli.main(["report", "diff", str(reports / "20261130T080000Z"), str(newer)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"gpufleet diff  {old['run']['id']} -> second-run\n")
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", "diff", str(tmp_path / "empty"), str(reports)]) == exits.EXIT_USAGE
    assert "without a report.json" in capsys.readouterr().err


# 5. Terminal: wording, exit reasons, colours, catalog width, --help.
def test_exit_reason_says_why_the_exit_is_not_0():
    report = json.loads(SAMPLE.read_text())
    report["summary"]["hosts"] = {k: (v if k == "ok" else 0) for k, v in report["summary"]["hosts"].items()}
    code, reason = exits.explain(report, "high")
    failing = sum(
        1
        for h in report["hosts"].values()
        for f in h["findings"]
        if f["status"] == "fail" and f["severity"] in ("critical", "high")
    )
    assert code == exits.EXIT_FINDINGS and reason == f"exit 1: {failing} findings at or above high (--fail-on high)"
    assert exits.explain(report, "none") == (exits.EXIT_OK, None)
    report["summary"]["hosts"]["unreachable"] = 1
    assert exits.explain(report, "high") == (exits.EXIT_HOSTS, "exit 2: 1 host not audited (unreachable: 1)")


def test_exit_reason_goes_to_stderr(capsys):
    report = json.loads(SAMPLE.read_text())
    code = options.exit_with_reason(report, "low")
    assert code == exits.explain(report, "low")[0] and f"gpufleet: exit {code}:" in capsys.readouterr().err


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    """The old audit coloured whenever stdout was a TTY, NO_COLOR or not."""
    leader, follower = pty.openpty()
    try:
        with os.fdopen(os.dup(follower), "w") as tty:
            monkeypatch.delenv("NO_COLOR", raising=False)
            assert options.use_color(tty)
            monkeypatch.setenv("NO_COLOR", "1")
            assert not options.use_color(tty)
            monkeypatch.setenv("NO_COLOR", "")  # no-color.org: only a non-empty value counts
            assert options.use_color(tty)
    finally:
        os.close(leader)
        os.close(follower)
    assert not options.use_color(io.StringIO())


def test_catalog_fits_100_columns_and_is_plain_text():
    """The old catalog printed lines of 400+ columns, with Markdown backticks."""
    proc = subprocess.run([*GPUFLEET, "catalog"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "`" not in proc.stdout and "GPU-MEM-001" in proc.stdout
    markdown = subprocess.run([*GPUFLEET, "catalog", "--markdown"], capture_output=True, text=True, timeout=60)
    assert markdown.stdout.startswith("| id |") and "`GPU-MEM-001`" in markdown.stdout


def _subcommands():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert len(sub.choices) >= len(COMMANDS)
    return [*([name] for name in sub.choices), ["report", "diff"]]


@pytest.mark.parametrize("argv", _subcommands(), ids=" ".join)
def test_every_subcommand_help_has_a_description_and_an_example(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # what argparse wraps the options to
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    usage, _, rest = text.partition("\n\n")
    assert rest.split("\n\n")[0].strip() and not rest.startswith(("positional", "options")), text
    assert "examples:\n  gpufleet " + argv[0] in text, text
    assert "\nexit codes: 0 " in text
    assert max(len(line) for line in text.splitlines()) <= 100


# 6. The remediation summary says why a fixable finding was left alone, and shows progress.
def _event(kind, host=None, task="", role=None, res=None, task_path=None, action=None):
    data = {"host": host, "task": task, "role": role, "res": res or {}, "task_path": task_path}
    return {"event": kind, "event_data": {**data, "resolved_action": action}}


def _host(findings):
    return {"status": "ok", "findings": findings}


def _finding(rule, role, status="fail"):
    return {"rule": rule, "status": status, "severity": "high", "fix": {"role": role, "tag": rule}}


NICS_YML = REPO / "roles" / "network_tuning" / "tasks" / "nics.yml"


def _task_line(file: Path, text: str) -> int:
    """The line of the task of ``file`` whose body contains ``text`` (where ansible-runner's task_path points)."""
    lines = file.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if text in line)
    return next(i for i in range(at, -1, -1) if lines[i].startswith("- name:")) + 1


ROOT_ONLY = "network_tuning_root == '/'"
NIC_READ = f"{NICS_YML}:{_task_line(NICS_YML, ROOT_ONLY)}"  # runs only on the real root
NIC_NONE = f"{NICS_YML}:{_task_line(NICS_YML, 'No NIC is named')}"  # the role says why it leaves NICs alone


def _remediation(watch, failing):
    """Before: ``failing`` and HOST-MEM-002 fail; after: HOST-MEM-002 passes."""
    before = {"run": {"id": "a"}, "hosts": {"h1": _host([*failing, _finding("HOST-MEM-002", "host_tuning")])}}
    after = {"run": {"id": "b"}, "hosts": {"h1": _host([*failing, _finding("HOST-MEM-002", "host_tuning", "pass")])}}
    return watch.summary(before, after)


def test_remediation_says_why_a_fixable_finding_was_left_alone():
    """Driver findings (an opt-in role not turned on) and NIC findings on a simulated host (network_tuning_root is a
    fixture tree, and the NIC task runs only on '/'): the old summary called both "still failing (auto-fixable)"."""
    stream = io.StringIO()
    watch = remediate.Watcher(stream=stream, roots={"h1": {"network_tuning_root": "/srv/fixture/h1"}})
    for event in [
        _event("playbook_on_task_start", role="host_tuning", task="Set vm.swappiness"),
        _event("runner_on_ok", "h1", "Set vm.swappiness", "gpufleet.tuning.host_tuning", {"changed": True}),
        _event("playbook_on_task_start", role="network_tuning", task="Read the named NICs"),
        # ansible-runner's skipped events carry no result: the condition comes from the task file.
        _event("runner_on_skipped", "h1", "Read the named NICs", "network_tuning", None, NIC_READ),
    ]:
        watch(event)
    progress = stream.getvalue()
    assert "gpufleet: remediating: role host_tuning" in progress
    assert "h1: changed: host_tuning: Set vm.swappiness" in progress

    summary = _remediation(
        watch, [_finding("SW-CUDA-001", "nvidia_driver"), _finding("NET-RING-001", "network_tuning")]
    )
    assert summary["hosts"]["h1"]["not_applied"] == {
        "SW-CUDA-001": "skipped: opt-in role (nvidia_driver: set gpufleet_driver_enabled: true)",
        "NET-RING-001": "not applicable on a simulated host (network_tuning_root is not '/': devices are tuned only "
        "on the real root)",
    }
    text = remediate.render_remediation(summary)
    assert "still failing" not in text
    assert "skipped: opt-in role (nvidia_driver: set gpufleet_driver_enabled: true): SW-CUDA-001" in text
    assert "not applicable on a simulated host" in text and "NET-RING-001" in text
    assert text.startswith("h1: fixed HOST-MEM-002;")


def test_on_the_real_root_a_skipped_nic_task_is_not_called_simulated():
    """The same events on a host whose network_tuning_root is '/' (or unset): no simulated-host excuse; the role's
    own explanation (a debug task tagged with the rule) is given when it ran, else "still failing"."""
    failing = [_finding("NET-RING-001", "network_tuning")]
    skipped = _event("runner_on_skipped", "h1", "Read the named NICs", "network_tuning", None, NIC_READ)
    watch = remediate.Watcher(stream=io.StringIO(), roots={"h1": {}})
    watch(skipped)
    text = remediate.render_remediation(_remediation(watch, failing))
    assert "still failing (auto-fixable): NET-RING-001" in text and "simulated" not in text

    said = "No NIC is named in the policy's network.interfaces: rings are left alone. Name the data NICs."
    explained = _event(
        "runner_on_ok",
        "h1",
        "Say that no NIC is named",
        "network_tuning",
        {"msg": said},
        NIC_NONE,
        "ansible.builtin.debug",
    )
    watch = remediate.Watcher(stream=io.StringIO(), roots={"h1": {"network_tuning_root": "/"}})
    for event in (explained, skipped):
        watch(event)
    text = remediate.render_remediation(_remediation(watch, failing))
    assert (
        "left alone by role network_tuning: No NIC is named in the policy's network.interfaces: rings are left "
        "alone.: NET-RING-001" in text
    )


def test_fixed_nothing_only_when_nothing_changed():
    failing = {"run": {"id": "a"}, "hosts": {"h1": _host([_finding("HOST-MEM-002", "host_tuning")])}}
    after = copy.deepcopy(failing)
    changed = remediate.remediation_summary(failing, after, {"h1": ["Set vm.swappiness"]}, {}, False)
    text = remediate.render_remediation(changed)
    assert "fixed nothing" not in text and "no finding fixed; 1 task(s) changed something" in text
    unchanged = remediate.render_remediation(remediate.remediation_summary(failing, after, {}, {}, False))
    assert unchanged.startswith("h1: fixed nothing; still failing (auto-fixable): HOST-MEM-002")


def test_a_task_is_found_from_its_task_path():
    info = runner.task_info(NIC_READ)
    assert "NET-RING-001" in info.tags and "network_tuning_root == '/'" in info.when
    assert runner.task_info(None) == runner.TaskInfo() == runner.task_info("/no/such/file.yml:3")


def test_task_tags_and_conditions_include_the_blocks_around_a_task(tmp_path):
    tasks = tmp_path / "tasks.yml"
    tasks.write_text(
        textwrap.dedent(
            """\
            - name: A block
              tags: [outer]
              when: x_root == '/'
              block:
                - name: Inner
                  ansible.builtin.debug: {}
                  tags: HOST-MEM-002
                  when: [a, b]
            """
        )
    )
    assert runner.task_info(f"{tasks}:5") == runner.TaskInfo(("outer", "HOST-MEM-002"), ("x_root == '/'", "a", "b"))


def test_check_mode_does_not_promise_what_will_be_left_alone():
    watch = remediate.Watcher(check=True, stream=io.StringIO(), roots={"h1": {}})
    watch(_event("runner_on_ok", "h1", "Set vm.swappiness", "host_tuning", {"changed": True}))
    before = {"run": {"id": "a"}, "hosts": {"h1": _host([_finding("SW-CUDA-001", "nvidia_driver")])}}
    text = remediate.render_remediation(watch.summary(before, None))
    assert text.startswith("h1: would fix nothing; 1 task(s) would change; skipped: opt-in role"), text
    assert "h1: would change: host_tuning: Set vm.swappiness" in watch.stream.getvalue()
