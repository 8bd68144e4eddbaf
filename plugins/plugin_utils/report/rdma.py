# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""What the HTML report shows of a host's RDMA ports (``facts.rdma``, module_utils/rdma.py): one row per port with
its state, rate, link layer, netdevs and the error counters that grew or are saturated. Pure: strings only, the
template escapes them."""

from __future__ import annotations

from typing import Any


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _names(value: Any) -> str:
    return ", ".join(str(v) for v in value) if isinstance(value, list) else ""


def _errors(port: dict) -> str:
    grew = _dict(port.get("deltas"))
    parts = [f"{name} +{delta}" for name, delta in sorted(grew.items()) if delta]
    if isinstance(port.get("saturated"), list) and port["saturated"]:
        parts.append("saturated: " + _names(port["saturated"]))
    if port.get("deltas") is None:
        parts.append("read once")
    return "; ".join(parts)


def html_view(rdma: Any) -> dict[str, Any] | None:
    """None when the report has no RDMA facts; else ``available``, ``summary`` (or ``reason``) and ``ports`` rows
    (``ok``: ACTIVE and LinkUp)."""
    if not isinstance(rdma, dict):
        return None
    ports = [p for p in rdma.get("ports") or [] if isinstance(p, dict)]
    if not rdma.get("available") or not ports:
        return {"available": False, "reason": str(rdma.get("reason") or "no RDMA ports"), "summary": "", "ports": []}
    rows = []
    for p in ports:
        up = p.get("state") == "ACTIVE" and p.get("phys_state") == "LinkUp"
        rows.append(
            {
                "name": str(p.get("name") or ""),
                "state": f"{p.get('state') or '?'} / {p.get('phys_state') or '?'}",
                "ok": up,
                "rate": str(p.get("rate") or ""),
                "link_layer": str(p.get("link_layer") or ""),
                "netdevs": _names(p.get("netdevs")),
                "errors": _errors(p),
            }
        )
    active = sum(1 for r in rows if r["ok"])
    return {
        "available": True,
        "reason": "",
        "summary": f"{active} of {len(rows)} up",
        "ports": rows,
    }
