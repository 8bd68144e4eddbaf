"""A large fleet's report built from the recorded one (tests/fixtures/reports/sample-v1.json), not by auditing
a thousand hosts: the renderer tests of issue 18 (the HTML report at 1,000 hosts).

Host i is a copy of a recorded host, renamed ``<recorded name>-<i>``: one in ten was not audited (every 20th
failed, every 20th unreachable, as fra-a100-02 and sg-l40s-03 were), the others alternate between the two audited
hosts (iad-h100-03: all 33 checks pass or skip; sg-a100-01: 11 failing, 3 of them critical). The summary is
recomputed from the hosts, as the report writer does.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

REPORTS = Path(__file__).resolve().parent / "fixtures" / "reports"
AUDITED = ("iad-h100-03", "sg-a100-01")


def source_of(i: int) -> str:
    """The recorded host that host i copies."""
    if i % 20 == 0:
        return "fra-a100-02"  # failed
    if i % 20 == 10:
        return "sg-l40s-03"  # unreachable
    return AUDITED[i % 2]


def scaled_report(n: int, base: str = "sample-v1.json") -> dict:
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

    recorded = json.loads((REPORTS / base).read_text(encoding="utf-8"))
    report = copy.deepcopy(recorded)
    report["hosts"] = {f"{source_of(i)}-{i:04d}": copy.deepcopy(recorded["hosts"][source_of(i)]) for i in range(n)}
    report["summary"] = schema.summarize(report["hosts"])
    return report
