# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""A fleet read at 60 hosts: the hosts worst first, the rules with the hosts each fails on, values as words.

Shared by the renderers (terminal, and the HTML where it takes them up), so that the matrix and the host cards
come in one order and a rule's text and sources are said once per rule, not once per host:

- ``host_order``: host names worst first - hosts not audited (unreachable, failed, timed out, interrupted), then
  by their failing findings per severity (one critical outranks any number of highs), then warnings, errors, name;
- ``rule_rollup``: each rule that fails, warns or errors somewhere, with the hosts in that order, worst rule first;
- ``value_text`` / ``message_text``: an observed or expected value, a rule's message, without JSON braces and
  quotes or Python list brackets (``driver 535.104.05, fabricmanager 535.86.10``; ``GPU(s) 0\u20137``).

The texts are not cleaned here: a renderer cleans them (module_utils/text.py) as it prints them.
"""

from __future__ import annotations

import re
from typing import Any

from . import schema
from .devices import key_ranges

_SHOWN = ("fail", "warn", "error")  # the results a rollup counts, worst first


def host_rank(name: str, host: Any) -> tuple:
    """The sort key of ``host_order``: smaller is worse."""
    status = host.get("status") if isinstance(host, dict) else None
    counts = {st: [0] * (len(schema.SEVERITIES) + 1) for st in ("fail", "warn")}
    errors = 0
    for f in schema.host_findings(host):
        st = f.get("status")
        if st in counts:
            counts[st][schema.severity_rank(f.get("severity"))] += 1
        elif st == "error":
            errors += 1
    down = status != "ok"
    down_rank = schema.DOWN_STATUSES.index(status) if status in schema.DOWN_STATUSES else len(schema.DOWN_STATUSES)
    return (
        0 if down else 1,
        down_rank if down else 0,
        tuple(-n for n in counts["fail"]),
        tuple(-n for n in counts["warn"]),
        -errors,
        str(name),
    )


def host_order(hosts: Any) -> list[str]:
    """The names of ``hosts`` (a report's ``hosts``), worst first (see the module's docstring)."""
    if not isinstance(hosts, dict):
        return []
    return sorted(hosts, key=lambda name: host_rank(name, hosts[name]))


def rule_rollup(report: dict) -> list[dict[str, Any]]:
    """Each rule that fails, warns or errors on a host: ``{"rule", "severity", "area", "title", "rationale", "fix",
    "references", "checked", "fail": [hosts], "warn": [hosts], "error": [hosts]}``; ``checked`` counts the hosts
    with a result for the rule (any status), the host lists follow ``host_order``. Title, area, rationale, fix and
    references come from the report's catalog where it has the rule (else from the first finding); ``severity`` is
    the worst among the failing (else warning) results. Worst first: rules that fail, then warn, then error; by
    severity; by how many hosts; by id."""
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    catalog = schema.catalog_index(report)
    rules: dict[str, dict[str, Any]] = {}
    for name in host_order(hosts):
        for f in schema.host_findings(hosts[name]):
            rid = str(f.get("rule", ""))
            entry = rules.setdefault(
                rid, {"rule": rid, "checked": 0, "first": f, "fail": [], "warn": [], "error": [], "sev": {}}
            )
            entry["checked"] += 1
            st = f.get("status")
            if st in _SHOWN:
                entry[st].append(name)
                entry["sev"].setdefault(st, []).append(f.get("severity"))
    out = []
    for rid, entry in rules.items():
        if not any(entry[st] for st in _SHOWN):
            continue
        known = catalog.get(rid) or {}
        first = entry.pop("first")
        sevs = entry.pop("sev")
        severity = schema.worst_severity(sevs.get("fail") or sevs.get("warn") or []) or known.get("severity")
        entry.update(
            severity=severity or first.get("severity"),
            area=known.get("area") or first.get("area"),
            title=known.get("title") or first.get("title"),
            rationale=known.get("rationale") or "",
            fix=known.get("fix") if "fix" in known else first.get("fix"),
            references=known.get("references") if isinstance(known.get("references"), list) else [],
        )
        out.append(entry)
    return sorted(
        out,
        key=lambda r: (
            next(i for i, st in enumerate(_SHOWN) if r[st]),
            schema.severity_rank(r["severity"]),
            -len(r["fail"]),
            -len(r["warn"]),
            -len(r["error"]),
            r["rule"],
        ),
    )


def value_text(value: Any, nested: bool = False) -> str:
    """An observed or expected value in words: a string as it is, a number without a needless ``.0``, a mapping
    as ``key value, key value``, a list as ``a, b`` (in parentheses inside another value, where ascending integers
    are runs: ``gpus_full 0\u20137``; alone they stay a list, which a run would read as a range), nothing as
    ``none``."""
    if isinstance(value, str):
        return value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        if not value:
            return "none"
        text = ", ".join(f"{key} {value_text(item, nested=True)}" for key, item in value.items())
        return f"({text})" if nested else text
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        if nested and _ascending_ints(value):
            runs = key_ranges([str(item) for item in value])
            return f"({runs})" if "," in runs else runs
        items = [value_text(item, nested=True) for item in value]
        text = ", ".join(items) if not any(isinstance(i, dict) for i in value) else "; ".join(items)
        return f"({text})" if nested and len(items) > 1 else text
    return str(value)


def _ascending_ints(value: list | tuple) -> bool:
    """Integers (not bools, not negative) in ascending order, at least three: written as runs (``0\u20137``)."""
    ints = [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    return len(value) >= 3 and len(ints) == len(value) and all(a < b for a, b in zip(ints, ints[1:]))


def value_lines(value: Any) -> list[str]:
    """A mapping as one line per key (``gpus_full: 0\u20137``, ``max_gpu_memory_pct: 98``: its values as
    ``value_text`` says them inside a value, without the parentheses); anything else as one line."""
    if not isinstance(value, dict) or not value:
        return [value_text(value)]
    lines = []
    for key, item in value.items():
        text = value_text(item)
        if isinstance(item, (list, tuple)) and _ascending_ints(item):
            text = key_ranges([str(i) for i in item])
        lines.append(f"{key}: {text}")
    return lines


_ATOM = r"(?:'[^'\[\]\n]*'|\"[^\"\[\]\n]*\"|-?\d+(?:\.\d+)?)"
_PY_LIST = re.compile(r"\[(" + _ATOM + r"(?:, " + _ATOM + r")*)\]")


def _plain_list(match: re.Match) -> str:
    items = [item.strip("'\"") for item in re.findall(_ATOM, match.group(1))]
    if all(item.isdigit() for item in items):
        return key_ranges(items)
    return ", ".join(items)


def message_text(text: Any) -> str:
    """A rule's message with the Python lists some rules print (``GPU(s) [0, 1, 2, 3]``, ``['12.4.1']``) as words
    (``GPU(s) 0\u20133``, ``12.4.1``)."""
    return _PY_LIST.sub(_plain_list, "" if text is None else str(text))
