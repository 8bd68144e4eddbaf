"""`gpufleet report diff OLD NEW`: fixed, new, unchanged and unverified findings per host (report/diff).

OLD and NEW are report.json files or run directories (``reports/<run>``, ``reports/latest``, or ``reports`` for its
latest run); each must be a gpufleet report (``gpufleet.report/v1``), else the command exits 3.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpufleet import exits, paths
from gpufleet.commands import options


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
        "changed is not called fixed.",
        examples="""
  gpufleet report diff reports/20261130T080000Z reports/latest
  gpufleet report diff before/report.json after/report.json
""",
        exit_codes="0 compared, 3 usage error (a file that is not a gpufleet report), 141 the output's reader went "
        "away (SIGPIPE)",
    )
    rdiff.add_argument("old", help="the earlier report: report.json or a run directory")
    rdiff.add_argument("new", help="the later report: report.json or a run directory")
    rdiff.set_defaults(func=run_diff)


def report_file(path: str) -> Path:
    """``path`` itself, or the report.json of a run directory (``reports/<run>``, ``reports/latest``), or of the
    latest run of a report directory (``reports``)."""
    p = Path(path)
    if p.is_dir():
        for candidate in (p / "report.json", p / "latest" / "report.json"):
            if candidate.is_file():
                return candidate
        raise exits.UsageError(f"{path}: a directory without a report.json (a run directory, or one with latest/)")
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
    print(diff.render_diff(diff.diff_reports(old, new)), end="")
    return exits.EXIT_OK
