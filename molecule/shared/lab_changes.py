"""Check mode is a promise: compare what the check step said it would change with what converge changed.

Reads the JSON lines molecule/callback_plugins/gpufleet_lab_changes.py writes (one per changed result or loop item)
and compares the last check-mode run of a playbook with the first real run after it: the same (host, task, item)
keys and, for each, the same diff (headers left out: they name temporary files).
"""

from __future__ import annotations

import json
from pathlib import Path


def _norm(diff):
    if diff is None:
        return None
    parts = diff if isinstance(diff, list) else [diff]
    return [{k: v for k, v in part.items() if not k.endswith("_header")} for part in parts if isinstance(part, dict)]


def _apt_packages(diff) -> set[str]:
    """Packages an apt transcript (the apt module's diff: {'prepared': ...}) installs, upgrades or removes."""
    names: set[str] = set()
    for part in diff or []:
        listing = False
        for line in str(part.get("prepared", "")).splitlines():
            if line.startswith("The following"):
                listing = "installed" in line or "REMOVED" in line or "upgraded" in line
            elif line.startswith("  ") and listing:
                names.update(line.split())
            else:
                listing = False
    return names


def _apt_predicted(check_rec: dict, real_diff) -> bool:
    """apt cannot simulate a swap of held packages in check mode: the role's twin task names the packages instead
    (no diff). It predicted the real run when every package the real transcript lists is named in its message."""
    names = _apt_packages(real_diff)
    msg = str(check_rec.get("msg") or "")
    return bool(names) and all(name in msg for name in names)


def runs(path: Path) -> list[tuple[str, bool, list[dict]]]:
    """(playbook, check, records) per ansible-playbook run, in the order they ran."""
    order: dict[str, tuple[str, bool, list[dict]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        order.setdefault(rec["run"], (rec["playbook"], rec["check"], []))[2].append(rec)
    return list(order.values())


def _task(name: str) -> str:
    """A check-mode twin is named after the task it stands for plus " (check mode...)": pair them by that name."""
    return name.split(" (check mode", 1)[0]


def changes(records: list[dict], ignore: frozenset[str] = frozenset()) -> dict[tuple, object]:
    """(host, task, item) -> diff. A change that an earlier task of the same run already made (or, in check mode,
    already predicted: the same non-empty diff on the same host) counts once, at its first task: two roles that
    both create /etc/gpufleet predict it twice in check mode, while the real run creates it once."""
    out: dict[tuple, object] = {}
    seen: set[tuple] = set()
    for rec in records:
        if rec["task"] in ignore:
            continue
        diff = _norm(rec["diff"])
        if diff:
            same = (rec["host"], json.dumps(diff, sort_keys=True))
            if same in seen:
                continue
            seen.add(same)
        out[(rec["host"], _task(rec["task"]), json.dumps(rec["item"], sort_keys=True))] = diff
    return out


def broken_promises(path: Path, playbook: str = "converge.yml", ignore: frozenset[str] = frozenset()) -> list[str]:
    """Differences between the last check run of `playbook` and the first real run after it (empty: the promise
    held). The last check run, not the first: an earlier sequence interrupted before molecule pruned its ephemeral
    directory leaves its own (possibly partial) runs at the top of the log."""
    all_runs = [r for r in runs(path) if r[0] == playbook]
    last = max((i for i, (_pb, chk, _recs) in enumerate(all_runs) if chk), default=None)
    check = None if last is None else all_runs[last][2]
    real = None if last is None else next((recs for _pb, chk, recs in all_runs[last + 1 :] if not chk), None)
    if check is None or real is None:
        return [f"{path}: no check run and real run of {playbook} logged (is the callback enabled?)"]
    predicted, done = changes(check, ignore), changes(real, ignore)
    check_recs = {(r["host"], _task(r["task"]), json.dumps(r["item"], sort_keys=True)): r for r in check}
    problems = [f"changed but not predicted: {k}" for k in sorted(done.keys() - predicted.keys())]
    problems += [f"predicted but not changed: {k}" for k in sorted(predicted.keys() - done.keys())]
    for key in sorted(predicted.keys() & done.keys()):
        if predicted[key] is None and _apt_predicted(check_recs[key], done[key]):
            continue
        if predicted[key] != done[key]:
            problems.append(f"diff differs for {key}:\n  check: {predicted[key]}\n  real:  {done[key]}")
    return problems
