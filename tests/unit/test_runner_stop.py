"""runner.Stopper: how Ctrl-C and SIGTERM during a playbook run are handled (the end-to-end SIGINT tests are in
tests/integration/test_fleet_faults.py)."""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import threading
import time

from gpufleet import runner


def _sleeper(lose_first: bool = False) -> subprocess.Popen:
    """A stand-in for ansible-playbook that exits 3 on SIGINT (``lose_first``: on the second one, as Ansible does when
    the first lands while it forks a worker)."""
    code = (
        "import signal, sys, time\n"
        "seen = []\n"
        f"lose = {1 if lose_first else 0}\n"
        "signal.signal(signal.SIGINT, lambda *a: seen.append(1) if len(seen) < lose else sys.exit(3))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_first_signal_is_passed_on_as_sigint_and_the_run_is_not_killed():
    proc = _sleeper()
    stop = runner.Stopper()
    stop.pid = proc.pid
    assert stop.cancel() is False and stop.interrupted is None
    stop.on_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 3  # it got SIGINT, Ansible's own way to stop
    assert stop.interrupted == "SIGTERM"
    assert stop.cancel() is False  # within the grace period: let it finish its way


def test_second_signal_or_no_pid_or_grace_over_kills():
    stop = runner.Stopper()
    stop.on_signal(signal.SIGINT)
    assert stop.cancel() is True  # ansible-playbook not started yet: nothing ran, kill it
    stop = runner.Stopper(grace_s=0.0)
    stop.pid = 2**22 + 1  # no such process
    stop.on_signal(signal.SIGINT)
    assert stop.cancel() is True  # grace period over
    stop = runner.Stopper()
    stop.pid = 2**22 + 1
    stop.on_signal(signal.SIGINT)
    assert stop.cancel() is False
    stop.on_signal(signal.SIGINT)
    assert stop.cancel() is True  # a second Ctrl-C


def test_handlers_are_installed_only_while_running_and_only_in_the_main_thread():
    before = signal.getsignal(signal.SIGINT)
    stop = runner.Stopper()
    with stop.installed():
        assert signal.getsignal(signal.SIGINT) == stop.on_signal
        assert signal.getsignal(signal.SIGTERM) == stop.on_signal
    assert signal.getsignal(signal.SIGINT) == before

    seen = []

    def in_thread():
        with runner.Stopper().installed():
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    assert seen == [before]


def _task_start(at: float, event: str = "playbook_on_task_start") -> dict:
    return {"event": event, "created": datetime.datetime.fromtimestamp(at, datetime.timezone.utc).isoformat()}


def test_a_lost_sigint_is_sent_again_when_a_task_starts_after_it():
    """Ansible drops a SIGINT that lands while it forks a worker (its KeyboardInterrupt is raised in logging's
    at-fork callback): the play goes on. A task started after the SIGINT shows it; the SIGINT is sent again."""
    proc = _sleeper(lose_first=True)
    stop = runner.Stopper()
    stop.pid = proc.pid
    stop.on_signal(signal.SIGINT)
    sent = stop.sent_at
    time.sleep(0.3)
    assert proc.poll() is None  # the first SIGINT was lost
    stop.on_event({"event": "runner_on_ok", "created": _task_start(sent + 2)["created"]})  # not a task start
    stop.on_event(_task_start(sent + 0.1))  # started before the stop could take effect: no evidence
    stop.on_event({"event": "playbook_on_task_start"})  # no time: no evidence
    assert stop.resent == 0 and proc.poll() is None
    stop.on_event(_task_start(sent + 1.0))
    assert stop.resent == 1
    assert proc.wait(timeout=10) == 3
    assert stop.interrupted == "SIGINT" and stop.cancel() is False


def test_no_resend_before_a_signal_or_after_a_second_one():
    stop = runner.Stopper()
    stop.pid = 2**22 + 1  # no such process
    stop.on_event(_task_start(time.time() + 5))
    assert stop.resent == 0 and stop.sent_at is None  # nothing was asked to stop
    stop.on_signal(signal.SIGINT)
    stop.on_signal(signal.SIGINT)  # a second Ctrl-C: cancel() kills, nothing is resent
    stop.on_event(_task_start(time.time() + 5, "playbook_on_handler_task_start"))
    assert stop.resent == 0 and stop.cancel() is True
