# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The report schema ``gpufleet.report/v1``: constants, a small hand-written validator, the summary, and the
host x area cell logic every renderer shares.

``validate`` returns a list of problems (empty = valid), each naming the path of the offending value
(``hosts['gpu-01'].findings[2].status: ...``). Renderers do not require a valid report: they read with defaults so
that a report with a problem is still shown, and the CLI decides what an invalid report means.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from ...module_utils.summary import FINDING_STATUSES, count_findings

SCHEMA = "gpufleet.report/v1"

AREAS = ("memory", "cpu", "network", "power", "software", "health")
SEVERITIES = ("critical", "high", "medium", "low", "info")  # worst first
STATUSES = ("pass", "fail", "warn", "skip", "error")
HOST_STATUSES = ("ok", "failed", "unreachable", "timeout", "interrupted")
# A host in one of these was not audited: unreachable (no connection), failed (the audit itself failed), timeout (no
# answer within the per-host timeout, gpufleet_host_timeout), interrupted (the run stopped before it answered).
DOWN_STATUSES = HOST_STATUSES[1:]
# Host counts in summary.hosts; reports written before timeout/interrupted existed lack those two (still valid).
HOST_COUNT_KEYS = ("total", *HOST_STATUSES)
OPTIONAL_HOST_COUNT_KEYS = ("timeout", "interrupted")
LINK_SOURCES = ("declared", "measured", "mixed", "none")  # mixed: some peers declared, some measured

# Cell states of the host x area matrix, worst first. Host-level states come first: nothing below them is known.
CELL_STATES = ("unreachable", "failed", "timeout", "interrupted", "fail", "warn", "error", "pass", "skip", "none")

_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_STATUS_ORDER = {s: i for i, s in enumerate(("fail", "warn", "error", "skip", "pass"))}


def severity_rank(severity: Any) -> int:
    """0 for critical ... 4 for info; an unknown severity sorts after info."""
    return _SEVERITY_RANK.get(severity, len(SEVERITIES))


def worst_severity(severities) -> str | None:
    """The worst of ``severities`` (critical > high > medium > low > info), None for none."""
    known = [s for s in severities if s in _SEVERITY_RANK]
    return min(known, key=severity_rank) if known else None


def is_finding(finding: dict) -> bool:
    """A finding proper: a rule whose status is fail or warn."""
    return finding.get("status") in FINDING_STATUSES


def finding_sort_key(finding: dict) -> tuple:
    """fail before warn before error before skip before pass; then by severity, then by rule id."""
    return (
        _STATUS_ORDER.get(finding.get("status"), 5),
        severity_rank(finding.get("severity")),
        str(finding.get("rule", "")),
    )


def host_findings(host: dict) -> list[dict]:
    findings = host.get("findings") if isinstance(host, dict) else None
    return [f for f in findings if isinstance(f, dict)] if isinstance(findings, list) else []


def cell(host: dict, area: str) -> dict[str, Any]:
    """The matrix cell of one host and one area.

    ``state`` is one of CELL_STATES: ``unreachable``/``failed``/``timeout``/``interrupted`` (the host was not
    audited: DOWN_STATUSES), ``fail`` (worst
    severity among failing findings), ``warn`` (only warnings: worst severity among them, shown lighter), ``error``
    (a check could not run), ``pass`` (everything passed), ``skip`` (only skipped checks), ``none`` (no rule of
    this area ran). ``severity`` is set for fail and warn. ``counts`` counts the area's findings by status and
    ``rules`` lists the failing and warning rule ids, worst first.
    """
    host_status = host.get("status") if isinstance(host, dict) else None
    findings = [f for f in host_findings(host) if f.get("area") == area]
    counts = {s: 0 for s in STATUSES}
    for f in findings:
        if f.get("status") in counts:
            counts[f["status"]] += 1
    failing = sorted((f for f in findings if is_finding(f)), key=finding_sort_key)
    result: dict[str, Any] = {
        "state": "none",
        "severity": None,
        "counts": counts,
        "rules": [str(f.get("rule", "")) for f in failing],
    }
    if host_status in DOWN_STATUSES:
        result["state"] = host_status
    elif counts["fail"]:
        result["state"] = "fail"
        result["severity"] = worst_severity(f.get("severity") for f in findings if f.get("status") == "fail")
    elif counts["warn"]:
        result["state"] = "warn"
        result["severity"] = worst_severity(f.get("severity") for f in findings if f.get("status") == "warn")
    elif counts["error"]:
        result["state"] = "error"
    elif counts["pass"]:
        result["state"] = "pass"
    elif counts["skip"]:
        result["state"] = "skip"
    return result


def summarize(hosts: dict[str, dict]) -> dict[str, Any]:
    """The ``summary`` block of a report, computed from its ``hosts``.

    Host counts by status; findings (fail + warn) by severity and by area; every rule result by status. Findings of
    a failed host that returned some are counted too. Values outside the schema's enums are not counted.
    """
    host_counts = {key: 0 for key in HOST_COUNT_KEYS}
    findings = []
    for host in (hosts or {}).values():
        host_counts["total"] += 1
        status = host.get("status") if isinstance(host, dict) else None
        if status in HOST_STATUSES:
            host_counts[status] += 1
        findings += host_findings(host)
    counts = count_findings(findings, STATUSES, SEVERITIES, AREAS)  # the count a host's own summary makes
    return {
        "hosts": host_counts,
        "findings": {key: counts[key] for key in ("by_severity", "by_area", "by_status")},
    }


def catalog_index(report: dict) -> dict[str, dict]:
    """Catalog entries by rule id (entries without a string id are ignored)."""
    catalog = report.get("catalog") if isinstance(report, dict) else None
    if not isinstance(catalog, list):
        return {}
    return {e["id"]: e for e in catalog if isinstance(e, dict) and isinstance(e.get("id"), str)}


def format_value(value: Any, limit: int | None = None) -> str:
    """Compact one-line JSON of an observed/expected value (strings bare), cut to ``limit`` characters."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
        except (TypeError, ValueError):
            text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + "\u2026"
    return text


def format_fix(fix: Any) -> str:
    """``role gpu_runtime, tag GPU-PWR-001; manual: ...`` or an empty string."""
    if not isinstance(fix, dict):
        return ""
    parts = []
    if fix.get("role"):
        parts.append(f"role {fix['role']}")
    if fix.get("tag"):
        parts.append(f"tag {fix['tag']}")
    text = ", ".join(parts)
    if fix.get("manual"):
        text = f"{text}; manual: {fix['manual']}" if text else f"manual: {fix['manual']}"
    return text


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 timestamp (``Z`` accepted on Python 3.10), or None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------- validator


_RULE_ID = re.compile(r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)+$")


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, text: str) -> None:
        self.problems.append(f"{path}: {text}")

    def typed(self, obj: dict, key: str, path: str, kinds: tuple, what: str, optional: bool = False) -> Any:
        """``obj[key]`` if it is present and of one of ``kinds`` (bool is never an int here), else a problem."""
        where = f"{path}.{key}"
        if key not in obj:
            if not optional:
                self.add(where, "missing")
            return None
        value = obj[key]
        if value is None and type(None) in kinds:
            return None
        if isinstance(value, bool) and bool not in kinds:
            self.add(where, f"expected {what}, got {_kind(value)}")
            return None
        if not isinstance(value, tuple(k for k in kinds if k is not type(None))):
            self.add(where, f"expected {what}, got {_kind(value)}")
            return None
        return value

    def choice(self, obj: dict, key: str, path: str, choices: tuple) -> Any:
        value = self.typed(obj, key, path, (str,), "a string")
        if value is not None and value not in choices:
            self.add(f"{path}.{key}", f"{value!r} is not one of {', '.join(choices)}")
        return value

    def objects(self, items: list | None, path: str):
        """(path, item) for each object of the list ``items`` at ``path`` (None: no items); any other item is an
        error."""
        for i, item in enumerate(items or []):
            where = f"{path}[{i}]"
            if isinstance(item, dict):
                yield where, item
            else:
                self.add(where, f"expected an object, got {_kind(item)}")

    def counts(self, obj: Any, path: str, keys: tuple, optional: tuple = ()) -> dict | None:
        if not isinstance(obj, dict):
            self.add(path, f"expected an object, got {_kind(obj)}")
            return None
        for key in keys:
            if key in optional and key not in obj:
                continue
            value = self.typed(obj, key, path, (int,), "an integer")
            if value is not None and value < 0:
                self.add(f"{path}.{key}", f"must be >= 0, got {value}")
        for key in obj:
            if key not in keys:
                self.add(f"{path}.{key}", f"unknown key (expected {', '.join(keys)})")
        return obj

    def fix(self, obj: dict, path: str) -> None:
        fix = self.typed(obj, "fix", path, (dict,), "an object")
        if fix is not None:
            for key in ("role", "tag", "manual"):
                self.typed(fix, key, f"{path}.fix", (str, type(None)), "a string or null")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def validate(report: Any) -> list[str]:
    """Problems with ``report`` as a ``gpufleet.report/v1`` document; an empty list means it is valid.

    Checks types and enums of every field the schema names, unique catalog ids, one result per rule and host,
    findings' rules present in the catalog, and that ``summary`` equals ``summarize(hosts)``. Unknown keys are
    allowed where the schema leaves room (top level, ``facts``, ``items``), so a newer producer stays readable.
    """
    c = _Checker()
    if not isinstance(report, dict):
        return [f"report: expected an object, got {_kind(report)}"]
    schema = report.get("schema")
    if schema != SCHEMA:
        c.add("schema", f"expected {SCHEMA!r}, got {schema!r}")

    tool = c.typed(report, "tool", "report", (dict,), "an object")
    if tool is not None:
        c.typed(tool, "name", "tool", (str,), "a string")
        c.typed(tool, "version", "tool", (str,), "a string")

    run = c.typed(report, "run", "report", (dict,), "an object")
    if run is not None:
        c.typed(run, "id", "run", (str,), "a string")
        for key in ("started_at", "finished_at"):
            value = c.typed(run, key, "run", (str,), "an ISO 8601 timestamp")
            if value is not None and parse_time(value) is None:
                c.add(f"run.{key}", f"{value!r} is not an ISO 8601 timestamp")
        c.typed(run, "inventory", "run", (str, type(None)), "a string or null")
        c.typed(run, "limit", "run", (str, type(None)), "a string or null")
        sources = c.typed(run, "policy_sources", "run", (list,), "a list of strings")
        for i, src in enumerate(sources or []):
            if not isinstance(src, str):
                c.add(f"run.policy_sources[{i}]", f"expected a string, got {_kind(src)}")
        c.typed(run, "complete", "run", (bool,), "a boolean")
        # Why a run is incomplete (e.g. interrupted by SIGINT); absent in older reports.
        c.typed(run, "incomplete_reason", "run", (str, type(None)), "a string or null", optional=True)
        c.typed(run, "controller", "run", (str,), "a string")

    catalog_ids: set[str] = set()
    catalog = c.typed(report, "catalog", "report", (list,), "a list")
    for path, entry in c.objects(catalog, "catalog"):
        rid = c.typed(entry, "id", path, (str,), "a string")
        if rid is not None:
            if not _RULE_ID.match(rid):
                c.add(f"{path}.id", f"{rid!r} is not a rule id like GPU-PWR-001")
            if rid in catalog_ids:
                c.add(f"{path}.id", f"duplicate rule id {rid!r}")
            catalog_ids.add(rid)
        c.choice(entry, "area", path, AREAS)
        c.choice(entry, "severity", path, SEVERITIES)
        c.typed(entry, "title", path, (str,), "a string")
        c.typed(entry, "rationale", path, (str,), "a string")
        refs = c.typed(entry, "references", path, (list,), "a list", optional=True)
        for i, ref in enumerate(refs or []):
            if not (isinstance(ref, dict) and isinstance(ref.get("title"), str) and isinstance(ref.get("url"), str)):
                c.add(f"{path}.references[{i}]", "expected {title: string, url: string}")
        c.fix(entry, path)

    hosts = c.typed(report, "hosts", "report", (dict,), "an object")
    for name, host in (hosts or {}).items():
        _validate_host(c, name, host, catalog_ids if catalog is not None else None)

    summary = c.typed(report, "summary", "report", (dict,), "an object")
    if summary is not None:
        host_counts = c.counts(summary.get("hosts"), "summary.hosts", HOST_COUNT_KEYS, OPTIONAL_HOST_COUNT_KEYS)
        findings = summary.get("findings")
        if not isinstance(findings, dict):
            c.add("summary.findings", f"expected an object, got {_kind(findings)}")
            findings = {}
        parts = {"by_severity": SEVERITIES, "by_area": AREAS, "by_status": STATUSES}
        checked = {key: c.counts(findings.get(key), f"summary.findings.{key}", keys) for key, keys in parts.items()}
        if isinstance(hosts, dict):
            expected = summarize({k: v for k, v in hosts.items() if isinstance(v, dict)})
            if isinstance(host_counts, dict):
                _compare(c, "summary.hosts", host_counts, expected["hosts"])
            for key, got in checked.items():
                if isinstance(got, dict):
                    _compare(c, f"summary.findings.{key}", got, expected["findings"][key])
    return c.problems


def _compare(c: _Checker, path: str, got: dict, expected: dict) -> None:
    for key, want in expected.items():
        value = got.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value != want:
            c.add(f"{path}.{key}", f"is {value}, but the hosts add up to {want}")


def _validate_host(c: _Checker, name: Any, host: Any, catalog_ids: set[str] | None) -> None:
    path = f"hosts[{name!r}]"
    if not isinstance(name, str) or not name:
        c.add(path, "host names must be non-empty strings")
    if not isinstance(host, dict):
        c.add(path, f"expected an object, got {_kind(host)}")
        return
    c.choice(host, "status", path, HOST_STATUSES)
    c.typed(host, "message", path, (str, type(None)), "a string or null")
    c.typed(host, "site", path, (str, type(None)), "a string or null")
    links = c.typed(host, "links", path, (dict,), "an object")
    if links is not None:
        c.choice(links, "source", f"{path}.links", LINK_SOURCES)
        peers = c.typed(links, "peers", f"{path}.links", (list,), "a list")
        for ppath, peer in c.objects(peers, f"{path}.links.peers"):
            c.typed(peer, "site", ppath, (str,), "a string")
            for key in ("rtt_ms", "bandwidth_gbps"):
                value = c.typed(peer, key, ppath, (int, float, type(None)), "a number or null")
                if value is not None and value < 0:
                    c.add(f"{ppath}.{key}", f"must be >= 0, got {value}")
    facts = c.typed(host, "facts", path, (dict,), "an object")
    if facts is not None:
        for key in ("gpu", "host", "network"):
            c.typed(facts, key, f"{path}.facts", (dict,), "an object", optional=True)
    findings = c.typed(host, "findings", path, (list,), "a list")
    seen: set[str] = set()
    for fpath, f in c.objects(findings, f"{path}.findings"):
        _validate_finding(c, fpath, f, seen, catalog_ids)


def _validate_finding(c: _Checker, fpath: str, f: dict, seen: set[str], catalog_ids: set[str] | None) -> None:
    rule = c.typed(f, "rule", fpath, (str,), "a string")
    if rule is not None:
        if rule in seen:
            c.add(f"{fpath}.rule", f"rule {rule!r} has more than one result for this host")
        seen.add(rule)
        if catalog_ids is not None and rule not in catalog_ids:
            c.add(f"{fpath}.rule", f"rule {rule!r} is not in the catalog")
    c.choice(f, "status", fpath, STATUSES)
    c.choice(f, "severity", fpath, SEVERITIES)
    c.choice(f, "area", fpath, AREAS)
    c.typed(f, "title", fpath, (str,), "a string")
    for key in ("observed", "expected"):
        if key not in f:
            c.add(f"{fpath}.{key}", "missing (use null for no value)")
    c.typed(f, "message", fpath, (str,), "a string")
    c.fix(f, fpath)
    items = c.typed(f, "items", fpath, (list,), "a list")
    for j, item in enumerate(items or []):
        if not isinstance(item, dict):
            c.add(f"{fpath}.items[{j}]", f"expected an object, got {_kind(item)}")


def accepted_findings(findings: Any, catalog_ids: set[str]) -> tuple[list[dict], list[str]]:
    """What the controller takes from a host's findings (it trusts no host beyond its own row, and only with what
    it knows): each finding that ``validate`` accepts in a report with this catalog, the first result of a rule
    only. Returns the accepted findings and, for each one set aside, why (its first problem)."""
    if not isinstance(findings, list):
        return [], [f"findings: expected a list, got {_kind(findings)}"]
    kept: list[dict] = []
    refused: list[str] = []
    seen: set[str] = set()
    for i, f in enumerate(findings):
        c = _Checker()
        if isinstance(f, dict):
            _validate_finding(c, f"findings[{i}]", f, set(seen), catalog_ids)
        else:
            c.add(f"findings[{i}]", f"expected an object, got {_kind(f)}")
        if c.problems:
            refused.append(c.problems[0])
        else:
            kept.append(f)
            seen.add(f["rule"])
    return kept, refused
