"""The recorded reports under tests/fixtures/reports, for the renderer tests."""

from __future__ import annotations

import json
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"


def load(name: str) -> dict:
    return json.loads((REPORTS / name).read_text(encoding="utf-8"))


def one_host(*findings, host: str = "h", status: str = "ok") -> dict:
    """The smallest report the renderers take: one host, audited with ``status``, with these findings."""
    return {"hosts": {host: {"status": status, "findings": list(findings)}}}


def warn_skip_error() -> dict:
    """One host with a cell in each state but fail: CPU two warnings (medium, low) beside a pass, MEMORY a skip,
    HEALTH an error beside a pass, POWER no finding at all; the matrix tests of the HTML and terminal renderers."""
    return one_host(
        {"rule": "GPU-CPU-002", "area": "cpu", "status": "warn", "severity": "medium"},
        {"rule": "GPU-CPU-003", "area": "cpu", "status": "warn", "severity": "low"},
        {"rule": "GPU-CPU-001", "area": "cpu", "status": "pass", "severity": "medium"},
        {"rule": "GPU-MEM-003", "area": "memory", "status": "skip", "severity": "low"},
        {"rule": "GPU-HLT-002", "area": "health", "status": "error", "severity": "critical"},
        {"rule": "GPU-HLT-001", "area": "health", "status": "pass", "severity": "critical"},
    )
