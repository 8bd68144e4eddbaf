# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The report as JUnit XML, for CI systems: one <testsuite> per host, one <testcase> per host x rule.

fail -> <failure>, error -> <error>, skip -> <skipped/>, warn -> passed, with the warning in <system-out>.
A host that was not audited (unreachable, failed, timeout, interrupted) is one testcase with an <error>.
Built with xml.etree, so every value is escaped;
characters XML 1.0 cannot carry at all (most C0 controls) are replaced by U+FFFD first, and so are DEL, the C1
controls and the bidi controls (XML carries them, but a CI page or log would show them acting). A testcase's class
is ``<host>.<area>`` with the catalog's area of the rule (else one of the schema's areas, else ``unknown``): a host
cannot name classes of its own.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # nosec B405  # builds XML only, never parses any
from typing import Any

from ...module_utils.text import BIDI
from . import schema

# Everything outside XML 1.0's Char production: C0 controls but tab/newline/CR, surrogates, U+FFFE/U+FFFF; and
# what XML carries but a CI page or log should not show acting (issue 26): DEL and C1 controls (CSI \x9b, NEL
# \x85) and the bidi controls that reorder what a reader sees.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + BIDI + "\ud800-\udfff\ufffe\uffff]"
)


def _x(value: Any) -> str:
    return _UNSAFE.sub("\ufffd", "" if value is None else str(value))


def _sources(refs: Any) -> str:
    """The rule's references as the HTML report lists them: ``Title <url>; Title <url>``."""
    out = []
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("title") and ref.get("url"):
            out.append(f"{ref['title']} <{ref['url']}>")
    return "; ".join(out)


def _details(f: dict, rationale: str, sources: str = "") -> str:
    lines = []
    if f.get("message"):
        lines.append(str(f["message"]))
    lines.append(f"observed: {schema.format_value(f.get('observed'))}")
    lines.append(f"expected: {schema.format_value(f.get('expected'))}")
    fix = schema.format_fix(f.get("fix"))
    if fix:
        lines.append(f"fix: {fix}")
    if rationale:
        lines.append(f"why: {rationale}")
    if sources:
        lines.append(f"sources: {sources}")
    items = f.get("items")
    if isinstance(items, list) and items:
        lines.append(f"details ({len(items)}):")
        lines.extend(f"  {schema.format_value(i)}" for i in items)
    return "\n".join(lines)


def build_junit(report: dict) -> ET.Element:
    """The <testsuites> element of ``report``."""
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    catalog = schema.catalog_index(report)
    root = ET.Element("testsuites", name="gpufleet")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for name, host in sorted(hosts.items()):
        host = host if isinstance(host, dict) else {}
        name = _x(name)
        suite = ET.SubElement(root, "testsuite", name=name)
        if run.get("finished_at"):
            suite.set("timestamp", _x(run["finished_at"]))
        props = ET.SubElement(suite, "properties")
        for key, value in (("status", host.get("status")), ("site", host.get("site")), ("run", run.get("id"))):
            if value is not None:
                ET.SubElement(props, "property", name=key, value=_x(value))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        status = host.get("status")
        if status != "ok":
            what = status if status in schema.DOWN_STATUSES else "failed"
            case_name = "reachability" if what in ("unreachable", "timeout") else "audit"
            case = ET.SubElement(suite, "testcase", classname=name, name=case_name)
            text = _x(host.get("message") or f"host {what}")
            ET.SubElement(case, "error", message=text, type=f"host-{what}").text = text
            counts["tests"] += 1
            counts["errors"] += 1
        for f in sorted(schema.host_findings(host), key=lambda f: str(f.get("rule", ""))):
            rule = _x(f.get("rule"))
            entry = catalog.get(str(f.get("rule")), {})
            title = _x(f.get("title") or entry.get("title") or "")
            area = entry.get("area") if entry.get("area") in schema.AREAS else f.get("area")
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{name}.{area if area in schema.AREAS else 'unknown'}",
                name=f"{rule} {title}".strip(),
            )
            counts["tests"] += 1
            st = f.get("status")
            severity = _x(f.get("severity") or "")
            message = _x(f.get("message") or title)
            if st in ("pass", "skip"):  # no body: most findings pass, and their details would go unwritten
                body = ""
            else:
                body = _x(_details(f, str(entry.get("rationale") or ""), _sources(entry.get("references"))))
            if st == "fail":
                ET.SubElement(case, "failure", message=f"[{severity}] {message}", type=severity).text = body
                counts["failures"] += 1
            elif st == "error":
                ET.SubElement(case, "error", message=message, type="check-error").text = body
                counts["errors"] += 1
            elif st == "skip":
                ET.SubElement(case, "skipped", message=message)
                counts["skipped"] += 1
            elif st == "warn":
                ET.SubElement(case, "system-out").text = f"WARNING [{severity}] {body}"
            elif st != "pass":
                ET.SubElement(case, "error", message=f"unknown status {_x(st)!r}", type="invalid-result").text = body
                counts["errors"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    return root


def render_junit(report: dict) -> str:
    """The report as a JUnit XML document (str, with an XML declaration)."""
    root = build_junit(report)
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
