# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The report as a node_exporter textfile (Prometheus text exposition format 0.0.4).

Point node_exporter's ``--collector.textfile.directory`` at ``<report dir>/latest``: the writer swaps that link
atomically, so the collector never reads half a file. Samples carry no timestamps (the textfile collector
rejects them); the audit time is its own metric.

Bounded by the controller, not by the hosts: a host's result cannot add a series. A finding is exported as its
own ``gpufleet_finding`` series only for a rule of the report's catalog (the controller writes its rule catalog,
``module_utils/rules``, into every report: ``fleet.build_report``), with a severity of the schema (a policy may
override a rule's severity, so any known one is accepted) and the catalog's area (not the host's); each label value
comes from those fixed sets or from the inventory's host names. A finding with a rule id outside the catalog or an
unknown severity, and a result whose status is outside the schema, is counted in one
``gpufleet_unknown_findings{host}`` series per audited host instead: at most catalog x host series, whatever a
host returns (10,000 random rule ids give one counter of 10,000).

Only hosts that were audited (status ``ok``) export finding series: a host that was not (unreachable, failed,
timeout, interrupted) has no ``gpufleet_finding`` and no ``gpufleet_host_findings``, so a dashboard never reads
a down host as clean; ``gpufleet_host_up{status=...} 0`` says why. Every family is a gauge, so no name ends in
``_total`` (Prometheus naming: https://prometheus.io/docs/practices/naming/; ``promtool check metrics`` lints it).

The text itself (escaping, labels, numbers, the finding and per-severity series, the families) is written by
``module_utils/prometheus_text.py``, the one writer that the on-host checker (role watch) uses as well; it is stdlib
only and imported relatively, so this package still loads wherever it is put.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ...module_utils.prometheus_text import (
    FINDING_HELP,
    HOST_FINDINGS_HELP,
    escape_label,
    finding_labels,
    host_findings_samples,
    render,
    sample,
)
from . import schema

__all__ = ["audit_timestamp", "catalog_areas", "escape_label", "render_prometheus"]


def audit_timestamp(report: dict) -> float | None:
    """Unix time of the end of the run (its start if it has no end), None if neither is a timestamp."""
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    for key in ("finished_at", "started_at"):
        when = schema.parse_time(run.get(key))
        if when is not None:
            if when.tzinfo is None:  # a naive time in a report is UTC (the producer writes UTC)
                when = when.replace(tzinfo=timezone.utc)
            return when.timestamp()
    return None


def _audited(host: Any) -> bool:
    return isinstance(host, dict) and host.get("status") == "ok"


def _status(host: Any) -> str:
    """The host's status for the ``status`` label; anything outside the schema reads as ``failed``."""
    status = host.get("status") if isinstance(host, dict) else None
    return status if status in schema.HOST_STATUSES else "failed"


def catalog_areas(report: dict) -> dict[str, str]:
    """Rule id -> area of the report's catalog: the rules the export names (an entry whose area is not one of the
    schema's is left out)."""
    return {
        rid: entry["area"] for rid, entry in schema.catalog_index(report).items() if entry.get("area") in schema.AREAS
    }


def render_prometheus(report: dict, now: datetime | None = None) -> str:
    """The textfile for ``report``. ``now`` stands in for the audit time when the report has none."""
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    families: list[tuple[str, str, list[str]]] = []

    areas = catalog_areas(report)
    findings: list[str] = []
    unknown: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    audited = {name: host for name, host in sorted(hosts.items()) if _audited(host)}
    for name, host in audited.items():
        unknown[name] = 0
        for f in sorted(schema.host_findings(host), key=schema.finding_sort_key):
            if f.get("status") not in schema.STATUSES:
                unknown[name] += 1
                continue
            if not schema.is_finding(f):
                continue
            rule, severity = f.get("rule"), f.get("severity")
            if not isinstance(rule, str) or rule not in areas or severity not in schema.SEVERITIES:
                unknown[name] += 1
                continue
            key = (str(name), rule)
            if key in seen:  # one series per host and rule: a duplicate would make node_exporter drop the file
                continue
            seen.add(key)
            findings.append(sample("finding", finding_labels(name, dict(f, area=areas[rule])), 1))
    families.append(("finding", FINDING_HELP, findings))

    up = [
        sample("host_up", [("host", name), ("status", _status(h))], 1 if _audited(h) else 0)
        for name, h in sorted(hosts.items())
    ]
    families.append(
        (
            "host_up",
            "1 if the host was audited, 0 if not; status says why (ok, unreachable, failed, timeout, interrupted).",
            up,
        )
    )

    totals = []
    for name, host in audited.items():
        totals.extend(host_findings_samples(name, schema.host_findings(host), schema.SEVERITIES))
    families.append(("host_findings", HOST_FINDINGS_HELP, totals))

    families.append(
        (
            "unknown_findings",
            "Results of an audited host not exported as their own series: a failing or warning finding whose rule is "
            "not in the report's catalog or whose severity is unknown, or a result whose status is unknown.",
            [sample("unknown_findings", [("host", name)], n) for name, n in unknown.items()],
        )
    )

    ts = audit_timestamp(report)
    if ts is None:
        ts = (now or datetime.now(timezone.utc)).timestamp()
    families.append(
        (
            "audit_timestamp_seconds",
            "Unix time the audit finished.",
            [sample("audit_timestamp_seconds", [], float(ts))],
        )
    )
    families.append(
        (
            "audit_complete",
            "1 if the audit run completed, 0 if it was interrupted or partial.",
            [sample("audit_complete", [], 1 if run.get("complete") is True else 0)],
        )
    )

    return render(families)
