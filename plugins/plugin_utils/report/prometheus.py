# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The report as a node_exporter textfile (Prometheus text exposition format 0.0.4).

Point node_exporter's ``--collector.textfile.directory`` at ``<report dir>/latest``: the writer swaps that link
atomically, so the collector never reads half a file. Samples carry no timestamps (the textfile collector
rejects them); the audit time is its own metric.

Only hosts that were audited (status ``ok``) export finding series: a host that was not (unreachable, failed,
timeout, interrupted) has no ``gpufleet_finding`` and no ``gpufleet_host_findings``, so a dashboard never reads
a down host as clean; ``gpufleet_host_up{status=...} 0`` says why. Every family is a gauge, so no name ends in
``_total`` (Prometheus naming: https://prometheus.io/docs/practices/naming/; ``promtool check metrics`` lints it).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ansible_collections.gpufleet.tuning.plugins.module_utils import prometheus_text as text

from . import schema

PREFIX = text.PREFIX
escape_label = text.escape_label


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


def render_prometheus(report: dict, now: datetime | None = None) -> str:
    """The textfile for ``report``. ``now`` stands in for the audit time when the report has none."""
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    families: list[tuple[str, str, list[str]]] = []

    audited = {name: host for name, host in sorted(hosts.items()) if _audited(host)}
    findings: list[str] = []
    for name, host in audited.items():
        findings.extend(text.finding_samples(name, sorted(schema.host_findings(host), key=schema.finding_sort_key)))
    families.append(("finding", text.FINDING_HELP, findings))

    up = [
        text.sample("host_up", [("host", name), ("status", _status(h))], 1 if _audited(h) else 0)
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
        totals.extend(text.host_findings_samples(name, schema.host_findings(host)))
    families.append(("host_findings", text.HOST_FINDINGS_HELP, totals))

    ts = audit_timestamp(report)
    if ts is None:
        ts = (now or datetime.now(timezone.utc)).timestamp()
    families.append(
        (
            "audit_timestamp_seconds",
            "Unix time the audit finished.",
            [text.sample("audit_timestamp_seconds", [], float(ts))],
        )
    )
    families.append(
        (
            "audit_complete",
            "1 if the audit run completed, 0 if it was interrupted or partial.",
            [text.sample("audit_complete", [], 1 if run.get("complete") is True else 0)],
        )
    )

    return text.render(families)
