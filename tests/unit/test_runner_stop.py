"""runner.Stopper: how Ctrl-C and SIGTERM during a playbook run are handled (the end-to-end SIGINT tests are in
tests/integration/test_fleet_faults.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from gpufleet import runner


def _sleeper() -> subprocess.Popen:
    """A stand-in for ansible-playbook that exits 3 on SIGINT."""
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: sys.exit(3))\n"
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
