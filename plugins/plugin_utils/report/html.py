# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The HTML report: one self-contained page (inline CSS and JS, nothing fetched), rendered with jinja2.

Everything from the report is escaped by jinja2's autoescape; the page's own script is pinned by a
Content-Security-Policy hash, so even a value that slipped through could not run a script. The view model is
built here, in Python, so the template only lays it out.

Large fleets (more than LAZY_FROM_HOSTS hosts, issue 18): the summary, the fleet matrix and a short head per host
are HTML as always, but each host's checks travel as JSON in one ``<script type="application/json">`` data block
(never run; ``<``, ``>`` and ``&`` written as JSON escapes so the data cannot close it) and the page's own script
builds a host's table with DOM calls (text nodes, no markup from the data) when the host is opened. Rationale and
sources are in the page once per rule (the Rules section), never per host; passing checks carry their message, not
their values (report.json has those).
A 1,000-host report is ~6 MB instead of ~60 MB, and the browser lays out the matrix without the hosts' tables.

A fleet read at 60 hosts (issue 29): the matrix and the host cards in one order (site by site, worst first within a
site: fleetview.host_rank); the Rules section rolls up each rule that fails, warns or errors (fleetview.rule_rollup:
"fails on 8 of 60 hosts", the hosts linked), with its rationale and sources once; a host card's finding says its own
message, values and fix and links to its rule there. Values are words (fleetview.value_text), not JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ...module_utils.text import BIDI
from . import schema
from .devices import failing_devices, focus, others_text
from .fleetview import host_rank, message_text, rule_rollup, value_lines, value_text
from .rdma import html_view as rdma_view
from .topology import html_view as topology_view

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "report.html.j2"
AREA_LABELS = {"cpu": "CPU"}
# C0 controls but tab/newline/CR, DEL, C1, lone surrogates, and the bidi controls (embeddings, overrides, isolates,
# LRM/RLM/ALM) that would reorder what a reader sees: a host name or a GPU name never needs one (issue 26).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + BIDI + "\ud800-\udfff]")
MAX_ITEM_ROWS = 256  # per finding; the rest is counted, the JSON report has them all
INLINE_WIDTH = 40  # observed/expected up to this many characters are shown inline
ONE_LINE_WIDTH = 100  # longer ones in a block, on one (wrapped) line up to this, else a line per key
ROLLUP_HOSTS = 12  # a rule's hosts named in the Rules section; the rest folded ("+K more")
# Above this many hosts the hosts' checks are rendered on demand from a JSON data block (see the module docstring):
# at 200 hosts a fully rendered page is ~12 MB, past the 10 MB issue 18 allows at 1,000.
LAZY_FROM_HOSTS = 150

# Labels of the cells that show no severity (rule and host statuses label themselves).
_CELL_LABELS = {s: s for s in ("unreachable", "failed", "timeout", "error", "pass", "skip")} | {
    "interrupted": "not audited",
    "none": "\u2013",
}


NO_SITE = "no site recorded"

# Every host status, as its badge and the legend name it.
HOST_STATUS_LABELS = {
    "ok": "audited",
    "failed": "audit failed",
    "unreachable": "unreachable",
    "timeout": "timed out",
    "interrupted": "not audited (run interrupted)",
}

# What the page says before a host's message when the host was not audited.
_DOWN_LABELS = {
    "unreachable": "Unreachable",
    "failed": "Audit failed",
    "timeout": "Timed out",
    "interrupted": "Not audited (run interrupted)",
}


def environment() -> jinja2.Environment:
    """The jinja2 environment of the report templates: autoescape on, undefined names are errors."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_printable,
    )
    env.filters["csp_hash"] = _csp_hash
    return env


def _printable(value: Any) -> Any:
    """Data strings lose the characters HTML may not carry (C0 controls but tab/newline/CR, DEL, C1) and the bidi
    controls (each becomes U+FFFD, so the reader sees that something was there)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return _CONTROL.sub("\ufffd", value)
    return value


def _csp_hash(text: Any) -> Markup:
    """The CSP source expression that allows exactly the inline script ``text``."""
    digest = hashlib.sha256(str(text).encode("utf-8")).digest()
    return Markup("'sha256-{}'").format(base64.b64encode(digest).decode("ascii"))  # the digest is escaped too


def render_html(report: dict, lazy: bool | None = None) -> str:
    """The report as one HTML page (str). ``lazy``: hosts' checks rendered on demand from a JSON data block;
    by default when the report has more than LAZY_FROM_HOSTS hosts."""
    return environment().get_template(TEMPLATE).render(page=build_view(report, lazy=lazy))


# ------------------------------------------------------------------------------------------------ view model


def build_view(report: dict, lazy: bool | None = None) -> dict[str, Any]:
    """What the template shows, with every value already a string, number, bool, list or dict."""
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    tool = report.get("tool") if isinstance(report.get("tool"), dict) else {}
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    catalog = schema.catalog_index(report)
    summary = schema.summarize(hosts)

    lazy = len(hosts) > LAZY_FROM_HOSTS if lazy is None else bool(lazy)
    anchors = _host_anchors(hosts)
    rollup = _rollup_view(report, anchors)
    rule_anchors = {r["rule"]: r["anchor"] for r in rollup}
    # anchors by name (host-1 is the first by name), the order worst first within a site (_sites_view)
    host_views = [
        _host_view(anchors[name], str(name), host, catalog, lazy, rollup) for name, host in sorted(hosts.items())
    ]
    sites = _sites_view(host_views)
    host_views = [h for site in sites for h in site["hosts"]]  # the host cards in the matrix's order
    inventory = run.get("inventory") or ""
    title = "gpufleet audit"
    if inventory:
        title += f" \u2013 {inventory}"
    if run.get("finished_at"):
        title += f" \u2013 {run['finished_at']}"
    catalog_views = [
        _catalog_view(e) for e in sorted(catalog.values(), key=lambda e: e["id"]) if e["id"] not in rule_anchors
    ]
    return {
        "title": title,
        "tool": f"{tool.get('name') or 'gpufleet'} {tool.get('version') or ''}".strip(),
        "schema": str(report.get("schema") or ""),
        "run": {
            "id": _text(run.get("id")),
            "started_at": _text(run.get("started_at")),
            "finished_at": _text(run.get("finished_at")),
            "inventory": _text(inventory),
            "limit": _text(run.get("limit")),
            "controller": _text(run.get("controller")),
            "policy_sources": [_text(p) for p in run.get("policy_sources") or [] if p is not None],
            "incomplete_reason": _text(run.get("incomplete_reason")),
            "workers": _workers_view(run.get("workers")),
        },
        "complete": run.get("complete") is not False,
        "summary": summary,
        "areas": list(schema.AREAS),
        "area_labels": {a: AREA_LABELS.get(a, a.capitalize()) for a in schema.AREAS},
        "severities": list(schema.SEVERITIES),
        "statuses": list(schema.STATUSES),
        "hosts": host_views,
        "sites": sites,
        "grouped": any(h["site"] for h in host_views),
        "host_status_labels": HOST_STATUS_LABELS,
        "legend_cells": _LEGEND_CELLS,
        "rollup": rollup,
        "catalog": catalog_views,
        "catalog_total": len(catalog),
        "lazy": lazy,
        "host_data": _host_data(host_views, rule_anchors) if lazy else Markup(""),
    }


def _host_anchors(hosts: dict) -> dict[str, str]:
    """Each host's card anchor, ``host-N`` by name (host-1 the first by name): the same whatever the order."""
    return {name: f"host-{index}" for index, name in enumerate(sorted(hosts), 1)}


_ROLLUP_VERBS = (("fail", "fails on"), ("warn", "warns on"), ("error", "could not be checked on"))


def _rollup_view(report: dict, anchors: dict[str, str]) -> list[dict[str, Any]]:
    """The Rules section: each rule that fails, warns or errors somewhere (fleetview.rule_rollup, worst first),
    once, with its text and sources, and per result the hosts (linked to their cards; past ROLLUP_HOSTS folded)."""
    out = []
    for index, r in enumerate(rule_rollup(report), 1):
        results = []
        for key, verb in _ROLLUP_VERBS:
            if r[key]:
                links = [{"name": str(n), "anchor": anchors.get(n, "")} for n in r[key]]
                results.append(
                    {
                        "status": key,
                        "text": f"{verb} {len(r[key])} of {r['checked']} host" + ("" if r["checked"] == 1 else "s"),
                        "hosts": links[:ROLLUP_HOSTS],
                        "more": links[ROLLUP_HOSTS:],
                    }
                )
        out.append(
            {
                "anchor": f"rule-{index}",
                "rule": _text(r["rule"]),
                "severity": _text(r["severity"]),
                "area": _text(r["area"]),
                "title": _text(r["title"]),
                "rationale": _text(r["rationale"]),
                "references": _references_view(r["references"]),
                "fix": schema.format_fix(r["fix"]),
                "manual": _text(r["fix"].get("manual")) if isinstance(r["fix"], dict) else "",
                "results": results,
            }
        )
    return out


# ------------------------------------------------------------------------------------------ the lazy host data

# A passing or skipped check in the data block: [rule, status, severity, area, message].
_OTHER_KEYS = ("rule", "status", "severity", "area", "message")


def _sanitized(value: Any) -> Any:
    """``value`` with every string through _printable (what the template's finalize does for its values)."""
    if isinstance(value, str):
        return _printable(value)
    if isinstance(value, dict):
        return {str(_printable(str(k))): _sanitized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitized(v) for v in value]
    return value


def _lean_value(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if v not in ("", [], False)}


def _lean_finding(f: dict[str, Any]) -> dict[str, Any]:
    """A failing check as the page's script needs it: its rule's anchor is in ``rules``, its rationale and sources
    are in the Rules section."""
    out = {k: f[k] for k in ("rule", "status", "severity", "area", "title", "message") if f[k]}
    out["observed"] = _lean_value(f["observed"])
    out["expected"] = _lean_value(f["expected"])
    fix = {k: v for k, v in f["fix"].items() if v}
    if fix:
        out["fix"] = fix
    if f["items"]["rows"]:
        out["items"] = f["items"]
    return out


def script_json(data: Any) -> Markup:
    """JSON text that is safe as the content of a ``<script type="application/json">`` element: no ``<``, ``>``
    or ``&`` (written as \\u003c, \\u003e, \\u0026, which JSON.parse reads back), so no ``</script>`` or
    ``<!--`` in the data can end or change the element (HTML's script data state)."""
    text = json.dumps(_sanitized(data), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    for ch, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return Markup(text)  # nosec B704  # JSON with &, <, > escaped as above: it cannot close or change the element


def _host_data(hosts: list[dict[str, Any]], rule_anchors: dict[str, str]) -> Markup:
    """The data block of a lazy page: per host anchor its failing checks (``f``) and the others (``o``); per rule
    the anchor of its entry in the Rules section (``rules``). A rule's text and sources are not in it: the page
    has them once, in the Rules section."""
    data = {
        "hosts": {
            h["anchor"]: {
                "f": [_lean_finding(f) for f in h["findings"]],
                "o": [[o[k] for k in _OTHER_KEYS] for o in h["others"]],
            }
            for h in hosts
            if h["findings"] or h["others"]
        },
        "rules": rule_anchors,
    }
    return script_json(data)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


# The legend: one badge per matrix cell state, drawn with the cell's own classes (label, classes, meaning).
_LEGEND_CELLS = [
    *[(sev, f"cell-fail sev-{sev}", f"failing, worst severity {sev}") for sev in schema.SEVERITIES],
    ("warn \u00b7 medium", "cell-warn sev-medium", "warnings only (dashed), worst severity medium"),
    ("error", "cell-error", "a check could not run"),
    ("pass", "cell-pass", "all checks passed"),
    ("skip", "cell-skip", "checks skipped (not applicable)"),
    ("\u2013", "cell-none", "no check of this area ran"),
    ("unreachable", "cell-unreachable", "host unreachable"),
    ("failed", "cell-failed", "the audit failed on the host"),
    ("timeout", "cell-timeout", "host timed out (no answer within gpufleet_host_timeout)"),
    ("not audited", "cell-interrupted", "not audited (run interrupted)"),
]


def _site_key(host: dict) -> str:
    return host["site"] or ""


def _severity_text(by_sev: dict[str, int], audited: int) -> str:
    """``3 critical, 6 high``; never "no findings" for a site where no host was audited (nothing is known)."""
    if not audited:
        return "no host audited: findings unknown"
    return ", ".join(f"{n} {sev}" for sev, n in by_sev.items() if n) or "no findings"


def _sites_view(hosts: list[dict]) -> list[dict[str, Any]]:
    """The hosts grouped by site (sites by name, hosts without a site last; in a site worst first, as
    fleetview.host_rank ranks them), each with its counts. The matrix and the host cards follow this order."""
    groups: dict[str, list[dict]] = {}
    for h in hosts:
        groups.setdefault(_site_key(h), []).append(h)
    out = []
    for index, key in enumerate(sorted(groups, key=lambda k: (k == "", k)), 1):
        members = sorted(groups[key], key=lambda h: h["rank"])  # worst first (fleetview.host_rank)
        statuses = Counter(h["status"] for h in members)
        by_sev = {sev: sum(h["by_severity"][sev] for h in members) for sev in schema.SEVERITIES}
        audited = statuses.get("ok", 0)
        parts = [f"{audited} audited"] + [
            f"{statuses[st]} {HOST_STATUS_LABELS[st]}" for st in schema.DOWN_STATUSES if statuses.get(st)
        ]
        total = sum(by_sev.values())
        out.append(
            {
                "name": key,
                "label": key or NO_SITE,
                "anchor": f"site-{index}",
                "hosts": members,
                "host_count": len(members),
                "statuses": {st: statuses.get(st, 0) for st in schema.HOST_STATUSES},
                "down": len(members) - audited,
                "status_text": ", ".join(parts),
                "by_severity": by_sev,
                "findings": total,
                "severity_text": _severity_text(by_sev, audited),
            }
        )
    widest = max([g["findings"] for g in out] + [1])
    for g in out:
        g["bar_pct"] = round(100.0 * g["findings"] / widest, 1)
    return out


def _host_view(
    anchor: str, name: str, host: Any, catalog: dict[str, dict], lazy: bool = False, rollup: Any = None
) -> dict[str, Any]:
    rank = host_rank(name, host)
    host = host if isinstance(host, dict) else {}
    status = host.get("status") if host.get("status") in schema.HOST_STATUSES else "failed"
    findings = sorted(schema.host_findings(host), key=schema.finding_sort_key)
    shown = [_finding_view(f, catalog) for f in findings if f.get("status") in ("fail", "warn", "error")]
    rules = {r["rule"]: r for r in rollup or []}
    for f in shown:  # linked to its rule's entry, which says the manual fix once (the card only where it differs)
        entry = rules.get(f["rule"])
        if entry:
            f["rule_anchor"] = entry["anchor"]
            if f["fix"]["manual"] and f["fix"]["manual"] == entry["manual"]:
                f["fix"]["manual"] = ""
                f["fix"]["in_rule"] = "1"
    # A lazy page carries of a passing or skipped check only _OTHER_KEYS: no need to lay out its values.
    other_view = _other_view if lazy else _finding_view
    others = [other_view(f, catalog) for f in findings if f.get("status") not in ("fail", "warn", "error")]
    cells = [_cell_view(host, area) for area in schema.AREAS]
    worst = schema.worst_severity(f.get("severity") for f in findings if schema.is_finding(f))
    facts = host.get("facts") if isinstance(host.get("facts"), dict) else {}
    gpu = facts.get("gpu") if isinstance(facts.get("gpu"), dict) else {}
    counts = Counter(f.get("status") for f in findings)
    audited = status == "ok"
    by_severity = {sev: 0 for sev in schema.SEVERITIES}
    for f in findings:
        if audited and schema.is_finding(f) and f.get("severity") in by_severity:
            by_severity[f["severity"]] += 1
    site = host.get("site")
    return {
        "name": name,
        "anchor": anchor,
        "rank": rank,
        "status": status,
        "message": _text(host.get("message")),
        "down_label": _DOWN_LABELS.get(status, "Audit failed"),
        "site": site if isinstance(site, str) and site else "",
        "via": _text(host.get("via")),  # issue 18: "direct" or "worker:REGION" in runs with execution nodes
        "status_label": HOST_STATUS_LABELS.get(status, status),
        "by_severity": by_severity,
        "gpus": _gpu_summary(gpu),
        "driver": _text((gpu.get("driver") or {}).get("version") if isinstance(gpu.get("driver"), dict) else None),
        "links": _links_view(host.get("links")),
        "topology": topology_view(facts.get("topology")),  # issue 17: when the audit gathered it
        "rdma": rdma_view(facts.get("rdma")),  # issue 28: the InfiniBand / RoCE ports
        "cells": cells,
        "worst": worst or "",
        "findings": shown,
        "others": others,
        "counts": {s: counts.get(s, 0) for s in schema.STATUSES},
        "finding_count": counts.get("fail", 0) + counts.get("warn", 0),
    }


def _workers_view(workers: Any) -> list[str]:
    """run.workers (gpufleet audit --worker): one line per region's execution node."""
    out = []
    for w in workers if isinstance(workers, list) else []:
        if not isinstance(w, dict):
            continue
        line = f"{_text(w.get('region'))} via {_text(w.get('url'))}: {_text(w.get('hosts'))} hosts"
        line += f", {_text(w.get('status'))}"
        if w.get("wall_s") is not None:
            line += f", {_text(w.get('wall_s'))} s"
        if w.get("error"):
            line += f" ({_text(w.get('error'))})"
        out.append(line)
    return out


def _gpu_summary(gpu: dict) -> str:
    gpus = gpu.get("gpus") if isinstance(gpu.get("gpus"), list) else []
    names = Counter(str(g.get("name") or "unknown GPU") for g in gpus if isinstance(g, dict))
    if names:
        return ", ".join(f"{n} \u00d7 {name}" for name, n in names.most_common())
    nvml = gpu.get("nvml") if isinstance(gpu.get("nvml"), dict) else {}
    if nvml.get("available") is False:
        return f"no NVIDIA driver found ({nvml.get('error') or 'NVML unavailable'})"
    count = gpu.get("gpu_count")
    if isinstance(count, int) and not isinstance(count, bool):
        return f"{count} GPU" + ("" if count == 1 else "s")
    return ""


def _links_view(links: Any) -> str:
    if not isinstance(links, dict):
        return ""
    peers = []
    for p in links.get("peers") or []:
        if not isinstance(p, dict):
            continue
        text = str(p.get("site") or "?")
        details = []
        if p.get("rtt_ms") is not None:
            details.append(f"{p['rtt_ms']:g} ms" if isinstance(p["rtt_ms"], (int, float)) else str(p["rtt_ms"]))
        if p.get("bandwidth_gbps") is not None:
            bw = p["bandwidth_gbps"]
            details.append(f"{bw:g} Gbit/s" if isinstance(bw, (int, float)) else str(bw))
        if details:
            text += f" ({', '.join(details)})"
        peers.append(text)
    if not peers:
        return ""
    return f"{', '.join(peers)} \u2013 {links.get('source') or 'unknown'}"


def _cell_view(host: dict, area: str) -> dict[str, Any]:
    c = schema.cell(host, area)
    state, severity, counts = c["state"], c["severity"], c["counts"]
    if state in ("fail", "warn"):
        n = counts[state]
        label = (severity or "unknown") if state == "fail" else f"warn \u00b7 {severity or 'unknown'}"
        if n > 1:
            label += f" ({n})"
    else:
        label = _CELL_LABELS[state]
    parts = [f"{counts[s]} {s}" for s in schema.STATUSES if counts[s]]
    tip = f"{area}: " + (", ".join(parts) if parts else "no checks")
    if state in schema.DOWN_STATUSES:
        tip = f"{area}: host {state}"
    if c["rules"]:
        tip += " \u2013 " + ", ".join(c["rules"])
    css = f"cell-{state}"
    if severity:
        css += f" sev-{severity}"
    return {"area": area, "state": state, "severity": severity or "", "label": label, "tip": tip, "css": css}


def _other_view(f: dict, catalog: dict[str, dict]) -> dict[str, Any]:
    """A passing or skipped check on a lazy page: what _host_data carries of it (_OTHER_KEYS), as _finding_view
    has them."""
    return {k: message_text(f.get(k)) if k == "message" else _text(f.get(k)) for k in _OTHER_KEYS}


def _finding_view(f: dict, catalog: dict[str, dict]) -> dict[str, Any]:
    rule = _text(f.get("rule"))
    entry = catalog.get(rule, {})
    fix = f.get("fix") if isinstance(f.get("fix"), dict) else entry.get("fix")
    fix = fix if isinstance(fix, dict) else {}
    failing = failing_devices(f.get("items"))
    return {
        "rule": rule,
        "status": _text(f.get("status")),
        "severity": _text(f.get("severity")),
        "area": _text(f.get("area")),
        "title": _text(f.get("title") or entry.get("title")),
        "message": message_text(f.get("message")),
        "rule_anchor": "",  # its entry in the Rules section, where it has one (_host_view)
        "observed": _value_view(f.get("observed"), failing),
        "expected": _value_view(f.get("expected"), failing),
        "fix": dict({k: _text(fix.get(k)) for k in ("role", "tag", "manual")}, in_rule=""),
        "items": _items_view(f.get("items")),
    }


def _value_text(value: Any) -> dict[str, Any]:
    """A value in words (fleetview.value_text: no JSON braces or quotes, no Python lists): short ones inline
    (``block`` false); longer ones in a block, on one (wrapped) line up to ONE_LINE_WIDTH, else a mapping one
    line per key (``gpus_full: 0\u20137``)."""
    text = value_text(value)
    if len(text) <= INLINE_WIDTH and "\n" not in text:
        return {"text": text, "block": False}
    if isinstance(value, dict) and len(value) > 1:
        lines = value_lines(value)
        one = " \u00b7 ".join(lines)
        return {"text": one if len(one) <= ONE_LINE_WIDTH else "\n".join(lines), "block": True}
    return {"text": text, "block": True}


def _value_view(value: Any, failing: dict[str, str]) -> dict[str, Any]:
    """``_value_text(value)``, plus ``bad`` (the failing devices' entries, shown first and marked) and ``rest``
    (what the other devices are) when the value is keyed by the devices the finding's items name."""
    view = _value_text(value)
    view["bad"] = []
    view["rest"] = ""
    f = focus(value, failing, fmt=value_text)
    if f is not None:
        view["bad"] = f["bad"]
        view["rest"] = others_text(f)
    return view


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _items_view(items: Any) -> dict[str, Any]:
    rows = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    columns: list[str] = []
    for row in rows[:MAX_ITEM_ROWS]:
        for key in row:
            if key not in columns:
                columns.append(str(key))
    return {
        "columns": columns,
        "rows": [[_cut(value_text(r[c]), 200) if c in r else "" for c in columns] for r in rows[:MAX_ITEM_ROWS]],
        "more": max(len(rows) - MAX_ITEM_ROWS, 0),
        "count": len(rows),
    }


def _references_view(refs: Any) -> list[dict[str, Any]]:
    """The rule's sources; only https URLs become links (a repository path, e.g. a bench script, stays text)."""
    out = []
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("title") and ref.get("url"):
            url = _text(ref["url"])
            out.append({"title": _text(ref["title"]), "url": url, "link": url.startswith("https://")})
    return out


def _catalog_view(entry: dict) -> dict[str, Any]:
    return {
        "id": _text(entry.get("id")),
        "area": _text(entry.get("area")),
        "severity": _text(entry.get("severity")),
        "title": _text(entry.get("title")),
        "rationale": _text(entry.get("rationale")),
        "references": _references_view(entry.get("references")),
        "fix": schema.format_fix(entry.get("fix")),
    }
