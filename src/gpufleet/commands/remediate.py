"""`gpufleet remediate`: audit (before), run playbooks/remediate.yml, audit (after), write remediation.json.

What counts as fixed, new or unverified is report/diff's judgement (``diff_host``), the same as `gpufleet report
diff`: a finding is fixed only when its rule passed in the audit afterwards; one skipped, errored or missing then is
unverified.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpufleet import exits, preflight
from gpufleet.commands import options
from gpufleet.commands.audit import run_audit
from gpufleet.runner import run_playbook

PLAYBOOK = "remediate.yml"


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "remediate",
        help="fix findings (roles by area and rule-id tags), audit before and after",
        description="Audit, run the remediation roles (playbooks/remediate.yml), audit again, and say per host what "
        "was fixed, what still fails and why. Every change is recorded for `gpufleet rollback`.",
        examples="""
  gpufleet remediate -i inventories/prod --check --diff     # what would change, changing nothing
  gpufleet remediate -i inventories/prod -l gpu01 --tags memory,HOST-CPU-001
  gpufleet remediate -i inventories/prod --fail-on high     # exit 1 when high findings still fail afterwards
""",
    )
    options.fleet(parser, inventory_required=True)
    parser.add_argument("--tags", help="areas (memory,cpu,network,power,gpu,host) or rule ids (GPU-PWR-001,...)")
    options.check(parser, "what would change")
    parser.add_argument(
        "--diff", action="store_true", help="show the changes (with --check: the changes it would make)"
    )
    options.out(parser)
    options.fail_on(parser, afterwards=True)
    options.forks(parser)
    options.host_timeout(parser)
    parser.add_argument(
        "--lock-timeout",
        type=options.seconds,
        metavar="SECONDS",
        help="wait this long for another remediation of the same host to finish (default: gpufleet_lock_timeout, 300)",
    )
    parser.set_defaults(func=run)


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
    """Per host: fixed (passed afterwards), unverified (a finding before, neither passing nor failing afterwards:
    skipped, errored, not run), remaining (auto-fixable or manual), new findings, what changed, reboot needed, and
    the role variables that took the place of a policy value (the fix then follows the variable, not what the audit
    judged). The collection must be importable (``paths.import_collection``)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import diff, schema

    hosts = {}
    for name, host in sorted(before["hosts"].items()):
        was = {f["rule"]: f for f in schema.host_findings(host) if schema.is_finding(f)}
        now_host = (after or before)["hosts"].get(name, {"findings": [], "status": "failed"})
        now = {f["rule"]: f for f in schema.host_findings(now_host) if schema.is_finding(f)}
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
            entry.update(fixed=None, unverified=None, remaining_auto=None, remaining_manual=None, new=None)
        else:
            judged = diff.diff_host(host, now_host)
            entry["fixed"] = judged["fixed"]
            entry["unverified"] = judged["unverified"]
            entry["remaining_auto"] = sorted(r for r, f in now.items() if _fixable(f))
            entry["remaining_manual"] = sorted(r for r, f in now.items() if not _fixable(f))
            entry["new"] = judged["new"]
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
        if h.get("unverified"):
            parts.append(f"unverified (skipped, errored or not run afterwards): {', '.join(h['unverified'])}")
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


def run(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out).resolve() / f"remediation-{run_id}"
    overrides, host_names = preflight.prepare(args, out)
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    def stopped(stage: str, signame: str, summary: dict[str, Any]) -> int:
        """An interrupted remediation: remediation.json says where it stopped; nothing more runs."""
        summary.update(run_id=run_id, complete=False, interrupted={"signal": signame, "stage": stage})
        path = writer.write_atomic(out / "remediation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        if summary.get("hosts"):
            print(render_remediation(summary))
        print(f"gpufleet: interrupted by {signame} during {stage}; partial report: {path}", file=sys.stderr)
        if stage != "audit-before":
            undo = f"gpufleet rollback --run {run_id} {options.as_options(args.inventory)}"
            print(f"undo what changed: {undo}", file=sys.stderr)
        return exits.EXIT_INTERRUPTED

    before, interrupted = run_audit(args, out / "before", overrides, host_names, "auditing (before)")
    if interrupted:
        return stopped("audit-before", interrupted, {"check": args.check, "before": None, "after": None, "hosts": {}})
    if before is None:
        return exits.EXIT_HOSTS
    before.pop("_files")
    changes: dict[str, list[str]] = {}
    reboot: dict[str, bool] = {}
    role_overrides: dict[str, list[dict[str, Any]]] = {}
    blocked: dict[str, list[str]] = {}

    def on_event(event: dict[str, Any]) -> None:
        # Changed tasks are listed by their display name (for a person to read); everything the summary decides on
        # comes from the facts the playbook sets.
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
        PLAYBOOK,
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
        after, interrupted = run_audit(args, out / "after", overrides, host_names, "auditing (after)")
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
    print(f"before/after report: {path}  (undo: gpufleet rollback --run {run_id} {options.as_options(args.inventory)})")
    if failed or after is None and not args.check:
        return exits.EXIT_HOSTS
    return options.exit_with_reason(after, args.fail_on, "afterwards") if after else exits.EXIT_OK
