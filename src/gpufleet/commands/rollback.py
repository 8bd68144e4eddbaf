"""`gpufleet rollback`: run playbooks/rollback.yml and say, per host, what it restored.

A host's answer is the result of the rollback module (``ROLLBACK_ACTION``), found by that module, never by the
task's display name.
"""

from __future__ import annotations

import argparse
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
  gpufleet rollback -i inventories/prod -l gpu01     # undo the newest run on gpu01
""",
        exit_codes="0 restored (or nothing to restore), 2 a host failed or has no record of the run, 3 usage error, "
        "130 interrupted",
    )
    options.fleet(parser, policy=False, inventory_required=True)
    parser.add_argument("--run", help="remediation run id (default: the newest on each host)")
    options.check(parser, "what would be restored")
    parser.set_defaults(func=run)


def print_hosts(hosts: dict[str, Any], run_id: str | None, out=None) -> tuple[int, list[str]]:
    """Per host (``runner.HostResult``s by name) what the rollback restored, or why not: the exit code so far and
    the hosts without a record of ``run_id``. A host's message is its own words (a module's, a shell's): every
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
        else:
            line = (
                f"{name}: run {res.get('run_id')}: restored {len(res.get('restored') or [])}, "
                f"already as before {len(res.get('unchanged') or [])}"
            )
        print(clean(line), file=out)
    return code, unrecorded


def run(args: argparse.Namespace) -> int:
    paths.import_collection()
    preflight.inventory_hosts(args.inventory, args.limit, {}, None)
    preflight.refuse_local_changes(args.inventory, args.limit, "rollback")
    extravars = {"gpufleet_rollback_run": args.run} if args.run else {}
    result = run_playbook(
        PLAYBOOK, args.inventory, limit=args.limit, check=args.check, extravars=extravars, quiet=not args.verbose
    )
    code, unrecorded = print_hosts(result.hosts, args.run)
    if unrecorded and len(unrecorded) == len(result.hosts):
        print(clean(f"gpufleet: no host has a record of run {args.run}: is the run id right?"), file=sys.stderr)
        return exits.EXIT_HOSTS
    return code
