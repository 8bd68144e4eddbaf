# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The one count of rule results: behind a host's ``summary`` (``rules.summarize``, on the target) and a report's
``summary.findings`` (``report/schema.summarize``, on the controller).

Stdlib only, and it imports nothing of the collection: the controller's report package imports it relatively, as
it does ``text.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

FINDING_STATUSES = ("fail", "warn")  # a "finding" proper, in counts, metrics and diffs


def count_findings(findings, statuses, severities, areas):
    """Every rule result by status; the findings proper (fail, warn) by severity and by area.

    ``statuses``, ``severities``, ``areas``: the terms counted, each from 0; a value outside them is not counted
    (a host that lies, or a report written by another version)."""
    by_status = dict((s, 0) for s in statuses)
    by_severity = dict((s, 0) for s in severities)
    by_area = dict((a, 0) for a in areas)
    for f in findings:
        status = f.get("status")
        if status in by_status:
            by_status[status] += 1
        if status in FINDING_STATUSES:
            if f.get("severity") in by_severity:
                by_severity[f["severity"]] += 1
            if f.get("area") in by_area:
                by_area[f["area"]] += 1
    return {"by_status": by_status, "by_severity": by_severity, "by_area": by_area}
