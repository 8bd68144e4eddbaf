"""`gpufleet rollback`: run playbooks/rollback.yml and say, per host, what it restored.

A host's answer is the result of the rollback module (``ROLLBACK_ACTION``), found by that module, never by the
task's display name.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any

from gpufleet import exits, paths, preflight
from gpufleet.commands import options
from gpufleet.runner import run_playbook
from gpufleet.text import clean

PLAYBOOK = "rollback.yml"
ROLLBACK_ACTION = "gpufleet.tuning.rollback"


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "rollback",
        help="restore what a remediation run changed",
        description="Restore, on each host, the values a remediation run changed (its record under "
        "/var/lib/gpufleet/rollback/<run id>.json).",
        examples="""
  gpufleet rollback -i inventories/prod --run 20261201T141330Z --check   # what would be restored
  gpufleet rollback -i inventories/prod -l gpu01 --check --diff   # each file/setting with a diff
  gpufleet rollback -i inventories/prod -l gpu01     # undo the newest run on gpu01
""",
        exit_codes="0 restored (or nothing to restore), 2 a host failed or has no record of the run, 3 usage error, "
        "130 interrupted",
    )
    options.fleet(parser, policy=False, inventory_required=True)
    parser.add_argument("--run", help="remediation run id (default: the newest on each host)")
    options.check(parser, "what would be restored")
    parser.add_argument(
        "--diff",
        action="store_true",
        help="show each entry (file, sysctl, sysfs, GPU and NIC setting, route) as it is now and as it would be (is) "
        "restored",
    )
    parser.set_defaults(func=run)


def _entry_lines(res: dict[str, Any], check: bool, diff: bool) -> list[str]:
    """The host's restored entries, one line each (``would restore`` in check mode), each followed with ``diff`` by
    the unified diff of its value now and the recorded one when the module gave one."""
    diffs = {d.get("before_header"): d for d in res.get("diff") or [] if isinstance(d, dict)}
    lines = []
    for what in res.get("restored") or []:
        lines.append(f"  {'would restore' if check else 'restored'}: {what}")
        d = diffs.get(what)
        if diff and d:
            before, after = str(d.get("before") or ""), str(d.get("after") or "")
            lines += [
                "    " + line.rstrip("\n")
                for line in difflib.unified_diff(
                    before.splitlines(True), after.splitlines(True), f"{what} (now)", f"{what} (restored)"
                )
            ]
    return lines


def print_hosts(
    hosts: dict[str, Any], run_id: str | None, out=None, check: bool = False, diff: bool = False
) -> tuple[int, list[str]]:
    """Per host (``runner.HostResult``s by name) what the rollback restored (in check mode: would restore), entry
    by entry, or why not: the exit code so far and the hosts without a record of ``run_id``. A host never
    remediated has nothing to restore (exit 0). A host's message is its own words (a module's, a shell's): every
    line goes through text.clean, so an escape sequence or a newline in it stays inside its line."""
    out = out or sys.stdout
    code = exits.EXIT_OK
    unrecorded = []
    for name, host in sorted(hosts.items()):
        res = host.actions.get(ROLLBACK_ACTION) or {}
        if host.status != "ok" and run_id and res.get("missing_record"):
            # The run never changed this host (it was interrupted, limited or failed before it got here).
            unrecorded.append(name)
            line = f"{name}: run {run_id} changed nothing here (no record)"
        elif host.status != "ok":
            code = exits.EXIT_HOSTS
            line = f"{name}: rollback FAILED: {host.message}"
        elif res.get("nothing_to_restore"):
            line = f"{name}: nothing to restore (no remediation run is recorded on this host)"
        else:
            line = (
                f"{name}: run {res.get('run_id')}: {'would restore' if check else 'restored'} "
                f"{len(res.get('restored') or [])}, already as before {len(res.get('unchanged') or [])}"
            )
            line = "\n".join([clean(line)] + [clean(entry) for entry in _entry_lines(res, check, diff)])
            print(line, file=out)
            continue
        print(clean(line), file=out)
    return code, unrecorded


def run(args: argparse.Namespace) -> int:
    paths.import_collection()
    preflight.inventory_hosts(args.inventory, args.limit, {}, None)
    preflight.refuse_local_changes(args.inventory, args.limit, "rollback")
    extravars = {"gpufleet_rollback_run": args.run} if args.run else {}
    result = run_playbook(
        PLAYBOOK,
        args.inventory,
        limit=args.limit,
        check=args.check,
        diff=args.diff,
        extravars=extravars,
        quiet=not args.verbose,
    )
    code, unrecorded = print_hosts(result.hosts, args.run, check=args.check, diff=args.diff)
    if unrecorded and len(unrecorded) == len(result.hosts):
        print(clean(f"gpufleet: no host has a record of run {args.run}: is the run id right?"), file=sys.stderr)
        return exits.EXIT_HOSTS
    return code
