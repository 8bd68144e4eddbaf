"""`gpufleet report diff OLD NEW`: fixed, new, unchanged and unverified findings per host (report/diff)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpufleet import exits, paths


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("report", help="work with reports")
    report_sub = parser.add_subparsers(dest="report_command", required=True)
    rdiff = report_sub.add_parser("diff", help="fixed, new and unchanged findings per host between two report.json")
    rdiff.add_argument("old")
    rdiff.add_argument("new")
    rdiff.set_defaults(func=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import diff

    docs = []
    for path in (args.old, args.new):
        try:
            docs.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise exits.UsageError(f"{path}: cannot read a gpufleet report: {exc}") from exc
    print(diff.render_diff(diff.diff_reports(docs[0], docs[1])))
    return exits.EXIT_OK
