"""`gpufleet report diff OLD NEW`: fixed, new, unchanged and unverified findings per host (report/diff).
`gpufleet report merge A B ... -o DIR`: the reports of job slices as one fleet report (report/merge).

Reports are given as report.json files or run directories (``reports/<run>``, ``reports/latest``, or ``reports``
for its latest run); each must be a gpufleet report (``gpufleet.report/v1``), else the command exits 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpufleet import exits, paths
from gpufleet.commands import audit, options
from gpufleet.text import clean


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "report",
        help="work with reports",
        description="Work with the reports `gpufleet audit` writes.",
        examples="""
  gpufleet report diff reports/20261130T080000Z reports/latest
""",
        exit_codes=options.READ_ONLY_EXIT_CODES,
    )
    report_sub = parser.add_subparsers(dest="report_command", required=True)
    rdiff = options.command(
        report_sub,
        "diff",
        help="fixed, new and unchanged findings per host between two reports",
        description="Compare two audit reports, host by host: findings fixed, new, unchanged, unverified (the host "
        "or rule was not audited the second time) and those that pass only because the policy changed. Each report "
        "is a report.json or a run directory. The runs' policies are compared: a finding gone because the policy "
        "changed is not called fixed, one whose rule the policy turned back on is not called new (enabled).",
        examples="""
  gpufleet report diff reports/20261130T080000Z reports/latest
  gpufleet report diff before/report.json after/report.json
  gpufleet report diff reports/20261130T080000Z reports/latest --fail-on high   # exit 1 on new
  gpufleet report diff before after --json | jq '.totals'
""",
        exit_codes="0 compared (no new failing finding at or above --fail-on), 1 a finding new in NEW fails at or "
        "above --fail-on, 3 usage error (a file that is not a gpufleet report), 141 the output's reader went away "
        "(SIGPIPE)",
    )
    rdiff.add_argument("old", help="the earlier report: report.json or a run directory")
    rdiff.add_argument("new", help="the later report: report.json or a run directory")
    options.fail_on(rdiff, what="a finding new in NEW (not a finding in OLD) fails at or above this severity")
    rdiff.add_argument(
        "--json", action="store_true", help="the comparison as JSON for scripts (hosts, buckets, totals, runs)"
    )
    rdiff.set_defaults(func=run_diff)
    rmerge = options.command(
        report_sub,
        "merge",
        help="merge the reports of job slices (AWX job slicing, --limit runs) into one fleet report",
        description="Merge the reports of job slices - AWX job slicing, or gpufleet audit --limit runs - into one "
        "fleet report and write it in every format (report.json, report.html, junit.xml, gpufleet.prom) under "
        "DIR/<stamp>/ and DIR/latest, as an audit does. Each REPORT is a report.json or a run directory. Reports of "
        "different schema versions, judged by different policies (policy files, or a host's policy digest) or with "
        "different rule catalogs are refused. A host in more than one report is kept once, from the report whose "
        "run finished last, and the merged report lists it under run.duplicates. The merged run is complete only "
        "if every report is. The exit code is the merged report's, as gpufleet audit's.",
        examples="""
  gpufleet report merge slice1/latest slice2/latest slice3/latest -o reports/fleet
  gpufleet report merge /shared/gpufleet/job-*/report.json -o /shared/gpufleet/fleet --fail-on high
""",
        exit_codes="0 merged, every host audited and no finding at or above --fail-on, 1 findings at or above "
        "--fail-on, 2 a host of the merged report was not audited (unreachable, failed, timed out, interrupted), 3 "
        "usage error (an input that is not a gpufleet report, reports that cannot be merged, an output directory "
        "that cannot be written), 141 the output's reader went away (SIGPIPE)",
    )
    rmerge.add_argument("reports", nargs="+", metavar="REPORT", help="a slice's report: report.json or a run directory")
    rmerge.add_argument("-o", "--out", required=True, metavar="DIR", help="report directory of the merged report")
    options.fail_on(rmerge)
    rmerge.set_defaults(func=run_merge)


def report_file(path: str) -> Path:
    """``path`` itself, or the report.json of a run directory (``reports/<run>``, ``reports/latest``), or of the
    newest run of a report directory (``reports``: the newer of ``latest``, its last complete run, and
    ``last-partial``, a --limit or interrupted run such as a slice's)."""
    p = Path(path)
    if p.is_dir():
        if (p / "report.json").is_file():
            return p / "report.json"
        runs = [p / link / "report.json" for link in ("latest", "last-partial")]
        runs = [run for run in runs if run.is_file()]
        if runs:
            return max(runs, key=lambda run: run.stat().st_mtime)
        raise exits.UsageError(
            f"{path}: a directory without a report.json (a run directory, or one with latest/ or last-partial/)"
        )
    return p


def load_report(path: str) -> dict[str, Any]:
    """A gpufleet report read from ``path`` (see ``report_file``); a UsageError when it is not one."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

    file = report_file(path)
    try:
        doc = json.loads(file.read_text())
    except OSError as exc:
        raise exits.UsageError(f"{path}: cannot read a gpufleet report: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise exits.UsageError(f"{file}: not a gpufleet report: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schema") != schema.SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise exits.UsageError(f"{file}: not a gpufleet report (schema {schema.SCHEMA!r} expected, got {got!r})")
    # A summary that no longer adds up (a report edited by hand) does not matter here: the hosts are compared.
    problems = [p for p in schema.validate(doc) if not p.startswith("summary")]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise exits.UsageError(f"{file}: not a valid gpufleet report: {'; '.join(problems[:3])}{more}")
    return doc


def run_diff(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import diff

    old, new = load_report(args.old), load_report(args.new)
    compared = diff.diff_reports(old, new)
    if getattr(args, "json", False):
        print(json.dumps(compared, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(diff.render_diff(compared), end="")
    gate = new_failures(compared, getattr(args, "fail_on", "none"))
    if not gate:
        return exits.EXIT_OK
    shown = ", ".join(f"{host} {rule}" for host, rule in gate[:5]) + (f" (+{len(gate) - 5})" if len(gate) > 5 else "")
    print(
        clean(f"gpufleet: exit 1: {len(gate)} new failing finding(s) at or above {args.fail_on} (--fail-on): {shown}"),
        file=sys.stderr,
    )
    return exits.EXIT_FINDINGS


def new_failures(compared: dict[str, Any], fail_on: str) -> list[tuple[str, str]]:
    """(host, rule) of each finding new in the later report (``diff_reports``' ``new`` bucket) that fails (not a
    warning) at or above ``fail_on``; none for ``none``."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

    if fail_on not in schema.SEVERITIES:
        return []
    floor = schema.severity_rank(fail_on)
    out = []
    for host, h in sorted((compared.get("hosts") or {}).items()):
        for rule in h.get("new") or []:
            r = (h.get("rules") or {}).get(rule) or {}
            if r.get("new") == "fail" and schema.severity_rank(r.get("severity")) <= floor:
                out.append((host, rule))
    return out


def read_report(path: str) -> tuple[str, Any]:
    """``(label, document)`` of the report at ``path`` (see ``report_file``): label is the report.json's path. A
    UsageError naming ``path`` when it cannot be read, is not JSON or is not a gpufleet report of any version."""
    file = report_file(path)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise exits.UsageError(f"{path}: cannot read a gpufleet report: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise exits.UsageError(f"{file}: not a gpufleet report: not JSON ({exc})") from exc
    version = doc.get("schema") if isinstance(doc, dict) else None
    if not (isinstance(version, str) and version.startswith("gpufleet.report/")):
        got = version if isinstance(doc, dict) else type(doc).__name__
        raise exits.UsageError(
            f"{file}: not a gpufleet report (schema 'gpufleet.report/<version>' expected, got {got!r})"
        )
    return str(file), doc


def run_merge(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import merge, terminal, writer

    inputs = [read_report(path) for path in args.reports]
    try:
        report = merge.merge_reports(inputs)
    except merge.MergeError as exc:
        raise exits.UsageError(f"cannot merge: {exc}") from exc
    try:
        writer.check_writable(args.out)
        files = writer.write_all(report, args.out)
    except (OSError, writer.ReportDirError) as exc:
        raise exits.UsageError(str(exc)) from exc
    print(terminal.render_terminal(report, color=options.use_color(sys.stdout), width=options.width(sys.stdout)))
    for kind, path in sorted(files.items()):
        print(f"{kind:>10}: {path}")
    print(audit.link_note(report, Path(args.out).expanduser()), file=sys.stderr)
    print(f"merged {len(inputs)} report(s):")
    for line in merge.describe(report):
        print(f"  {clean(line)}")  # runs, inventories and hosts named in the inputs
    return options.exit_with_reason(report, args.fail_on)
