"""The remediation lock (module_utils/lock.py and the action plugin's holder checks): one holder at a time, a
second holder is refused with the first one named, stale locks (too old, unreadable, holder process gone) are taken
over, check mode writes nothing, and racing processes cannot both win."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from ansible_collections.gpufleet.tuning.plugins.action import remediation_lock as action
from ansible_collections.gpufleet.tuning.plugins.module_utils import lock


def _holder(name: str, pid: int = 4242, **extra) -> dict:
    holder = {
        "run_id": f"run-{name}",
        "controller": f"ctl-{name}",
        "controller_boot_id": "boot-1",
        "pid": pid,
        "pid_start": "1000",
        "user": "root",
        **extra,
    }
    holder["token"] = lock.token_of(holder)
    return holder


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "run" / "gpufleet" / "remediation.lock")


def test_first_holder_wins_second_is_refused_and_sees_the_first(path):
    a, b = _holder("a"), _holder("b")
    got = lock.acquire(path, a, now=1000.0)
    assert got["acquired"] is True and got["holder"]["run_id"] == "run-a" and got["previous"] is None
    record = json.loads(open(path).read())
    assert record["token"] == a["token"] and record["acquired_at"] == "1970-01-01T00:16:40Z"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"

    refused = lock.acquire(path, b, now=1010.0)
    assert refused["acquired"] is False
    assert refused["holder"]["run_id"] == "run-a" and refused["holder"]["pid"] == 4242
    assert refused["age"] == 10.0
    assert json.loads(open(path).read())["token"] == a["token"]  # unchanged


def test_reentrant_and_release_only_by_the_holder(path):
    a, b = _holder("a"), _holder("b")
    lock.acquire(path, a, now=1000.0)
    again = lock.acquire(path, a, now=2000.0)
    assert again["acquired"] is True and again["holder"]["acquired_epoch"] == 1000.0  # the first record stays
    assert lock.release(path, b["token"]) == {"released": False, "holder": again["holder"]}
    assert os.path.exists(path)
    assert lock.release(path, a["token"])["released"] is True
    assert not os.path.exists(path)
    assert lock.release(path, a["token"]) == {"released": False, "holder": None}


def test_stale_locks_are_taken_over(path):
    a, b = _holder("a"), _holder("b")
    lock.acquire(path, a, now=1000.0)
    assert lock.acquire(path, b, max_age=60, now=1050.0)["acquired"] is False
    old = lock.acquire(path, b, max_age=60, now=1061.0)
    assert old["acquired"] is True and old["previous"]["run_id"] == "run-a"
    assert old["stale_reason"] == "held for 61 s, more than max_age 60 s"

    # the controller found the holder's process gone: only that holder is replaced
    c = _holder("c")
    assert lock.acquire(path, c, take_over=a["token"], now=1070.0)["acquired"] is False  # b holds it now
    taken = lock.acquire(path, c, take_over=b["token"], now=1070.0)
    assert taken["acquired"] is True and "ansible-playbook process (pid 4242 on ctl-b) is gone" in taken["stale_reason"]

    with open(path, "w") as f:
        f.write("{half a reco")
    fixed = lock.acquire(path, a, now=1080.0)
    assert fixed["acquired"] is True and fixed["stale_reason"].startswith("the lock file cannot be read: not JSON")


def test_check_mode_writes_nothing(path, tmp_path):
    a, b = _holder("a"), _holder("b")
    assert lock.acquire(path, a, check_mode=True)["acquired"] is True
    assert not (tmp_path / "run").exists()  # not even the directory
    lock.acquire(path, a, now=1000.0)
    before = open(path).read()
    assert lock.acquire(path, b, check_mode=True, now=1001.0)["acquired"] is False  # a check run waits too
    assert lock.acquire(path, b, max_age=1, check_mode=True, now=5000.0)["acquired"] is True
    assert lock.release(path, a["token"], check_mode=True)["released"] is True
    assert open(path).read() == before


def _race(path, name, barrier, results):
    barrier.wait()
    results.put((name, lock.acquire(path, _holder(name))["acquired"]))


def test_racing_processes_cannot_both_win(path):
    os.makedirs(os.path.dirname(path))
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(path, f"p{i}", barrier, results)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
    outcome = dict(results.get(timeout=5) for _ in procs)
    winners = [n for n, won in outcome.items() if won]
    assert len(winners) == 1, outcome
    assert json.loads(open(path).read())["run_id"] == f"run-{winners[0]}"
    assert sorted(os.listdir(os.path.dirname(path))) == ["remediation.lock"]  # no temp file left


def test_controller_holder_names_this_ansible_playbook_process():
    me = action.controller_holder("r1")
    assert me["pid"] == os.getppid() and me["run_id"] == "r1"
    assert me["pid_start"] == action.process_start(os.getppid()) and me["token"] == lock.token_of(me)


def test_a_holder_whose_process_is_gone_is_detected():
    me = action.controller_holder()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = action.process_start(proc.pid)
    proc.wait()
    dead = dict(me, pid=proc.pid, pid_start=start)
    assert action.holder_is_gone(dead, me) is True
    alive = dict(me, pid=os.getpid(), pid_start=action.process_start(os.getpid()))
    assert action.holder_is_gone(alive, me) is False
    # the same pid started again later is another process
    assert action.holder_is_gone(dict(alive, pid_start="1"), me) is True
    # another controller, or this one before a reboot: the age decides, not the pid
    assert action.holder_is_gone(dict(dead, controller="elsewhere"), me) is False
    assert action.holder_is_gone(dict(dead, controller_boot_id="old-boot"), me) is False
