"""One remediation at a time per host: three real runs of playbooks/remediate.yml against the same simulated host
at once. The first holds the lock (its module calls are slowed down); the second waits for it and goes on after
it; the third gives up after its lock timeout with a message naming the holder, and its `always` release leaves
the other run's lock alone."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import simfleet
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

HOST = "sg-a100-01"
TAKE = "Take the remediation lock (one remediation at a time per host)"
RELEASE = "Release the remediation lock"
PERSISTENCE = "Persistence mode (GPU-PWR-001)"


def _remediate(inventory: Path, run_id: str, **extra):
    return run_playbook(
        "remediate.yml",
        str(inventory),
        tags="GPU-PWR-001",
        extravars={"gpufleet_run_id": run_id, **extra},
    )


def test_parallel_runs_take_turns_and_a_third_gives_up(tmp_path, sim_lib):
    fleet = simfleet.build(tmp_path)
    fast = simfleet.host_vars(fleet, HOST, sim_lib.parent)
    # Same host, same files and lock; only each module call of the first run waits 2 s before it starts, so it holds
    # the lock long enough (over 10 s) for the others to start and find it taken, even on a busy machine.
    slow = dict(fast, ansible_python_interpreter=simfleet.sleeper(tmp_path / "slow-python", 2))
    inv_fast = simfleet.inventory(tmp_path / "fast.yml", {HOST: fast})
    inv_slow = simfleet.inventory(tmp_path / "slow.yml", {HOST: slow})
    lock_file = Path(fast["gpufleet_lock_path"])

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(_remediate, inv_slow, "run-a")
        deadline = time.monotonic() + 60
        while not lock_file.exists():
            assert time.monotonic() < deadline and not first.done(), "the first run never took the lock"
            time.sleep(0.05)
        second = pool.submit(_remediate, inv_fast, "run-b", gpufleet_lock_timeout=120)
        third = pool.submit(_remediate, inv_fast, "run-c", gpufleet_lock_timeout=1)
        a, b, c = first.result(timeout=300), second.result(timeout=300), third.result(timeout=300)

    assert a.hosts[HOST].status == "ok", a.hosts[HOST].message
    assert b.hosts[HOST].status == "ok", b.hosts[HOST].message
    a_take, a_release = a.hosts[HOST].results[TAKE], a.hosts[HOST].results[RELEASE]
    b_take, b_release = b.hosts[HOST].results[TAKE], b.hosts[HOST].results[RELEASE]
    assert a_take["acquired"] is True and a_take["holder"]["run_id"] == "run-a" and a_take["changed"] is False
    assert a_release["released"] is True and a_release["changed"] is False
    # the second waited, and only took the lock once the first had released it
    assert b_take["acquired"] is True and b_take["waited"] >= 1.0, b_take
    assert b_take["holder"]["acquired_epoch"] >= a_release["released_epoch"]
    assert b_release["released"] is True
    # the first one fixed persistence mode; the second found nothing left to change (issue 29: where its targets,
    # computed before it waited for the lock, already saw the rule pass, the task does not even run)
    assert a.hosts[HOST].results[PERSISTENCE]["changed"] is True
    assert b.hosts[HOST].results.get(PERSISTENCE, {"changed": False})["changed"] is False

    # the third gave up after its timeout, naming the holder, and did not release someone else's lock
    assert c.hosts[HOST].status == "failed"
    c_take = c.hosts[HOST].results[TAKE]
    assert c_take["holder"]["run_id"] in ("run-a", "run-b")
    msg = c_take["msg"]
    assert "is held by run run-" in msg and "ansible-playbook pid" in msg and "waited 1 s" in msg, msg
    assert c.hosts[HOST].results[RELEASE]["released"] is False
    assert PERSISTENCE not in c.hosts[HOST].results  # it changed nothing
    assert not lock_file.exists()  # everyone released what they held


@pytest.mark.parametrize(
    "args, message",
    [
        ({"path": "relative/remediation.lock"}, "path: 'relative/remediation.lock' must be an absolute path to a file"),
        ({"timeout": -1}, "timeout: must be 0 or more seconds, got -1"),
        ({"max_age": 0}, "max_age: must be at least 1 second, got 0"),
        ({"run_id": "../../etc"}, "run_id: must be 1-100 characters of letters, digits"),
        ({"timeout": "soon"}, "timeout: 'soon' is not a whole number of seconds"),
        ({"holder": {"token": "forged"}}, "holder and take_over are set by the action plugin"),
    ],
)
def test_bad_input_is_refused_naming_the_option(tmp_path, args, message):
    play = [
        {
            "name": "lock",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [{"name": "Take", "gpufleet.tuning.remediation_lock": {"path": str(tmp_path / "l"), **args}}],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    inventory = simfleet.inventory(tmp_path / "hosts.yml", {"h": {"ansible_connection": "local"}})
    res = run_playbook(
        str(tmp_path / "play.yml"), str(inventory), extravars={"ansible_python_interpreter": sys.executable}
    )
    assert res.hosts["h"].status == "failed"
    assert message in res.hosts["h"].message and "Traceback" not in res.hosts["h"].message, res.hosts["h"].message
    assert not (tmp_path / "l").exists()
