"""`gpufleet`: audit a fleet of NVIDIA GPU servers through the gpufleet.tuning collection.

Exit codes of `gpufleet audit`: 0 clean, 1 findings at or above --fail-on, 2 hosts unreachable or failed,
3 usage error (bad inventory, policy file or report directory). A higher code wins: 3 > 2 > 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpufleet import __version__, paths

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_HOSTS = 2
EXIT_USAGE = 3

SEVERITIES = ("critical", "high", "medium", "low", "info")
# Inventory variables merged, in this order, over the policy defaults (then --policy).
POLICY_LAYERS = ("gpufleet_policy", "gpufleet_policy_group", "gpufleet_policy_host")
AUDIT_TASK = "Audit GPU, host and network state (one call per host)"
REPORT_TASK = "Write the fleet report on the controller"


class UsageError(Exception):
    pass


def _default_inventory() -> str:
    try:
        return str(paths.collection_root() / "inventories" / "local" / "hosts.yml")
    except paths.CollectionNotFound:
        return "inventories/local/hosts.yml"


def _load_policy_file(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise UsageError(f"--policy {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"--policy {path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"--policy {path}: expected a mapping of policy keys, got {type(data).__name__}")
    return data


def _inventory_hosts(inventory: str, limit: str | None, overrides: dict[str, Any], policy_file: str | None):
    """Hosts the run will touch, with each host's policy validated before anything runs."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as policy_mod
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    if not Path(inventory).exists():
        raise UsageError(f"inventory not found: {inventory}")
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[inventory])
    if limit:
        inv.subset(limit)
    hosts = inv.get_hosts(pattern="all")
    if not hosts:
        raise UsageError(f"no host matches inventory {inventory}" + (f" with --limit {limit}" if limit else ""))
    try:
        policy_mod.validate(overrides, known_rules=rules.BY_ID)
    except policy_mod.PolicyError as exc:
        raise UsageError(f"--policy {policy_file}: {exc}") from exc
    variables = VariableManager(loader=loader, inventory=inv)
    for host in hosts:
        hostvars = variables.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=hostvars)
        merged: dict[str, Any] = {}
        for layer in POLICY_LAYERS:
            try:
                raw = templar.template(hostvars.get(layer) or {})
            except Exception as exc:  # an undefined variable or a template error in the inventory
                raise UsageError(f"{host.name}: {layer}: {exc}") from exc
            if not isinstance(raw, dict):
                raise UsageError(f"{host.name}: {layer} must be a mapping, got {type(raw).__name__}")
            try:
                policy_mod.validate(raw, known_rules=rules.BY_ID)
            except policy_mod.PolicyError as exc:
                raise UsageError(f"{host.name}: {layer}: {exc}") from exc
            merged = policy_mod.merge(merged, raw)
        try:
            policy_mod.validate(policy_mod.merge(merged, overrides), known_rules=rules.BY_ID)
        except policy_mod.PolicyError as exc:
            raise UsageError(f"{host.name}: merged policy: {exc}") from exc
    return [h.name for h in hosts]


class Progress:
    """Hosts done/total and failures so far, on stderr."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total = total
        self.done = 0
        self.failed = 0
        self.stream = stream

    def __call__(self, event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        if data.get("task") != AUDIT_TASK or event.get("event") not in (
            "runner_on_ok",
            "runner_on_failed",
            "runner_on_unreachable",
        ):
            return
        self.done += 1
        res = data.get("res") or {}
        if event["event"] != "runner_on_ok" or res.get("unreachable") or res.get("failed"):
            self.failed += 1
            what = "unreachable" if event["event"] == "runner_on_unreachable" else "FAILED"
        else:
            statuses = [f.get("status") for f in res.get("findings") or []]
            what = f"{statuses.count('fail')} fail, {statuses.count('warn')} warn"
        print(
            f"[{self.done}/{self.total}] {data.get('host')}: {what} (failures so far: {self.failed})",
            file=self.stream,
            flush=True,
        )


def _exit_code(report: dict[str, Any], fail_on: str) -> int:
    hosts = report["summary"]["hosts"]
    if hosts["failed"] or hosts["unreachable"]:
        return EXIT_HOSTS
    if fail_on != "none":
        worst = SEVERITIES.index(fail_on)
        for h in report["hosts"].values():
            for f in h["findings"]:
                if f["status"] == "fail" and SEVERITIES.index(f["severity"]) <= worst:
                    return EXIT_FINDINGS
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import terminal, writer

    from gpufleet.runner import run_playbook

    out = Path(args.out).resolve()
    try:
        writer.check_writable(out)
    except (OSError, ValueError, writer.ReportDirError) as exc:
        raise UsageError(str(exc)) from exc
    overrides = _load_policy_file(args.policy)
    host_names = _inventory_hosts(args.inventory, args.limit, overrides, args.policy)
    extravars = {
        "gpufleet_report_dir": str(out),
        "gpufleet_policy_overrides": overrides,
        "gpufleet_policy_sources": [str(Path(args.policy).resolve())] if args.policy else [],
    }
    print(f"gpufleet: auditing {len(host_names)} host(s) from {args.inventory}", file=sys.stderr)
    result = run_playbook(
        "audit.yml",
        args.inventory,
        limit=args.limit,
        forks=args.forks,
        extravars=extravars,
        quiet=not args.verbose,
        on_event=Progress(len(host_names)),
    )
    report_task = next((h.results[REPORT_TASK] for h in result.hosts.values() if REPORT_TASK in h.results), None)
    if not report_task or "files" not in report_task:
        print(
            f"gpufleet: the run ended without a report (ansible-playbook status {result.status}, rc {result.rc})",
            file=sys.stderr,
        )
        return EXIT_HOSTS
    report = json.loads(Path(report_task["files"]["json"]).read_text())
    print(terminal.render_terminal(report, color=sys.stdout.isatty()))
    for kind, path in sorted(report_task["files"].items()):
        print(f"{kind:>10}: {path}")
    return _exit_code(report, args.fail_on)


def cmd_report_diff(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import diff

    docs = []
    for path in (args.old, args.new):
        try:
            docs.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: cannot read a gpufleet report: {exc}") from exc
    print(diff.render_diff(diff.diff_reports(docs[0], docs[1])))
    return EXIT_OK


def cmd_catalog(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    print(docs.catalog_markdown() if args.markdown else docs.catalog_text())
    return EXIT_OK


def cmd_policy(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    print(docs.policy_markdown())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    audit = sub.add_parser("audit", help="audit every host (read-only) and write reports")
    audit.add_argument(
        "-i", "--inventory", default=_default_inventory(), help="Ansible inventory (default: %(default)s)"
    )
    audit.add_argument("-l", "--limit", help="limit to these hosts/groups (Ansible pattern)")
    audit.add_argument("--policy", help="YAML file with policy overrides, merged last")
    audit.add_argument("--out", default="reports", help="report directory (default: %(default)s)")
    audit.add_argument(
        "--fail-on",
        default="none",
        choices=[*SEVERITIES, "none"],
        help="exit 1 when a finding fails at or above this severity (default: %(default)s)",
    )
    audit.add_argument("-f", "--forks", type=int, help="hosts audited in parallel (default: ansible.cfg)")
    audit.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")
    audit.set_defaults(func=cmd_audit)

    report = sub.add_parser("report", help="work with reports")
    report_sub = report.add_subparsers(dest="report_command", required=True)
    rdiff = report_sub.add_parser("diff", help="fixed, new and unchanged findings per host between two report.json")
    rdiff.add_argument("old")
    rdiff.add_argument("new")
    rdiff.set_defaults(func=cmd_report_diff)

    catalog = sub.add_parser("catalog", help="list the rules")
    catalog.add_argument("--markdown", action="store_true")
    catalog.set_defaults(func=cmd_catalog)

    pol = sub.add_parser("policy", help="list the policy keys with their defaults (Markdown)")
    pol.set_defaults(func=cmd_policy)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, paths.CollectionNotFound, FileNotFoundError) as exc:
        print(f"gpufleet: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
