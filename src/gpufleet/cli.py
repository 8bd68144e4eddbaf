"""`gpufleet`: audit a fleet of NVIDIA GPU servers through the gpufleet.tuning collection.

Exit codes of `gpufleet audit`: 0 clean, 1 findings at or above --fail-on, 2 hosts unreachable, failed or timed
out, 3 usage error (bad inventory, policy file or report directory), 130 interrupted (SIGINT/SIGTERM: a partial
report marked incomplete was written). A higher code wins: 130 > 3 > 2 > 1.
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
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C

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
            if res.get("timedout"):
                what = "timeout"
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
    if any(hosts.get(status) for status in ("failed", "unreachable", "timeout", "interrupted")):
        return EXIT_HOSTS
    if fail_on != "none":
        worst = SEVERITIES.index(fail_on)
        for h in report["hosts"].values():
            for f in h["findings"]:
                if f["status"] == "fail" and SEVERITIES.index(f["severity"]) <= worst:
                    return EXIT_FINDINGS
    return EXIT_OK


def _prepare(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[str]]:
    """Report directory writable, policy file and every host's policy valid: before any host is touched."""
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    try:
        writer.check_writable(out)
    except (OSError, ValueError, writer.ReportDirError) as exc:
        raise UsageError(str(exc)) from exc
    overrides = _load_policy_file(args.policy)
    return overrides, _inventory_hosts(args.inventory, args.limit, overrides, args.policy)


def _partial_report(args: argparse.Namespace, out: Path, result, host_names: list[str], started_at: str) -> dict:
    """Write the report of an interrupted audit from the results that arrived (the playbook never got to write
    one): hosts that answered as they answered, the others ``interrupted``; ``run.complete`` is false."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    results = {}
    for name in host_names:
        host = result.hosts.get(name)
        results[name] = host.results.get(AUDIT_TASK) if host is not None else None
    answered = sum(1 for r in results.values() if r is not None)
    report = fleet.build_report(
        results,
        started_at=started_at,
        inventory=str(Path(args.inventory).resolve()),
        limit=args.limit,
        policy_sources=[str(Path(args.policy).resolve())] if args.policy else [],
        complete=False,
        incomplete_reason=f"interrupted by {result.interrupted} after {answered} of {len(results)} host(s) answered",
    )
    files = writer.write_all(report, out)
    report["_files"] = {k: str(v) for k, v in files.items()}
    return report


def _run_audit(
    args: argparse.Namespace, out: Path, overrides: dict[str, Any], host_names: list[str], label: str = "auditing"
) -> tuple[dict[str, Any] | None, str | None]:
    """Run playbooks/audit.yml. Returns the report it wrote (report.json as a dict, plus its files under
    ``_files``) or None, and the signal that interrupted the run (None if it ran to its end). An interrupted run
    without a report gets a partial one, marked incomplete."""
    from datetime import datetime, timezone

    from gpufleet.runner import run_playbook

    extravars = {
        "gpufleet_report_dir": str(out),
        "gpufleet_policy_overrides": overrides,
        "gpufleet_policy_sources": [str(Path(args.policy).resolve())] if args.policy else [],
    }
    if getattr(args, "host_timeout", None):
        extravars["gpufleet_host_timeout"] = args.host_timeout
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    print(f"gpufleet: {label} {len(host_names)} host(s) from {args.inventory}", file=sys.stderr)
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
        if result.interrupted:
            print(f"gpufleet: interrupted ({result.interrupted}): writing a partial report", file=sys.stderr)
            return _partial_report(args, out, result, host_names, started_at), result.interrupted
        print(
            f"gpufleet: the run ended without a report (ansible-playbook status {result.status}, rc {result.rc})",
            file=sys.stderr,
        )
        return None, None
    report = json.loads(Path(report_task["files"]["json"]).read_text())
    report["_files"] = report_task["files"]
    # Interrupted after the report was written: the audit itself is complete.
    return report, None


def cmd_audit(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    overrides, host_names = _prepare(args, out)
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import terminal

    report, interrupted = _run_audit(args, out, overrides, host_names)
    if report is None:
        return EXIT_HOSTS
    files = report.pop("_files")
    print(terminal.render_terminal(report, color=sys.stdout.isatty()))
    for kind, path in sorted(files.items()):
        print(f"{kind:>10}: {path}")
    if interrupted:
        print(f"gpufleet: interrupted by {interrupted}; the report above is partial", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _exit_code(report, args.fail_on)


def _fixable(finding: dict[str, Any]) -> bool:
    return bool((finding.get("fix") or {}).get("role"))


def remediation_summary(
    before: dict[str, Any],
    after: dict[str, Any] | None,
    changes: dict[str, list[str]],
    reboot: dict[str, bool],
    check: bool,
    overrides: dict[str, list[dict[str, Any]]] | None = None,
    blocked: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Per host: fixed, remaining (auto-fixable or manual), new findings, what changed, reboot needed, and the role
    variables that took the place of a policy value (the fix then follows the variable, not what the audit judged)."""
    hosts = {}
    for name, host in sorted(before["hosts"].items()):
        was = {f["rule"]: f for f in host["findings"] if f["status"] in ("fail", "warn")}
        now_host = (after or before)["hosts"].get(name, {"findings": [], "status": "failed"})
        now = {f["rule"]: f for f in now_host["findings"] if f["status"] in ("fail", "warn")}
        entry = {
            "status_before": host["status"],
            "status_after": now_host.get("status") if after is not None or check else None,
            "changed_tasks": changes.get(name, []),
            "reboot_required": bool(reboot.get(name)),
            "role_overrides": list((overrides or {}).get(name) or []),
            # Changes a role refused to make now (e.g. a driver upgrade under busy GPUs), with the blocker named.
            "blocked": list((blocked or {}).get(name) or []),
        }
        if check:
            entry["would_fix"] = sorted(r for r, f in was.items() if _fixable(f))
            entry["manual"] = sorted(r for r, f in was.items() if not _fixable(f))
        elif after is None or now_host.get("status") != "ok":
            # Not audited afterwards (interrupted, or the host failed the second audit): nothing is known.
            entry.update(fixed=None, remaining_auto=None, remaining_manual=None, new=None)
        else:
            entry["fixed"] = sorted(set(was) - set(now))
            entry["remaining_auto"] = sorted(r for r, f in now.items() if _fixable(f))
            entry["remaining_manual"] = sorted(r for r, f in now.items() if not _fixable(f))
            entry["new"] = sorted(set(now) - set(was))
        hosts[name] = entry
    return {
        "check": check,
        "before": before["run"]["id"],
        "after": after["run"]["id"] if after else None,
        "hosts": hosts,
    }


def _render_overrides(name: str, h: dict[str, Any]) -> list[str]:
    return [
        f"{name}: role variable {o.get('variable')}={o.get('value')!r} used instead of policy "
        f"{o.get('policy_key')}={o.get('policy_value')!r}"
        for o in h.get("role_overrides") or []
    ]


def render_remediation(summary: dict[str, Any]) -> str:
    lines = []
    for name, h in summary["hosts"].items():
        lines.extend(_render_overrides(name, h))
        lines.extend(f"{name}: refused: {message}" for message in h.get("blocked") or [])
        if summary["check"]:
            lines.append(
                f"{name}: would fix {', '.join(h['would_fix']) or 'nothing'}; "
                f"{len(h['changed_tasks'])} task(s) would change"
                + (f"; manual: {', '.join(h['manual'])}" if h["manual"] else "")
            )
            continue
        if h["fixed"] is None:
            lines.append(
                f"{name}: not audited afterwards; {len(h['changed_tasks'])} task(s) changed something"
                + ("; reboot required" if h["reboot_required"] else "")
            )
            continue
        parts = [f"fixed {', '.join(h['fixed']) or 'nothing'}"]
        if h["remaining_auto"]:
            parts.append(f"still failing (auto-fixable): {', '.join(h['remaining_auto'])}")
        if h["remaining_manual"]:
            parts.append(f"needs a person: {', '.join(h['remaining_manual'])}")
        if h["new"]:
            parts.append(f"NEW: {', '.join(h['new'])}")
        if h["reboot_required"]:
            parts.append("reboot required")
        lines.append(f"{name}: " + "; ".join(parts))
    return "\n".join(lines)


def cmd_remediate(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from gpufleet.runner import run_playbook

    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out).resolve() / f"remediation-{run_id}"
    overrides, host_names = _prepare(args, out)
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    def stopped(stage: str, signame: str, summary: dict[str, Any]) -> int:
        """An interrupted remediation: remediation.json says where it stopped; nothing more runs."""
        summary.update(run_id=run_id, complete=False, interrupted={"signal": signame, "stage": stage})
        path = writer.write_atomic(out / "remediation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        if summary.get("hosts"):
            print(render_remediation(summary))
        print(f"gpufleet: interrupted by {signame} during {stage}; partial report: {path}", file=sys.stderr)
        if stage != "audit-before":
            print(f"undo what changed: gpufleet rollback --run {run_id} -i {args.inventory}", file=sys.stderr)
        return EXIT_INTERRUPTED

    before, interrupted = _run_audit(args, out / "before", overrides, host_names, "auditing (before)")
    if interrupted:
        return stopped("audit-before", interrupted, {"check": args.check, "before": None, "after": None, "hosts": {}})
    if before is None:
        return EXIT_HOSTS
    before.pop("_files")
    changes: dict[str, list[str]] = {}
    reboot: dict[str, bool] = {}
    role_overrides: dict[str, list[dict[str, Any]]] = {}
    blocked: dict[str, list[str]] = {}

    def on_event(event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        if event.get("event") == "runner_on_ok" and data.get("host"):
            if res.get("changed"):
                changes.setdefault(data["host"], []).append(data.get("task", ""))
            facts = res.get("ansible_facts") or {}
            if "gpufleet_reboot_required" in facts:
                reboot[data["host"]] = bool(facts["gpufleet_reboot_required"])
            if isinstance(facts.get("gpufleet_role_overrides"), list):
                role_overrides[data["host"]] = facts["gpufleet_role_overrides"]
            if isinstance(facts.get("gpufleet_blocked"), list):
                blocked[data["host"]] = [str(m) for m in facts["gpufleet_blocked"]]

    lock_vars = {"gpufleet_lock_timeout": args.lock_timeout} if args.lock_timeout is not None else {}
    print(f"gpufleet: remediating{' (check mode)' if args.check else ''}, run {run_id}", file=sys.stderr)
    result = run_playbook(
        "remediate.yml",
        args.inventory,
        limit=args.limit,
        forks=args.forks,
        tags=args.tags,
        check=args.check,
        diff=args.diff,
        quiet=not (args.verbose or args.diff),
        on_event=on_event,
        extravars={"gpufleet_run_id": run_id, "gpufleet_policy_overrides": overrides, **lock_vars},
    )
    failed = {n: h.message for n, h in result.hosts.items() if h.status != "ok"}
    if result.interrupted:
        summary = remediation_summary(before, None, changes, reboot, args.check, role_overrides, blocked)
        summary["failed"] = failed
        return stopped("remediate", result.interrupted, summary)
    after = None
    if not args.check:
        after, interrupted = _run_audit(args, out / "after", overrides, host_names, "auditing (after)")
        if after is not None:
            after.pop("_files")
        if interrupted:
            summary = remediation_summary(before, after, changes, reboot, args.check, role_overrides, blocked)
            summary["failed"] = failed
            return stopped("audit-after", interrupted, summary)
    summary = remediation_summary(before, after, changes, reboot, args.check, role_overrides, blocked)
    summary["run_id"] = run_id
    summary["failed"] = failed
    summary["complete"] = True
    summary["interrupted"] = None

    path = writer.write_atomic(out / "remediation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print(render_remediation(summary))
    for name, message in sorted(failed.items()):
        print(f"{name}: remediation FAILED: {message}")
    print(f"before/after report: {path}  (undo: gpufleet rollback --run {run_id} -i {args.inventory})")
    if failed or after is None and not args.check:
        return EXIT_HOSTS
    return _exit_code(after, args.fail_on) if after else EXIT_OK


def cmd_rollback(args: argparse.Namespace) -> int:
    from gpufleet.runner import run_playbook

    paths.import_collection()
    _inventory_hosts(args.inventory, args.limit, {}, None)
    extravars = {"gpufleet_rollback_run": args.run} if args.run else {}
    result = run_playbook(
        "rollback.yml", args.inventory, limit=args.limit, check=args.check, extravars=extravars, quiet=not args.verbose
    )
    code = EXIT_OK
    unrecorded = []
    for name, host in sorted(result.hosts.items()):
        res = host.results.get("Restore the values recorded before the run") or {}
        if host.status != "ok" and args.run and res.get("missing_record"):
            # The run never changed this host (it was interrupted, limited or failed before it got here).
            unrecorded.append(name)
            print(f"{name}: run {args.run} changed nothing here (no record)")
        elif host.status != "ok":
            code = EXIT_HOSTS
            print(f"{name}: rollback FAILED: {host.message}")
        else:
            print(
                f"{name}: run {res.get('run_id')}: restored {len(res.get('restored') or [])}, "
                f"already as before {len(res.get('unchanged') or [])}"
            )
    if unrecorded and len(unrecorded) == len(result.hosts):
        print(f"gpufleet: no host has a record of run {args.run}: is the run id right?", file=sys.stderr)
        return EXIT_HOSTS
    return code


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


def _fleet_args(parser: argparse.ArgumentParser, policy: bool = True, inventory_required: bool = False) -> None:
    """Options every command that runs against an inventory takes.

    Commands that change hosts (remediate, rollback) take no default inventory: a bare command must never tune the
    machine it runs on.
    """
    if inventory_required:
        parser.add_argument(
            "-i",
            "--inventory",
            required=True,
            help="Ansible inventory of the hosts to change (required: there is no default, so a bare command never "
            "tunes the machine it runs on)",
        )
    else:
        parser.add_argument(
            "-i", "--inventory", default=_default_inventory(), help="Ansible inventory (default: %(default)s)"
        )
    parser.add_argument("-l", "--limit", help="limit to these hosts/groups (Ansible pattern)")
    if policy:
        parser.add_argument("--policy", help="YAML file with policy overrides, merged last")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 second, got {value}")
    return value


def _host_timeout_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="a host that has not answered the audit after this long is reported as 'timeout' "
        "(default: gpufleet_host_timeout, 120)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    audit = sub.add_parser("audit", help="audit every host (read-only) and write reports")
    _fleet_args(audit)
    audit.add_argument("--out", default="reports", help="report directory (default: %(default)s)")
    audit.add_argument(
        "--fail-on",
        default="none",
        choices=[*SEVERITIES, "none"],
        help="exit 1 when a finding fails at or above this severity (default: %(default)s)",
    )
    audit.add_argument("-f", "--forks", type=int, help="hosts audited in parallel (default: ansible.cfg)")
    _host_timeout_arg(audit)
    audit.set_defaults(func=cmd_audit)

    rem = sub.add_parser("remediate", help="fix findings (roles by area and rule-id tags), audit before and after")
    _fleet_args(rem, inventory_required=True)
    rem.add_argument("--tags", help="areas (memory,cpu,network,power,gpu,host) or rule ids (GPU-PWR-001,...)")
    rem.add_argument("--check", action="store_true", help="change nothing; say what would change")
    rem.add_argument("--diff", action="store_true", help="show the changes (with --check: the changes it would make)")
    rem.add_argument("--out", default="reports", help="report directory (default: %(default)s)")
    rem.add_argument(
        "--fail-on",
        default="none",
        choices=[*SEVERITIES, "none"],
        help="exit 1 when a finding still fails at or above this severity afterwards",
    )
    rem.add_argument("-f", "--forks", type=int, help="hosts changed in parallel")
    _host_timeout_arg(rem)
    rem.add_argument(
        "--lock-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="wait this long for another remediation of the same host to finish (default: gpufleet_lock_timeout, 300)",
    )
    rem.set_defaults(func=cmd_remediate)

    rb = sub.add_parser("rollback", help="restore what a remediation run changed")
    _fleet_args(rb, policy=False, inventory_required=True)
    rb.add_argument("--run", help="remediation run id (default: the newest on each host)")
    rb.add_argument("--check", action="store_true", help="change nothing; say what would be restored")
    rb.set_defaults(func=cmd_rollback)

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
    except KeyboardInterrupt:  # outside a playbook run (those stop gracefully and write a partial report)
        print("gpufleet: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
