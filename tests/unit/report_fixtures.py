"""The recorded reports under tests/fixtures/reports, for the renderer tests."""

from __future__ import annotations

import json
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"


def load(name: str) -> dict:
    return json.loads((REPORTS / name).read_text(encoding="utf-8"))
