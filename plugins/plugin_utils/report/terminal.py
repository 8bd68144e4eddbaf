# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The report for a terminal: a fixed-width table hosts x areas, the findings per host, then totals.

Values from hosts are printed through ``clean`` (module_utils/text.py, the one cleaner of host strings: control
characters, line separators and bidi controls escaped, ``\\x1b``, ``\\n``, ``\\u202e``), so a hostile host name or
observed value cannot move the cursor, recolour, reorder or forge lines; colour codes come only from here.
"""

from __future__ import annotations

import textwrap
from collections import Counter

from ...module_utils.text import clean

from . import schema
from .devices import failing_devices, focus, others_text

CELL_WIDTH = 14  # "warn/crit (12)" and a space
MAX_HOST_WIDTH = 40
VALUE_WIDTH = 100  # a longer observed/expected value wraps onto more lines (it is not cut) ...
MAX_VALUE_LINES = 6  # ... up to this many; the rest is counted (report.json has it all)
_BAD = "\x1b[1;97;41m"  # the failing devices in a value

_SHORT = {"critical": "CRIT", "high": "HIGH", "medium": "MED", "low": "LOW", "info": "INFO"}
_RESET = "\x1b[0m"
_SEVERITY_COLOR = {
    "critical": "\x1b[1;97;41m",
    "high": "\x1b[1;31m",
    "medium": "\x1b[33m",
    "low": "\x1b[36m",
    "info": "\x1b[34m",
}
_STATE_COLOR = {
    "skip": "\x1b[2m",
    "none": "\x1b[2m",
    "error": "\x1b[35m",
    "unreachable": "\x1b[1;35m",
    "failed": "\x1b[1;35m",
    "timeout": "\x1b[1;35m",
    "interrupted": "\x1b[1;33m",
    **dict.fromkeys(("ok", "pass"), "\x1b[32m"),
}


_CELL_TEXT = dict(zip(("pass", "skip", "none", "error"), ("ok", "skip", "-", "ERROR")))
_DOWN_LABELS = {
    "unreachable": "UNREACHABLE",
    "failed": "AUDIT FAILED",
    "timeout": "TIMED OUT",
    "interrupted": "NOT AUDITED (run interrupted)",
}


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


class _Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: str | None) -> str:
        return f"{code}{text}{_RESET}" if self.color and code else text


def _cell_text(c: dict) -> tuple[str, str | None]:
    state, sev, counts = c["state"], c["severity"], c["counts"]
    if state == "fail":
        text = _SHORT.get(sev, "FAIL")
        if counts["fail"] > 1:
            text += f" ({counts['fail']})"
        return text, _SEVERITY_COLOR.get(sev)
    if state == "warn":
        text = "warn/" + (_SHORT.get(sev, "?").lower())
        if counts["warn"] > 1:
            text += f" ({counts['warn']})"
        return text, _SEVERITY_COLOR.get(sev, "").replace("1;", "") or None
    if state in schema.DOWN_STATUSES:
        return "--", "\x1b[2m"
    return _CELL_TEXT[state], _STATE_COLOR.get(state)


def _no_driver(host: dict) -> bool:
    facts = host.get("facts") if isinstance(host.get("facts"), dict) else {}
    gpu = facts.get("gpu") if isinstance(facts.get("gpu"), dict) else {}
    return isinstance(gpu.get("nvml"), dict) and gpu["nvml"].get("available") is False


def _gpu_line(host: dict) -> str:
    facts = host.get("facts") if isinstance(host.get("facts"), dict) else {}
    gpu = facts.get("gpu") if isinstance(facts.get("gpu"), dict) else {}
    parts = []
    if host.get("site"):
        parts.append(f"site {host['site']}")
    gpus = gpu.get("gpus") if isinstance(gpu.get("gpus"), list) else []
    names = Counter(str(g.get("name") or "unknown GPU") for g in gpus if isinstance(g, dict))
    nvml = gpu.get("nvml") if isinstance(gpu.get("nvml"), dict) else {}
    if names:
        parts.append(", ".join(f"{n} x {name}" for name, n in names.most_common()))
    elif nvml.get("available") is False:
        parts.append(f"no NVIDIA driver found ({clean(nvml.get('error') or 'NVML unavailable')})")
    elif isinstance(gpu.get("gpu_count"), int) and not isinstance(gpu.get("gpu_count"), bool):
        parts.append(f"{gpu['gpu_count']} GPUs")
    driver = gpu.get("driver") if isinstance(gpu.get("driver"), dict) else {}
    if driver.get("version"):
        parts.append(f"driver {driver['version']}")
    if host.get("via"):  # issue 18: runs with execution nodes say how each host was reached
        parts.append(f"via {clean(host['via'])}")
    return ", ".join(parts)


def _wrap(text: str, width: int = VALUE_WIDTH, max_lines: int = MAX_VALUE_LINES) -> list[str]:
    """``text`` (already cleaned) in lines of ``width`` (broken after ", " where it can); past ``max_lines`` the
    rest is counted, not printed."""
    if len(text) <= width:
        return [text]
    lines = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    if len(lines) > max_lines:
        pos = 0
        for line in lines[: max_lines - 1]:
            pos = text.index(line, pos) + len(line)
        rest = len(text) - pos
        lines = lines[: max_lines - 1] + [f"\u2026 {rest} more characters (report.json has the whole value)"]
    return lines


def _values(f: dict, paint: _Painter) -> list[str]:
    """observed \u2192 expected. A value keyed by the devices the finding's items name (GPU indexes, NIC names)
    shows those devices first, marked, and counts the others; a long value wraps instead of being cut."""
    failing = failing_devices(f.get("items"))
    seen = focus(f.get("observed"), failing)
    wanted = focus(f.get("expected"), failing)
    observed = clean(schema.format_value(f.get("observed")))
    expected = clean(schema.format_value(f.get("expected")))
    if seen is None:
        if wanted is None and len(observed) + len(expected) + 3 <= VALUE_WIDTH:
            return [f"{observed} \u2192 {expected}"]
        lines = _wrap(observed)
    else:
        lines = []
        for b in seen["bad"]:
            label = clean(b["label"])
            first, *more = _wrap(f"{label}: {clean(b['text'])}")
            lines.append(paint(label, _BAD) + first[len(label) :])
            lines.extend("  " + m for m in more)
        if seen["others"]:
            lines.append(f"({clean(others_text(seen))})")
    if wanted is not None:
        for b in wanted["bad"]:
            first, *more = _wrap(f"\u2192 {clean(b['label'])}: {clean(b['text'])}")
            lines.append(first)
            lines.extend("  " + m for m in more)
        return lines
    first, *more = _wrap(f"\u2192 {expected}")
    return lines + [first] + ["  " + m for m in more]


def render_terminal(report: dict, color: bool = False) -> str:
    """The report as text for a terminal (ANSI colours if ``color``); ends with a newline."""
    paint = _Painter(color)
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    names = sorted(hosts)
    out: list[str] = []

    head = ["gpufleet audit"]
    for key, label in (("id", "run"), ("finished_at", "finished"), ("inventory", "inventory"), ("limit", "limit")):
        if run.get(key):
            head.append(f"{label} {clean(run[key])}")
    out.append("  ".join(head))
    for w in run.get("workers") if isinstance(run.get("workers"), list) else []:
        if isinstance(w, dict):
            line = f"worker {clean(w.get('region'))} via {clean(w.get('url'))}: {clean(w.get('hosts'))} hosts"
            line += f", {clean(w.get('status'))}"
            out.append(line + (f" ({clean(w['error'])})" if w.get("error") else ""))
    if run.get("complete") is False:
        out.append(
            paint(
                "INCOMPLETE RUN: the audit was interrupted or partial; results below are not the whole fleet.",
                "\x1b[1;33m",
            )
        )
        if run.get("incomplete_reason"):
            out.append(paint(f"  ({clean(run['incomplete_reason'])})", "\x1b[1;33m"))
    out.append("")

    host_w = min(max([4] + [len(clean(n)) for n in names]), MAX_HOST_WIDTH)
    status_w = len("unreachable")
    header = f"{'HOST':<{host_w}}  {'STATUS':<{status_w}}  " + "".join(
        f"{a.upper():<{CELL_WIDTH}}" for a in schema.AREAS
    )
    out.append(header.rstrip())
    out.append("-" * len(header.rstrip()))
    for name in names:
        host = hosts[name] if isinstance(hosts[name], dict) else {}
        status = str(host.get("status") or "?")
        row = f"{_fit(clean(name), host_w):<{host_w}}  "
        row += paint(f"{_fit(clean(status), status_w):<{status_w}}", _STATE_COLOR.get(status))
        row += "  "
        cells = []
        for area in schema.AREAS:
            text, code = _cell_text(schema.cell(host, area))
            text = _fit(text, CELL_WIDTH - 1)
            cells.append(paint(text, code) + " " * (CELL_WIDTH - len(text)))
        out.append((row + "".join(cells)).rstrip())
    if not names:
        out.append("(no hosts)")

    for name in names:
        host = hosts[name] if isinstance(hosts[name], dict) else {}
        status = host.get("status")
        shown = [
            f
            for f in sorted(schema.host_findings(host), key=schema.finding_sort_key)
            if f.get("status") in ("fail", "warn", "error")
        ]
        if status == "ok" and not shown and not _no_driver(host) and not host.get("message"):
            continue  # nothing to say (a host without a usable NVIDIA driver is always listed, with the reason)
        out.append("")
        line = paint(clean(name), "\x1b[1m")
        info = _gpu_line(host)
        if info:
            line += f"  ({clean(info)})"
        out.append(line)
        if status != "ok":
            label = _DOWN_LABELS.get(str(status), "AUDIT FAILED")
            out.append(
                "  " + paint(label, _STATE_COLOR.get(str(status))) + ": " + clean(host.get("message") or "no message")
            )
        elif host.get("message"):  # an audited host's note: results the controller set aside
            out.append("  " + paint("NOTE", _STATE_COLOR.get("interrupted")) + ": " + clean(host["message"]))
        for f in shown:
            sev = str(f.get("severity") or "")
            st = str(f.get("status") or "")
            tag = f"{_SHORT.get(sev, clean(sev).upper()):<4} {st:<5}"
            code = _SEVERITY_COLOR.get(sev) if st == "fail" else _STATE_COLOR.get(st, _SEVERITY_COLOR.get(sev))
            out.append(
                f"  {paint(tag, code)} {clean(f.get('rule')):<12} {clean(f.get('area')):<9} {clean(f.get('title'))}"
            )
            indent = " " * 13
            if f.get("message"):
                out.append(indent + clean(f["message"]))
            out.extend(indent + line for line in _values(f, paint))
            fix = schema.format_fix(f.get("fix"))
            if fix:
                out.append(f"{indent}fix: {clean(fix)}")

    s = schema.summarize(hosts)
    h, fs = s["hosts"], s["findings"]
    out.append("")
    line = f"hosts: {h['total']} ({h['ok']} ok, {h['failed']} failed, {h['unreachable']} unreachable"
    for key, label in (("timeout", "timed out"), ("interrupted", "not audited (interrupted)")):
        if h.get(key):
            line += f", {h[key]} {label}"
    out.append(line + ")")
    sev_text = ", ".join(
        paint(f"{n} {sev}", _SEVERITY_COLOR[sev] if n else None) for sev, n in fs["by_severity"].items()
    )
    out.append(f"findings: {sum(fs['by_severity'].values())} ({sev_text})")
    out.append("checks: " + ", ".join(f"{n} {st}" for st, n in fs["by_status"].items()))
    return "\n".join(out) + "\n"
