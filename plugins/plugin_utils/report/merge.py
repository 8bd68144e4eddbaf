# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Merge the reports of job slices (AWX job slicing, or ``gpufleet audit --limit`` runs) into one fleet report.

``merge_reports([(label, report), ...])`` returns one ``gpufleet.report/v1`` document, or raises ``MergeError``
naming the inputs at fault. ``label`` says where a report came from (its path): errors and the merged ``run``
name inputs by it. Pure: it reads only its arguments (no clock, no files), so the same inputs merge to the same
report, run id included.

Refused (``MergeError``):

- reports of different schema versions (``schema``), or one that is not a valid v1 report (its summary is not
  checked: it is recomputed);
- reports judged by different policies: different policy files (``run.policy_sources``), a different report-level
  ``run.policy_digest`` where both inputs carry one, or a host in two inputs whose ``policy_digest`` differs;
- reports whose catalogs disagree on a rule (same id, different entry: different gpufleet versions);
- the same run twice (same ``run.id``: a file given twice, or a copy).

A host in more than one input is kept once, from the input whose run finished last (``run.finished_at``; on a tie,
the one given last): a slice re-run for the hosts it could not reach is the newer word on them. The report says
so: ``run.duplicates`` maps each such host to ``{"kept": label, "dropped": [labels], "rule": DUPLICATE_RULE}``,
and the host itself carries ``merged_from: {"kept": label, "dropped": [labels]}``.

The merged ``run``: ``started_at`` the earliest, ``finished_at`` the latest of the inputs; ``complete`` only when
every input is complete (``incomplete_reason`` names those that are not); ``merged_from`` lists every input
(label, run id, started/finished, complete, controller, inventory, limit, hosts kept and given); ``policy_sources``
the inputs' (one list: they are equal). ``summary`` is recomputed from the merged hosts (``schema.summarize``);
``catalog`` is the union of the inputs' catalogs.

Standard library and this package only (tests/unit/test_report_schema.py holds the package to that).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from . import schema
from .terminal import clean

DUPLICATE_RULE = "the input whose run finished last (run.finished_at) wins; on a tie, the one given last"
_SHOWN = 5  # hosts or rules named in one error before "and N more"


class MergeError(ValueError):
    """The inputs cannot be merged; the message names the inputs and why. ``labels``: the inputs at fault."""

    def __init__(self, message: str, labels: list[str] | None = None) -> None:
        # One printable line: it quotes host names and what hosts said (a host's policy_digest), printed as is by
        # the CLI; their control and bidi characters are shown escaped (issue 26).
        super().__init__(clean(message))
        self.labels = list(labels or [])


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _run(report: dict) -> dict:
    run = report.get("run")
    return run if isinstance(run, dict) else {}


def _check_schemas(inputs: list[tuple[str, dict]]) -> None:
    versions: dict[Any, list[str]] = {}
    for label, report in inputs:
        versions.setdefault(report.get("schema") if isinstance(report, dict) else None, []).append(label)
    if len(versions) > 1:
        parts = "; ".join(f"{version!r}: {', '.join(labels)}" for version, labels in versions.items())
        raise MergeError(f"the reports have different schema versions ({parts})", [label for label, _report in inputs])
    version = next(iter(versions))
    if version != schema.SCHEMA:
        raise MergeError(
            f"{inputs[0][0]}: schema {version!r} cannot be merged (this gpufleet merges {schema.SCHEMA!r})",
            [label for label, _report in inputs],
        )


def _check_valid(inputs: list[tuple[str, dict]]) -> None:
    for label, report in inputs:
        # The summary is recomputed: one that no longer adds up does not matter here.
        problems = [p for p in schema.validate(report) if not p.startswith("summary")]
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise MergeError(f"{label}: not a valid gpufleet report: {'; '.join(problems[:3])}{more}", [label])


def _check_runs(inputs: list[tuple[str, dict]]) -> None:
    seen: dict[str, str] = {}
    for label, report in inputs:
        run_id = _run(report).get("id")
        if run_id in seen:
            raise MergeError(
                f"{seen[run_id]} and {label} are the same run ({run_id}): give each slice's report once",
                [seen[run_id], label],
            )
        seen[run_id] = label


def _check_policies(inputs: list[tuple[str, dict]]) -> None:
    """Refuse reports judged by different policies, naming the inputs that differ from the first."""
    first_label, first = inputs[0]
    sources = list(_run(first).get("policy_sources") or [])
    differ = [label for label, report in inputs[1:] if list(_run(report).get("policy_sources") or []) != sources]
    if differ:
        listed = "; ".join(
            f"{label}: {', '.join(map(str, _run(report).get('policy_sources') or [])) or 'none'}"
            for label, report in inputs
        )
        raise MergeError(
            f"the reports were judged by different policy files (run.policy_sources): {listed}",
            [first_label, *differ],
        )
    digests = [(label, _run(report).get("policy_digest")) for label, report in inputs]
    digests = [(label, d) for label, d in digests if d]
    if len({d for _label, d in digests}) > 1:
        listed = "; ".join(f"{label}: {d}" for label, d in digests)
        raise MergeError(
            f"the reports were judged by different policies (run.policy_digest): {listed}",
            [label for label, _digest in digests],
        )
    by_host: dict[str, list[tuple[str, str]]] = {}
    for label, report in inputs:
        for name, host in report["hosts"].items():
            if host.get("policy_digest"):
                by_host.setdefault(name, []).append((label, host["policy_digest"]))
    differing = sorted(name for name, seen in by_host.items() if len({d for _label, d in seen}) > 1)
    if differing:
        name = differing[0]
        labels = sorted({label for n in differing for label, _digest in by_host[n]})
        detail = "; ".join(f"{label}: {digest}" for label, digest in by_host[name])
        raise MergeError(
            f"the reports judged {_some(differing)} by different policies (policy_digest of {name}: {detail})",
            labels,
        )


def _merge_catalogs(inputs: list[tuple[str, dict]]) -> list[dict]:
    entries: dict[str, tuple[str, dict]] = {}
    conflicts: dict[str, list[str]] = {}
    for label, report in inputs:
        for entry in report.get("catalog") or []:
            rid = entry["id"]
            if rid not in entries:
                entries[rid] = (label, entry)
            elif entries[rid][1] != entry:
                conflicts.setdefault(rid, [entries[rid][0]])
                if label not in conflicts[rid]:
                    conflicts[rid].append(label)
    if conflicts:
        labels = sorted({label for seen in conflicts.values() for label in seen})
        versions = "; ".join(
            f"{label}: gpufleet {(report.get('tool') or {}).get('version', '?')}"
            for label, report in inputs
            if label in labels
        )
        raise MergeError(
            f"the reports' rule catalogs differ on {_some(sorted(conflicts))} ({versions}): merge reports of one "
            "gpufleet version",
            labels,
        )
    return [entry for _label, entry in sorted(entries.values(), key=lambda item: item[1]["id"])]


def _finished_key(position: int, report: dict) -> tuple:
    """Sort key of an input: when its run finished, then its position (the one given later wins a tie)."""
    text = _run(report).get("finished_at")
    return (_time_key((schema.parse_time(text), str(text or ""))), position)


def _joined(values: list[Any]) -> str | None:
    """The distinct non-empty values, in order, joined by ", "; None when there are none."""
    seen: list[str] = []
    for value in values:
        if value and str(value) not in seen:
            seen.append(str(value))
    return ", ".join(seen) or None


def _merged_limit(runs: list[dict]) -> str | None:
    """The inputs' limits as one Ansible pattern (a union: ``a:b``); None (all hosts) if any input had none."""
    limits = [run.get("limit") for run in runs]
    if any(not limit for limit in limits):
        return None
    return ":".join(dict.fromkeys(str(limit) for limit in limits))


def merge_reports(inputs: list[tuple[str, dict]], controller: str | None = None) -> dict[str, Any]:
    """One fleet report from ``inputs``, a list of ``(label, report)`` (label: where the report came from, e.g. its
    path; labels must differ). ``controller``: the machine that merged (default: the inputs' controllers). Raises
    MergeError (see the module's docstring). The inputs are not modified."""
    if not inputs:
        raise MergeError("no reports to merge")
    labels = [label for label, _report in inputs]
    if len(set(labels)) != len(labels):
        twice = sorted({label for label in labels if labels.count(label) > 1})
        raise MergeError(f"{_some(twice)} given more than once", twice)
    not_objects = [label for label, report in inputs if not isinstance(report, dict)]
    if not_objects:
        raise MergeError(f"{not_objects[0]}: not a gpufleet report (not a JSON object)", not_objects)
    _check_schemas(inputs)
    _check_valid(inputs)
    _check_runs(inputs)
    _check_policies(inputs)
    catalog = _merge_catalogs(inputs)

    # Each host from the input that finished last among those that have it.
    order = sorted(range(len(inputs)), key=lambda i: _finished_key(i, inputs[i][1]))
    chosen: dict[str, int] = {}
    given: dict[str, list[int]] = {}
    for i in order:
        for name in inputs[i][1]["hosts"]:
            chosen[name] = i  # later in ``order`` wins
            given.setdefault(name, []).append(i)
    hosts: dict[str, Any] = {}
    duplicates: dict[str, Any] = {}
    for name in sorted(chosen):
        host = copy.deepcopy(inputs[chosen[name]][1]["hosts"][name])
        if len(given[name]) > 1:
            kept = inputs[chosen[name]][0]
            dropped = [inputs[i][0] for i in sorted(given[name]) if i != chosen[name]]
            host["merged_from"] = {"kept": kept, "dropped": dropped}
            duplicates[name] = {"kept": kept, "dropped": dropped, "rule": DUPLICATE_RULE}
        hosts[name] = host

    runs = [_run(report) for _label, report in inputs]
    kept_counts = {i: 0 for i in range(len(inputs))}
    for i in chosen.values():
        kept_counts[i] += 1
    merged_from = [
        {
            "label": label,
            "id": run.get("id"),
            "started_at": run.get("started_at"),
            "finished_at": run.get("finished_at"),
            "complete": run.get("complete"),
            "incomplete_reason": run.get("incomplete_reason"),
            "controller": run.get("controller"),
            "inventory": run.get("inventory"),
            "limit": run.get("limit"),
            "tool_version": (report.get("tool") or {}).get("version"),
            "hosts": len(report["hosts"]),
            "hosts_kept": kept_counts[i],
        }
        for i, ((label, report), run) in enumerate(zip(inputs, runs))
    ]
    incomplete = [
        f"{label}: {run.get('incomplete_reason') or 'incomplete'}"
        for (label, _report), run in zip(inputs, runs)
        if not run.get("complete")
    ]
    starts = [(schema.parse_time(run.get("started_at")), run.get("started_at")) for run in runs]
    ends = [(schema.parse_time(run.get("finished_at")), run.get("finished_at")) for run in runs]
    run_ids = sorted(str(run.get("id")) for run in runs)
    digest = hashlib.sha256("\n".join(run_ids).encode("utf-8")).hexdigest()
    first_tool = inputs[0][1].get("tool") or {}
    run_out: dict[str, Any] = {
        "id": f"merge-{digest[:32]}",
        "started_at": _earliest(starts),
        "finished_at": _latest(ends),
        "inventory": _joined([run.get("inventory") for run in runs]),
        "limit": _merged_limit(runs),
        "policy_sources": list(runs[0].get("policy_sources") or []),
        "complete": not incomplete,
        "incomplete_reason": "; ".join(incomplete) if incomplete else None,
        "controller": controller or _joined([run.get("controller") for run in runs]) or "",
        "merged_from": merged_from,
        "duplicates": duplicates,
    }
    policy_digests = [run.get("policy_digest") for run in runs if run.get("policy_digest")]
    if policy_digests:
        run_out["policy_digest"] = policy_digests[0]
    return {
        "schema": schema.SCHEMA,
        "tool": {
            "name": first_tool.get("name", "gpufleet"),
            "version": _joined([(report.get("tool") or {}).get("version") for _label, report in inputs]) or "",
        },
        "run": run_out,
        "summary": schema.summarize(hosts),
        "catalog": catalog,
        "hosts": hosts,
    }


def _earliest(times: list[tuple[Any, str]]) -> str:
    """The earliest timestamp text (validated inputs: every one parses); aware times before naive ones' text."""
    return min(times, key=_time_key)[1]


def _latest(times: list[tuple[Any, str]]) -> str:
    return max(times, key=_time_key)[1]


def _time_key(item: tuple[Any, str]) -> tuple:
    when, text = item
    if when is not None and when.tzinfo is not None:
        return (1, when.timestamp(), text)
    return (0, 0.0, text)


def describe(merged: dict) -> list[str]:
    """Lines for a person about a merged report: the inputs, hosts kept from each, and the duplicates (control
    characters of names and labels made visible, as the terminal report does)."""
    run = _run(merged)
    lines = []
    for item in run.get("merged_from") or []:
        state = "complete" if item.get("complete") else f"INCOMPLETE ({item.get('incomplete_reason') or '?'})"
        lines.append(
            clean(
                f"{item.get('label')}: run {item.get('id')}, {item.get('started_at')} .. {item.get('finished_at')}, "
                f"{item.get('hosts')} host(s), {item.get('hosts_kept')} kept, {state}"
            )
        )
    dups = run.get("duplicates") or {}
    if dups:
        lines.append(f"{len(dups)} host(s) in more than one report, each kept once ({DUPLICATE_RULE}):")
        for name, dup in sorted(dups.items()):
            lines.append(clean(f"  {name}: kept from {dup['kept']}; dropped from {', '.join(dup['dropped'])}"))
    return lines
