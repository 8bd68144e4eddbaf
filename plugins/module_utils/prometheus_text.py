# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The Prometheus text exposition format (0.0.4) and gpufleet's finding series, in one home.

The on-host checker (``watch/checker.py``) and the controller's report (``plugin_utils/report/prometheus.py``,
which imports this file relatively, as it does ``text.py``) write their series with these functions, so a dashboard
or an alert reads the same names and labels whether a finding came from an audit or from the watch. Stdlib only, and
it imports nothing of the collection (the report package loads wherever it is put): the severities counted are the
caller's. Every family is a gauge (no name ends in ``_total``: https://prometheus.io/docs/practices/naming/);
samples carry no timestamps (the node_exporter textfile collector rejects them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PREFIX = "gpufleet"
FINDING_STATUSES = ("fail", "warn")  # a "finding" in counts and metrics

FINDING_HELP = "A failing or warning gpufleet finding on a host (always 1 while it lasts)."
HOST_FINDINGS_HELP = ("Failing and warning findings on an audited host, by severity "
                      "(no series for a host that was not audited: see gpufleet_host_up).")


def escape_label(value):
    """A label value escaped per the exposition format: backslash, double quote and line feed."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def labels(pairs):
    """``{k="v",...}`` from (name, value) pairs in order; "" for none."""
    pairs = list(pairs)
    if not pairs:
        return ""
    return "{" + ",".join('%s="%s"' % (k, escape_label(v)) for k, v in pairs) + "}"


def number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def sample(name, pairs, value):
    return "%s_%s%s %s" % (PREFIX, name, labels(pairs), number(value))


def is_finding(finding):
    return isinstance(finding, dict) and finding.get("status") in FINDING_STATUSES


def finding_labels(host, finding):
    """The labels of a finding's series: host, rule, severity, area, status."""
    return [("host", host), ("rule", finding.get("rule", "")), ("severity", finding.get("severity", "")),
            ("area", finding.get("area", "")), ("status", finding.get("status"))]


def findings_of(findings):
    """The findings proper (fail, warn), one per rule (a second series for a rule would make node_exporter drop
    the whole file), in the order given."""
    seen = set()
    out = []
    for f in findings:
        if not is_finding(f) or f.get("rule") in seen:
            continue
        seen.add(f.get("rule"))
        out.append(f)
    return out


def finding_samples(host, findings):
    return [sample("finding", finding_labels(host, f), 1) for f in findings_of(findings)]


def host_findings_samples(host, findings, severities):
    """One sample per severity of ``severities`` (each from 0): the host's findings proper of that severity."""
    counts = dict((s, 0) for s in severities)
    for f in findings:
        if is_finding(f) and f.get("severity") in counts:
            counts[f["severity"]] += 1
    return [sample("host_findings", [("host", host), ("severity", s)], n) for s, n in counts.items()]


def render(families):
    """The text of ``families``: (name without the prefix, help, sample lines), each a gauge."""
    lines = []
    for name, help_text, samples in families:
        metric = "%s_%s" % (PREFIX, name)
        lines.append("# HELP %s %s" % (metric, escape_help(help_text)))
        lines.append("# TYPE %s gauge" % metric)
        lines.extend(samples)
    return "\n".join(lines) + "\n"
