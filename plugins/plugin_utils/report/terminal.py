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
from .fleetview import host_order, message_text, rule_rollup, value_text

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
    "interrupted": "NOT AUDITED",  # the message says why: the run was interrupted before the host answered
}


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


class _Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: str | None) -> str:
        return f"{code}{text}{_RESET}" if self.color and code else text


def _cell_text(c: dict, compact: bool = False) -> tuple[str, str | None]:
    """A cell's text and colour; ``compact`` (a narrow terminal): ``CRIT 4``, ``w/med 2`` instead of ``CRIT (4)``,
    ``warn/med (2)``."""
    state, sev, counts = c["state"], c["severity"], c["counts"]
    if state == "fail":
        text = _SHORT.get(sev, "FAIL")
        if counts["fail"] > 1:
            text += f" {counts['fail']}" if compact else f" ({counts['fail']})"
        return text, _SEVERITY_COLOR.get(sev)
    if state == "warn":
        text = ("w/" if compact else "warn/") + (_SHORT.get(sev, "?").lower())
        if counts["warn"] > 1:
            text += f" {counts['warn']}" if compact else f" ({counts['warn']})"
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


def _values(f: dict, paint: _Painter, width: int = VALUE_WIDTH) -> list[str]:
    """observed \u2192 expected, in words (fleetview.value_text: no JSON, no Python lists). A value keyed by the
    devices the finding's items name (GPU indexes, NIC names) shows those devices first, marked, and counts the
    others; a long value wraps instead of being cut."""
    failing = failing_devices(f.get("items"))
    seen = focus(f.get("observed"), failing, fmt=value_text)
    wanted = focus(f.get("expected"), failing, fmt=value_text)
    observed = clean(value_text(f.get("observed")))
    expected = clean(value_text(f.get("expected")))
    if seen is None:
        if wanted is None and len(observed) + len(expected) + 3 <= width:
            return [f"{observed} \u2192 {expected}"]
        lines = _wrap(observed, width)
    else:
        lines = []
        for b in seen["bad"]:
            label = clean(b["label"])
            first, *more = _wrap(f"{label}: {clean(b['text'])}", width)
            lines.append(paint(label, _BAD) + first[len(label) :])
            lines.extend("  " + m for m in more)
        if seen["others"]:
            lines.extend(_wrap(f"({clean(others_text(seen))})", width))
    if wanted is not None:
        for b in wanted["bad"]:
            first, *more = _wrap(f"\u2192 {clean(b['label'])}: {clean(b['text'])}", width)
            lines.append(first)
            lines.extend("  " + m for m in more)
        return lines
    first, *more = _wrap(f"\u2192 {expected}", width)
    return lines + [first] + ["  " + m for m in more]


def _lines(text: str, width: int | None, indent: str = "", rest: str | None = None) -> list[str]:
    """``text`` (cleaned, no colour) after ``indent``, wrapped to ``width`` with ``rest`` (default: ``indent``
    and two spaces) before the next lines; one line when ``width`` is None (no terminal width to fit)."""
    if width is None:
        return [indent + text]
    rest = indent + "  " if rest is None else rest
    wrapper = textwrap.TextWrapper(
        width=max(width, len(rest) + 10),
        initial_indent=indent,
        subsequent_indent=rest,
        break_long_words=True,
        break_on_hyphens=False,
    )
    return wrapper.wrap(text) or [indent]


def _host_list(names: list[str], room: int) -> str:
    """``a, b, c, +5``: as many names as fit in ``room`` characters (at least one), the rest counted."""
    shown: list[str] = []
    for i, name in enumerate(names):
        left = len(names) - i - 1
        if shown and len(", ".join([*shown, name]) + (f", +{left}" if left else "")) > room:
            break
        shown.append(name)
    left = len(names) - len(shown)
    return ", ".join(shown) + (f", +{left}" if left else "")


_VERBS = (("fail", "fails on"), ("warn", "warns on"), ("error", "could not be checked on"))
RULE_INDENT = " " * 5  # under "CRIT "


def _rollup(report: dict, paint: _Painter, width: int | None) -> tuple[list[str], dict[str, str]]:
    """The rules that fail, warn or error, worst first, each once: the hosts it fails on (``GPU-PWR-002 fails on 8
    of 60 hosts: a, b, c, +5``), its title and area, fix and sources. Also each rule's fix text, so that a host's
    card says a fix only where it differs."""
    rules = rule_rollup(report)
    fixes: dict[str, str] = {}
    if not rules:
        return [], fixes
    room = width or 100
    out = ["", paint("RULES", "\x1b[1m") + " (worst first; a rule's text once here, each host's values below)"]
    for r in rules:
        rule = clean(r["rule"])
        sev = _SHORT.get(r["severity"], clean(r["severity"]).upper() or "?")
        head = f"{sev:<4} {rule:<12} "
        first = True
        for key, verb in _VERBS:
            if not r[key]:
                continue
            of = f"{r['checked']} host" + ("s" if r["checked"] != 1 else "")
            prefix = (head if first else RULE_INDENT) + f"{verb} {len(r[key])} of {of}: "
            line = prefix + _host_list([clean(n) for n in r[key]], room - len(prefix))
            if first:
                code = _SEVERITY_COLOR.get(r["severity"]) if key == "fail" else _STATE_COLOR.get(key)
                tag = f"{sev:<4}"
                line = paint(tag, code) + line[len(tag) :]
            out.append(line)
            first = False
        title = clean(r["title"]) + (f" ({clean(r['area'])})" if r.get("area") else "")
        out.extend(_lines(title, width, RULE_INDENT))
        fix = clean(schema.format_fix(r.get("fix")))
        fixes[str(r["rule"])] = fix
        if fix:
            out.extend(_lines(f"fix: {fix}", width, RULE_INDENT))
        for ref in r["references"]:
            if isinstance(ref, dict):
                out.extend(_lines(f"source: {clean(ref.get('title'))}", width, RULE_INDENT))
                url = clean(ref.get("url"))  # never broken (it would not open): moved left to fit, if it can
                out.append(" " * max(0, min(len(RULE_INDENT) + 2, (width or 200) - len(url))) + url)
    return out, fixes


def _matrix_widths(names: list[str], hosts: dict, width: int | None) -> tuple[int, int, int]:
    """(host column, status column, area cell) widths: the full layout, or, for a terminal ``width`` narrower
    than it, cells down to 9 columns, then the status to 7, then the host names cut (\u2026) to fit."""
    host_w = min(max([4] + [len(clean(n)) for n in names]), MAX_HOST_WIDTH)
    statuses = [clean(h.get("status") or "?") for h in hosts.values() if isinstance(h, dict)]
    status_w = min(max([len("STATUS")] + [len(st) for st in statuses]), len("unreachable"))  # longer: cut (\u2026)
    cell_w = CELL_WIDTH
    if width is None:
        return host_w, status_w, cell_w

    def total() -> int:
        return host_w + 2 + status_w + 2 + len(schema.AREAS) * cell_w

    if total() > width:
        cell_w = max(9, (width - host_w - status_w - 4) // len(schema.AREAS))
    if total() > width:
        status_w = min(status_w, 7)
    if total() > width:
        host_w = max(8, width - status_w - 4 - len(schema.AREAS) * cell_w)
    return host_w, status_w, cell_w


def _matrix(names: list[str], hosts: dict, paint: _Painter, width: int | None) -> list[str]:
    host_w, status_w, cell_w = _matrix_widths(names, hosts, width)
    compact = cell_w < CELL_WIDTH
    header = f"{'HOST':<{host_w}}  {'STATUS':<{status_w}}  " + "".join(
        f"{_fit(a.upper(), cell_w - 1):<{cell_w}}" for a in schema.AREAS
    )
    out = [header.rstrip(), "-" * len(header.rstrip())]
    for name in names:
        host = hosts[name] if isinstance(hosts[name], dict) else {}
        status = str(host.get("status") or "?")
        row = f"{_fit(clean(name), host_w):<{host_w}}  "
        row += paint(f"{_fit(clean(status), status_w):<{status_w}}", _STATE_COLOR.get(status))
        row += "  "
        cells = []
        for area in schema.AREAS:
            text, code = _cell_text(schema.cell(host, area), compact)
            text = _fit(text, cell_w - 1)
            cells.append(paint(text, code) + " " * (cell_w - len(text)))
        out.append((row + "".join(cells)).rstrip())
    if not names:
        out.append("(no hosts)")
    return out


def _head(report: dict, paint: _Painter, width: int | None) -> list[str]:
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    head = ["gpufleet audit"]
    for key, label in (("id", "run"), ("finished_at", "finished"), ("inventory", "inventory"), ("limit", "limit")):
        if run.get(key):
            head.append(f"{label} {clean(run[key])}")
    out = ["  ".join(head)] if width is None else _pack(head, width)
    for w in run.get("workers") if isinstance(run.get("workers"), list) else []:
        if isinstance(w, dict):
            line = f"worker {clean(w.get('region'))} via {clean(w.get('url'))}: {clean(w.get('hosts'))} hosts"
            line += f", {clean(w.get('status'))}"
            out.extend(_lines(line + (f" ({clean(w['error'])})" if w.get("error") else ""), width))
    if run.get("complete") is False:
        banner = "INCOMPLETE RUN: the audit was interrupted or partial; results below are not the whole fleet."
        out.extend(paint(line, "\x1b[1;33m") for line in _lines(banner, width))
        if run.get("incomplete_reason"):
            reason = f"({clean(run['incomplete_reason'])})"
            out.extend(paint(line, "\x1b[1;33m") for line in _lines(reason, width, "  "))
    return out


def _pack(parts: list[str], width: int) -> list[str]:
    """``parts`` two spaces apart, as many on a line as fit ``width``; a part too long for a line wraps."""
    out: list[str] = []
    line = ""
    for part in parts:
        if line and len(line) + 2 + len(part) <= width:
            line += "  " + part
            continue
        if line:
            out.append(line)
        *full, line = _lines(part, width, "" if not out and not line else "  ")
        out.extend(full)
    return out + [line]


def _totals(hosts: dict, paint: _Painter, width: int | None) -> list[str]:
    s = schema.summarize(hosts)
    h, fs = s["hosts"], s["findings"]
    line = f"hosts: {h['total']} ({h['ok']} ok, {h['failed']} failed, {h['unreachable']} unreachable"
    for key, label in (("timeout", "timed out"), ("interrupted", "not audited (interrupted)")):
        if h.get(key):
            line += f", {h[key]} {label}"
    out = _lines(line + ")", width)
    sev_text = ", ".join(
        paint(f"{n} {sev}", _SEVERITY_COLOR[sev] if n else None) for sev, n in fs["by_severity"].items()
    )
    out.append(f"findings: {sum(fs['by_severity'].values())} ({sev_text})")
    out.extend(_lines("checks: " + ", ".join(f"{n} {st}" for st, n in fs["by_status"].items()), width))
    return out


def render_summary(report: dict, color: bool = False, width: int | None = None) -> str:
    """The report's totals alone (hosts, findings, checks), for `gpufleet audit --quiet`; ends with a newline."""
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    return "\n".join(_totals(hosts, _Painter(color), width)) + "\n"


def render_terminal(report: dict, color: bool = False, width: int | None = None) -> str:
    """The report as text for a terminal (ANSI colours if ``color``); ends with a newline.

    The header; the matrix, hosts worst first (fleetview.host_order); the rules that fail, each once with the
    hosts it fails on, its text, fix and sources; a card per host with something to say, in the matrix's order;
    the totals. With ``width`` (a terminal's columns) every part fits it: the matrix narrows, texts wrap (a URL
    alone on its line is never broken); without, the full layout."""
    paint = _Painter(color)
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    names = host_order(hosts)
    value_w = VALUE_WIDTH if width is None else max(20, min(VALUE_WIDTH, width - 13))
    out: list[str] = _head(report, paint, width)
    out.append("")
    out.extend(_matrix(names, hosts, paint, width))
    rollup, fixes = _rollup(report, paint, width)
    out.extend(rollup)

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
        info = _gpu_line(host)
        heading = _lines(clean(name) + (f"  ({clean(info)})" if info else ""), width)
        out.append(paint(clean(name), "\x1b[1m") + heading[0][len(clean(name)) :])
        out.extend(heading[1:])
        if status != "ok":
            label = _DOWN_LABELS.get(str(status), "AUDIT FAILED")
            said = _lines(f"{label}: " + clean(host.get("message") or "no message"), width, "  ", "    ")
            out.append("  " + paint(label, _STATE_COLOR.get(str(status))) + said[0][2 + len(label) :])
            out.extend(said[1:])
        elif host.get("message"):  # an audited host's note: results the controller set aside
            said = _lines("NOTE: " + clean(host["message"]), width, "  ", "    ")
            out.append("  " + paint("NOTE", _STATE_COLOR.get("interrupted")) + said[0][6:])
            out.extend(said[1:])
        for f in shown:
            sev = str(f.get("severity") or "")
            st = str(f.get("status") or "")
            tag = f"{_SHORT.get(sev, clean(sev).upper()):<4} {st:<5}"
            code = _SEVERITY_COLOR.get(sev) if st == "fail" else _STATE_COLOR.get(st, _SEVERITY_COLOR.get(sev))
            indent = " " * 13
            said = clean(message_text(f.get("message") or f.get("title")))
            lines = _lines(f"{tag} {clean(f.get('rule')):<12} {said}", width, "  ", indent)
            out.append("  " + paint(tag, code) + lines[0][2 + len(tag) :])
            out.extend(lines[1:])
            out.extend(indent + line for line in _values(f, paint, value_w))
            fix = clean(schema.format_fix(f.get("fix")))
            if fix and fix != fixes.get(str(f.get("rule"))):
                out.extend(_lines(f"fix: {fix}", width, indent))

    out.append("")
    out.extend(_totals(hosts, paint, width))
    return "\n".join(out) + "\n"
