"""molecule/shared/lab_changes.py, the check-is-a-promise comparison every Molecule scenario's verify step runs: it
pairs the last check run with the first real run after it, so the partial runs of an earlier sequence that was
interrupted before molecule pruned its ephemeral directory (an earlier check step cut short, then a whole new
sequence appended to the same log) do not make a correct promise look broken."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lab_changes", REPO / "molecule" / "shared" / "lab_changes.py")
lab_changes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab_changes)


def _log(path, runs):
    lines = []
    for n, (playbook, check, tasks) in enumerate(runs):
        for task in tasks:
            lines.append({"run": f"r{n}", "playbook": playbook, "check": check, "host": "h", "task": task,
                          "item": None, "diff": None})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_promise_kept_after_an_interrupted_sequence_holds(tmp_path):
    full = ["Blacklist nouveau", "Enable nvidia-persistenced"]
    log = _log(
        tmp_path / "changes.jsonl",
        [
            ("converge.yml", True, full[:1]),  # the earlier sequence's check step, cut short
            ("converge.yml", True, full),  # this sequence's check step
            ("converge.yml", False, full),  # converge
            ("converge.yml", False, []),  # idempotence
        ],
    )
    assert lab_changes.broken_promises(log) == []


def test_a_broken_promise_is_still_named(tmp_path):
    log = _log(
        tmp_path / "changes.jsonl",
        [("converge.yml", True, ["Blacklist nouveau"]), ("converge.yml", False, ["Blacklist nouveau", "Reboot"])],
    )
    assert lab_changes.broken_promises(log) == ["changed but not predicted: ('h', 'Reboot', 'null')"]


def test_no_check_run_is_reported(tmp_path):
    log = _log(tmp_path / "changes.jsonl", [("converge.yml", False, ["Blacklist nouveau"])])
    assert "no check run and real run of converge.yml logged" in lab_changes.broken_promises(log)[0]
