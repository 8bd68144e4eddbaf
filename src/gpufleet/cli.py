"""`gpufleet` command line: audit a fleet through the gpufleet.tuning collection."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufleet import __version__, paths, report, summary

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_HOSTS_FAILED = 3


def _default_inventory() -> str:
    try:
        return str(paths.collection_root() / "inventories" / "local" / "hosts.yml")
    except paths.CollectionNotFound:
        return "inventories/local/hosts.yml"


def cmd_audit(args: argparse.Namespace) -> int:
    from gpufleet.runner import run_playbook

    try:
        report_dir = report.check_report_dir(Path(args.report_dir))
    except report.ReportDirError as exc:
        print(f"gpufleet: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = run_playbook("audit.yml", args.inventory, limit=args.limit, forks=args.forks, quiet=not args.verbose)
    except (FileNotFoundError, paths.CollectionNotFound) as exc:
        print(f"gpufleet: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(summary.render(result.hosts, verbose=args.verbose))
    data = report.build(result.hosts, args.inventory)
    path = report.write_json(data, report_dir)
    print(f"JSON report: {path}")
    if not result.hosts:
        print("gpufleet: no host matched the inventory/limit", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK if all(h.status == "ok" for h in result.hosts.values()) else EXIT_HOSTS_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufleet", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    audit = sub.add_parser("audit", help="read GPU, host and network state of every host (read-only)")
    audit.add_argument(
        "-i", "--inventory", default=_default_inventory(), help="Ansible inventory (default: %(default)s)"
    )
    audit.add_argument("-l", "--limit", help="limit to these hosts/groups (Ansible pattern)")
    audit.add_argument("-f", "--forks", type=int, help="parallel hosts (default: ansible.cfg)")
    audit.add_argument("--report-dir", default="reports", help="where reports are written (default: %(default)s)")
    audit.add_argument("-v", "--verbose", action="store_true", help="show Ansible output and every GPU")
    audit.set_defaults(func=cmd_audit)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
