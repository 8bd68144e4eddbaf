"""Run gpufleet playbooks through ansible-runner's Python API and collect what each host returned.

Interrupts: while a playbook runs, SIGINT (Ctrl-C) and SIGTERM are passed on to ansible-playbook as SIGINT, Ansible's
own way to stop: no new task starts, the workers and the module processes on local connections get SIGINT (a module
dies before its atomic rename, leaving the old file) and ansible-playbook exits. The results that arrived before stay
in ``RunResult.hosts`` and ``RunResult.interrupted`` names the signal, so the caller can write a partial report. A
second signal, or ansible-playbook still running ``STOP_GRACE_S`` after the first, kills it (ansible-runner's cancel:
SIGKILL to its process group). Ansible can lose a SIGINT: one that lands while it forks a worker raises its
KeyboardInterrupt inside logging's at-fork callback, where Python drops it ("Exception ignored in _releaseLock") and
the play goes on. A task that starts after the SIGINT shows it was lost, and the SIGINT is sent again
(``Stopper.on_event``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import paths

# The strategy the CLI runs its playbooks with (plugins/strategy/linear.py): ansible.builtin.linear, except that the
# controller sleeps while every fork is busy instead of polling its workers every 0.1 ms. A user's ANSIBLE_STRATEGY
# wins. ansible-core (2.19) prints a deprecation warning for any strategy outside ansible.builtin: it goes to a run's
# raw log (``log_path``) only, never to the terminal, even with -v (``terminal_lines``).
STRATEGY = "gpufleet.tuning.linear"


def strategy_env() -> dict[str, str]:
    """ANSIBLE_STRATEGY for a run the CLI starts, unless the environment names one."""
    return {} if os.environ.get("ANSIBLE_STRATEGY") else {"ANSIBLE_STRATEGY": STRATEGY}


@dataclass
class HostResult:
    """What one host returned, and how the host fared.

    ``actions`` holds each result under the module or action plugin that produced it (its resolved FQCN, e.g.
    ``gpufleet.tuning.audit``): what the CLI reads, so that renaming a task changes nothing. ``results`` holds the
    same results under the task's display name, for a person or a test that ran a task of its own.
    """

    name: str
    status: str = "ok"  # ok | failed | unreachable
    message: str | None = None
    results: dict[str, Any] = field(default_factory=dict)
    actions: dict[str, Any] = field(default_factory=dict)

    def record(self, task: str, action: str | None, res: dict[str, Any]) -> None:
        self.results[task] = res
        if action:
            self.actions[action] = res


@dataclass
class RunResult:
    rc: int
    status: str
    hosts: dict[str, HostResult]
    events: list[dict[str, Any]] = field(default_factory=list)
    interrupted: str | None = None  # "SIGINT" / "SIGTERM" when the run was stopped by a signal


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE_S = 30.0
# A task that starts this long after ansible-playbook was sent SIGINT shows that the SIGINT was lost (a stop it takes
# starts no task at all; the margin covers the clocks of the event's timestamp and ours).
LOST_AFTER_S = 0.5
TASK_START_EVENTS = ("playbook_on_task_start", "playbook_on_handler_task_start")


class Stopper:
    """Turns SIGINT/SIGTERM during a run into a graceful stop of ansible-playbook (see the module docstring)."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        self.pid: int | None = None  # ansible-playbook, from its first event
        self.signals: list[int] = []
        self.first_at: float | None = None
        self.sent_at: float | None = None  # wall clock (time.time) of the last SIGINT sent to ansible-playbook
        self.resent = 0

    @property
    def interrupted(self) -> str | None:
        return signal.Signals(self.signals[0]).name if self.signals else None

    def on_signal(self, signum: int, frame: Any = None) -> None:
        self.signals.append(signum)
        if len(self.signals) == 1:
            self.first_at = time.monotonic()
            self._send()

    def _send(self) -> None:
        if self.pid is not None:
            self.sent_at = time.time()
            try:
                os.kill(self.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def on_event(self, event: dict[str, Any]) -> None:
        """After one stop signal: a task that ansible-playbook started more than ``LOST_AFTER_S`` after it was sent
        SIGINT (the event's ``created`` time) shows that the SIGINT was lost - send it again."""
        if len(self.signals) != 1 or self.sent_at is None or event.get("event") not in TASK_START_EVENTS:
            return
        created = event_time(event)
        if created is not None and created > self.sent_at + LOST_AFTER_S:
            self.resent += 1
            self._send()

    def cancel(self) -> bool:
        """ansible-runner's cancel callback: True kills ansible-playbook's process group."""
        if not self.signals:
            return False
        if self.pid is None or len(self.signals) > 1:
            return True  # not started yet (no task ran), or a second Ctrl-C
        return time.monotonic() - (self.first_at or 0.0) > self.grace_s

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        """Handle the stop signals while the block runs (only the main thread may; elsewhere this does nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self.on_signal) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def event_time(event: dict[str, Any]) -> float | None:
    """An ansible-runner event's ``created`` time (ISO 8601; UTC when it names no zone) as seconds since the epoch,
    or None."""
    try:
        created = datetime.datetime.fromisoformat(str(event["created"]))
    except (KeyError, ValueError):
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=datetime.timezone.utc)
    return created.timestamp()


def action_of(event_data: dict[str, Any]) -> str | None:
    """The module or action plugin behind a task event, as a fully qualified name (``gpufleet.tuning.audit``).

    ansible-runner's event data carries ``resolved_action`` (the FQCN Ansible resolved the task's action to, as
    ansible-runner's own display uses; set in the ``runner_on_*`` events since ansible-core 2.11) and
    ``task_action`` (the action as written in the task), used when the former is missing.
    """
    return event_data.get("resolved_action") or event_data.get("task_action") or None


def failure_message(res: dict[str, Any]) -> str:
    """The first line of why a task failed (its ``msg``, ``reason`` or ``stderr``), or ``failed``."""
    msg = str(res.get("msg") or res.get("reason") or res.get("stderr") or "").strip()
    return msg.splitlines()[0] if msg else "failed"


def clean_result(res: dict[str, Any]) -> dict[str, Any]:
    """A task's result without Ansible's own keys (``_ansible_*``, ``invocation``)."""
    return {k: v for k, v in (res or {}).items() if not k.startswith("_ansible") and k != "invocation"}


TASK_RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable")

# A Python warning as the interpreter prints it: "FILE:LINE: SomethingDeprecationWarning: ...", then the source line.
_PY_DEPRECATION = re.compile(r"^\S+:\d+: \w*DeprecationWarning: ")


class RawOutput:
    """ansible-playbook's own output, from ansible-runner's events (every line of it is in some event's ``stdout``):
    written whole to ``log`` (a run's raw log), and to ``terminal`` (``-v``) without deprecation warnings: Ansible's
    ("deprecated" events, e.g. the one for the shipped strategy plugin) and Python's (a ``...DeprecationWarning:``
    line and the source line after it)."""

    def __init__(self, log: Any = None, terminal: Any = None) -> None:
        self.log = log
        self.terminal = terminal
        self._skip_source_line = False

    def __call__(self, event: dict[str, Any]) -> None:
        text = event.get("stdout")
        if not text:
            return
        if self.log is not None:
            self.log.write(text + "\n")
        if self.terminal is not None and self.terminal_shows(event):
            try:
                print(text, file=self.terminal, flush=True)
            except (BrokenPipeError, ValueError):  # the reader went away: the log still gets everything
                self.terminal = None

    def terminal_shows(self, event: dict[str, Any]) -> bool:
        text = str(event.get("stdout") or "")
        skip_source, self._skip_source_line = self._skip_source_line, False
        if event.get("event") == "deprecated":
            return False
        if event.get("event") == "verbose":
            if _PY_DEPRECATION.match(text):
                self._skip_source_line = True
                return False
            if skip_source and text.startswith(" "):
                return False
        return True


def collect(hosts: dict[str, HostResult], event: dict[str, Any]) -> None:
    """Record a task event's result under its host: the one reading of ansible-runner's ``runner_on_*`` events, for
    a direct run (``run_playbook``) and a worker's stream (``workers``). Other events are ignored."""
    data = event.get("event_data") or {}
    name = data.get("host")
    kind = event.get("event")
    if not name or kind not in TASK_RESULT_EVENTS:
        return
    h = hosts.setdefault(name, HostResult(name))
    task, action, res = data.get("task", ""), action_of(data), clean_result(data.get("res") or {})
    if kind == "runner_on_ok":
        h.record(task, action, res)
    elif kind == "runner_on_failed":
        h.record(task, action, res)
        h.status, h.message = "failed", f"{task}: {failure_message(res)}"
    else:
        h.record(task, action, {**res, "unreachable": True})
        h.status, h.message = "unreachable", failure_message(res)


def run_playbook(
    playbook: str,
    inventory: str | list[str],
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    forks: int | None = None,
    quiet: bool = True,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    keep_events: bool = False,
    tags: str | None = None,
    check: bool = False,
    diff: bool = False,
    log_path: Path | None = None,
) -> RunResult:
    """Run ``playbook`` (a name under the collection's ``playbooks/``, or a path) against ``inventory`` (one
    inventory, or several merged: each is passed to ansible-playbook as its own -i, as repeated -i are).

    A host's result for a task that registered with ``ignore_errors``/``ignore_unreachable`` is kept (under the
    task's action and its name) even when it failed; the host's status says how it fared.

    ansible-playbook's output goes to the terminal (stdout) only when not ``quiet``, without deprecation warnings
    (``RawOutput``); ``log_path``: the whole of it is written there too (a run directory's raw log), as it comes.
    """
    import ansible_runner  # imported here: `gpufleet --help` should not pay for it

    root = paths.collection_root()
    playbook_path = Path(playbook) if os.sep in playbook else root / "playbooks" / playbook
    if not playbook_path.is_file():
        raise FileNotFoundError(f"playbook not found: {playbook_path}")
    inventory_paths = []
    for source in [inventory] if isinstance(inventory, str) else inventory:
        if not Path(source).exists():
            raise FileNotFoundError(f"inventory not found: {source}")
        inventory_paths.append(str(Path(source).resolve()))

    hosts: dict[str, HostResult] = {}
    events: list[dict[str, Any]] = []

    stopper = Stopper()
    log = open(log_path, "w", encoding="utf-8", errors="replace") if log_path else None  # closed by the ExitStack
    raw = RawOutput(log=log, terminal=None if quiet else sys.stdout)

    def handler(event: dict[str, Any]) -> bool:
        if keep_events:
            events.append(event)
        raw(event)
        if stopper.pid is None and event.get("event") == "playbook_on_start" and event.get("pid"):
            stopper.pid = int(event["pid"])
            if stopper.signals:  # a signal came before ansible-playbook said who it is
                stopper.on_signal(stopper.signals.pop())
        stopper.on_event(event)
        collect(hosts, event)
        if on_event is not None:
            on_event(event)
        # False: ansible-runner does not write the event to its artifact directory. Every event would be written
        # there with the host's full result (an audit result is ~40 KB), into a temporary directory nobody reads:
        # what the caller keeps is in ``hosts`` and, with keep_events, ``events``. (ansible-runner.run: event_handler
        # "return True to keep the event"; Runner.event_callback writes only those.)
        return False

    with contextlib.ExitStack() as closing, tempfile.TemporaryDirectory(prefix="gpufleet-run-") as tmp:
        if log is not None:
            closing.enter_context(log)
        workdir = Path(tmp)
        envvars = {
            "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": paths.collections_path(root, workdir / "collections"),
            # ansible-runner starts `ansible-playbook` from PATH: use the one installed next to us.
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            **strategy_env(),
        }
        cmdline = []
        if limit:
            cmdline += ["--limit", limit]
        if forks:
            cmdline += ["--forks", str(forks)]
        if tags:
            cmdline += ["--tags", tags]
        if check:
            cmdline.append("--check")
        if diff:
            cmdline.append("--diff")
        (workdir / "runner").mkdir()
        with stopper.installed():
            r = ansible_runner.run(
                private_data_dir=str(workdir / "runner"),
                playbook=str(playbook_path),
                inventory=inventory_paths,  # ansible-runner passes each source as its own -i
                envvars=envvars,
                extravars=extravars or {},
                cmdline=shlex.join(cmdline) if cmdline else None,
                event_handler=handler,
                cancel_callback=stopper.cancel,
                # ansible-runner prints nothing itself: the output reaches the terminal (-v) and the raw log
                # through the events (RawOutput), so that deprecation warnings can be held back from the terminal.
                quiet=True,
                # Nor the run's stdout (artifacts/stdout, in the same temporary directory): the raw log, when the
                # caller keeps one, is log_path. A setting (env/settings), not the keyword of the same
                # name: ansible-runner 2.4 reads it from the settings and so ignores the keyword.
                settings={"suppress_output_file": True},
                project_dir=str(root),
            )
    return RunResult(rc=r.rc, status=r.status, hosts=hosts, events=events, interrupted=stopper.interrupted)


@dataclass(frozen=True)
class TaskInfo:
    """What a task file says about one task that ansible-runner's events leave out: its tags and its ``when``
    conditions, each with those of the blocks around it."""

    tags: tuple[str, ...] = ()
    when: tuple[str, ...] = ()


_TASKS_CACHE: dict[str, dict[int, TaskInfo]] = {}


def task_info(task_path: str | None) -> TaskInfo:
    """The task at ``task_path`` (ansible-runner's ``event_data.task_path``, ``FILE:LINE``), read from the task file
    itself by the line ansible-runner names; an empty TaskInfo when the file cannot be read. Read while the run
    lives: a collection's files may be reached through the run's temporary directory."""
    if not task_path or ":" not in task_path:
        return TaskInfo()
    file, _, line = task_path.rpartition(":")
    if file not in _TASKS_CACHE:
        _TASKS_CACHE[file] = _tasks_by_line(file)
    try:
        return _TASKS_CACHE[file].get(int(line), TaskInfo())
    except ValueError:
        return TaskInfo()


def _tasks_by_line(file: str) -> dict[int, TaskInfo]:
    """Line of each task in a task file (1-based, where its mapping starts: Ansible's task_path) -> TaskInfo."""
    import yaml

    try:
        root = yaml.compose(Path(file).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    found: dict[int, TaskInfo] = {}

    def strings(node: Any, split: bool) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            if split:
                return tuple(t.strip() for t in str(node.value).split(",") if t.strip())
            return (str(node.value),)
        if isinstance(node, yaml.SequenceNode):
            return tuple(str(n.value) for n in node.value if isinstance(n, yaml.ScalarNode))
        return ()

    def walk(tasks: Any, inherited: TaskInfo) -> None:
        if not isinstance(tasks, yaml.SequenceNode):
            return
        for task in tasks.value:
            if not isinstance(task, yaml.MappingNode):
                continue
            keys = {k.value: v for k, v in task.value if isinstance(k, yaml.ScalarNode)}
            mine = TaskInfo(
                inherited.tags + strings(keys.get("tags"), split=True),
                inherited.when + strings(keys.get("when"), split=False),
            )
            found[task.start_mark.line + 1] = mine
            for key in ("block", "rescue", "always"):
                walk(keys.get(key), mine)

    walk(root, TaskInfo())
    return found
