"""`gpufleet audit`: run playbooks/audit.yml (read-only), show progress, print the report, exit by --fail-on.

Results are found by the module that produced them (``AUDIT_ACTION``, ``REPORT_ACTION``), never by a task's
display name: renaming a task in the playbook changes nothing here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpufleet import exits, preflight
from gpufleet.commands import options
from gpufleet.runner import TASK_RESULT_EVENTS, action_of, run_playbook
from gpufleet.text import clean

PLAYBOOK = "audit.yml"
AUDIT_ACTION = "gpufleet.tuning.audit"  # one call per host: its result is the host's findings
REPORT_ACTION = "gpufleet.tuning.audit_report"  # run once on the controller: its result names the report files


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "audit",
        help="audit every host (read-only) and write reports",
        description="Audit every host of the inventory against the rule catalog and the policy, changing nothing. "
        "Writes report.json, report.html, JUnit XML and Prometheus metrics under --out/<run> and prints a summary. "
        "--out/latest moves to the run only when it audited the whole inventory to the end (no --limit, not "
        "interrupted); any other run is --out/last-partial.",
        examples="""
  gpufleet audit                                         # this machine (inventories/local)
  gpufleet audit -i inventories/prod -i inventories/lab -l gpu_a100 --policy site-policy.yml
  gpufleet audit -i inventories/prod --fail-on high   # exit 1 if a high or critical finding fails
  gpufleet audit -i inventories/prod --json | jq '.summary.hosts'
""",
    )
    options.fleet(parser)
    options.out(parser)
    options.fail_on(parser)
    options.output(parser)
    options.forks(parser)
    options.host_timeout(parser)
    parser.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="REGION=ssh://USER@NODE[:PORT]",
        help="audit the hosts of inventory group REGION from the execution node NODE inside that region, on "
        "ansible-runner's streaming workers (transmit -> `ansible-runner worker` over SSH -> process); repeat per "
        "region. Also the inventory variable gpufleet_worker (per group). NODE needs playbooks/execution_node.yml",
    )
    parser.add_argument(
        "--worker-ssh-args",
        default="",
        metavar="ARGS",
        help="extra ssh(1) options for the execution nodes, with '=' (--worker-ssh-args='-i KEY -p 22')",
    )
    parser.set_defaults(func=run)


class Progress:
    """Hosts done/total and failed hosts so far (unreachable, failed or timed out), on stderr (or ``stream``), from
    the audit module's events. A stream that stops taking lines (a closed pipe) ends the progress, not the audit."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.done = 0
        self.failed = 0
        self.stream = stream

    def __call__(self, event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        if action_of(data) != AUDIT_ACTION or event.get("event") not in TASK_RESULT_EVENTS:
            return
        self.done += 1
        res = data.get("res") or {}
        if event["event"] != "runner_on_ok" or res.get("unreachable") or res.get("failed"):
            self.failed += 1
            what = "unreachable" if event["event"] == "runner_on_unreachable" else "FAILED"
            if res.get("timedout"):
                what = "timeout"
        else:
            fails, warns = counts(res)
            what = f"{fails} fail, {warns} warn"
        line = f"[{self.done}/{self.total}] {data.get('host')}: {what} (failed hosts so far: {self.failed})"
        if self.stream is not False:
            try:
                print(clean(line), file=self.stream or sys.stderr, flush=True)  # the host's name as it came
            except (BrokenPipeError, ValueError):  # stderr's reader went away (or was closed): carry on quietly
                self.stream = False


def counts(res: dict[str, Any]) -> tuple[int, int]:
    """Failing and warning findings of a host's audit result, full (``findings``) or compact (its ``summary``)."""
    if "findings" in res:
        statuses = [f.get("status") for f in res.get("findings") or [] if isinstance(f, dict)]
        return statuses.count("fail"), statuses.count("warn")
    summary = res.get("summary")
    by_status = summary.get("by_status") if isinstance(summary, dict) else None
    by_status = by_status if isinstance(by_status, dict) else {}
    fails, warns = (by_status.get(key) for key in ("fail", "warn"))
    return tuple(n if isinstance(n, int) and not isinstance(n, bool) else 0 for n in (fails, warns))


def partial_report(
    args: argparse.Namespace, out: Path, result, host_names: list[str], started_at: str, overrides: dict | None = None
) -> dict:
    """Write the report of an interrupted audit from the results that arrived (the playbook never got to write
    one): hosts that answered as they answered, the others ``interrupted`` under their site from the inventory's
    policy layers (and ``overrides``, the --policy layer); ``run.complete`` is false."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    results = {}
    for name in host_names:
        host = result.hosts.get(name)
        results[name] = host.actions.get(AUDIT_ACTION) if host is not None else None
    answered = sum(1 for r in results.values() if r is not None)
    unanswered = [name for name, r in results.items() if r is None]
    sites = {}
    if unanswered:
        layers = preflight.host_variables(args.inventory, args.limit, list(policy.LAYERS))
        sites = {name: fleet.host_site(layers.get(name, {}), overrides) for name in unanswered}
    report = fleet.build_report(
        results,
        started_at=started_at,
        inventory=", ".join(str(Path(i).resolve()) for i in args.inventory),
        limit=args.limit,
        policy_sources=[str(Path(args.policy).resolve())] if args.policy else [],
        complete=False,
        incomplete_reason=f"interrupted by {result.interrupted} after {answered} of {len(results)} host(s) answered",
        sites=sites,
    )
    files = writer.write_all(report, out)
    report["_files"] = {k: str(v) for k, v in files.items()}
    return report


def link_note(report: dict[str, Any], out: Path) -> str:
    """Which link of the report directory this run moved, and why: ``latest`` only for the fleet's complete view
    (writer.full_view), else ``last-partial``, ``latest`` staying on the last complete run."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    full, why = writer.full_view(report)
    if full:
        return f"gpufleet: {out / writer.LATEST} now points at this run ({why})"
    kept = out / writer.LATEST
    where = f"stays on {kept.resolve().name}" if kept.is_symlink() else "not created (no complete run yet)"
    return clean(
        f"gpufleet: {out / writer.LAST_PARTIAL} now points at this run; {kept} {where}: {why} "
        "(latest moves only for a finished run of the whole inventory)"
    )


def _audit_extravars(args: argparse.Namespace, overrides: dict) -> dict:
    """The audit playbook's variables from the command line: policy overrides and their sources, the per-host
    timeout. The CLI exits by the audit's verdict itself (--fail-on, exit codes): the playbook does not fail the run."""
    extravars = {
        "gpufleet_policy_overrides": overrides,
        "gpufleet_policy_sources": [str(Path(args.policy).resolve())] if args.policy else [],
        "gpufleet_fail_run": False,
    }
    if getattr(args, "host_timeout", None):
        extravars["gpufleet_host_timeout"] = args.host_timeout
    return extravars


def run_audit(
    args: argparse.Namespace,
    out: Path,
    overrides: dict[str, Any],
    host_names: list[str],
    label: str = "auditing",
    playbook: str = PLAYBOOK,
) -> tuple[dict[str, Any] | None, str | None]:
    """Run the audit playbook. Returns the report it wrote (report.json as a dict, plus its files under
    ``_files``) or None, and the signal that interrupted the run (None if it ran to its end). An interrupted run
    without a report gets a partial one, marked incomplete."""
    from datetime import datetime, timezone

    extravars = {"gpufleet_report_dir": str(out), **_audit_extravars(args, overrides)}
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if not getattr(args, "quiet", False):
        print(f"gpufleet: {label} {len(host_names)} host(s) from {options.shown(args.inventory)}", file=sys.stderr)
    result = run_playbook(
        playbook,
        args.inventory,
        limit=args.limit,
        forks=args.forks,
        extravars=extravars,
        quiet=not args.verbose,
        on_event=Progress(len(host_names), stream=False if getattr(args, "quiet", False) else None),
    )
    written = next((h.actions[REPORT_ACTION] for h in result.hosts.values() if REPORT_ACTION in h.actions), None)
    if not written or "files" not in written:
        if result.interrupted:
            print(f"gpufleet: interrupted ({result.interrupted}): writing a partial report", file=sys.stderr)
            return partial_report(args, out, result, host_names, started_at, overrides), result.interrupted
        print(
            f"gpufleet: the run ended without a report (ansible-playbook status {result.status}, rc {result.rc})",
            file=sys.stderr,
        )
        return None, None
    report = json.loads(Path(written["files"]["json"]).read_text())
    report["_files"] = written["files"]
    # Interrupted after the report was written: the audit itself is complete.
    return report, None


def print_workers(runs, out=None) -> None:
    """How each worker's part went (``workers.WorkerRun``s), one line each. A worker's error is what its execution
    node or ssh said (the node's stderr, a traceback's last line): cleaned, so it cannot take over the terminal."""
    for run in runs:
        said = f": {run.error}" if run.error else ""
        line = f"gpufleet: worker {run.worker.region}: {run.status} in {run.wall_s:.1f} s{said}"
        print(clean(line), file=out or sys.stderr)


def run_with_workers(
    args: argparse.Namespace, out: Path, overrides: dict[str, Any], plan, host_names: list[str]
) -> tuple[dict[str, Any], str | None]:
    """The audit with regions run by their execution nodes (gpufleet.workers) and the other hosts direct: one
    report from every part's results (the same report builder as the playbook's), each host with its ``via``."""
    import shlex
    from datetime import datetime, timezone

    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    from gpufleet import workers

    extravars = _audit_extravars(args, overrides)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    regions = ", ".join(f"{w.region} ({len(n)} via {w.url})" for w, n in plan.by_worker.items())
    print(
        f"gpufleet: auditing {len(host_names)} host(s) from {options.shown(args.inventory)}: {regions}"
        + (f", {len(plan.direct)} direct" if plan.direct else ""),
        file=sys.stderr,
    )
    # a worker still streaming after every host's timeout (and the node's own start-up) is given up
    timeout_s = 4 * (getattr(args, "host_timeout", None) or 120) + 120
    outcome = workers.run_all(
        plan,
        list(args.inventory),
        PLAYBOOK,
        AUDIT_ACTION,
        extravars,
        forks=args.forks,
        ssh_args=shlex.split(args.worker_ssh_args or ""),
        on_event=Progress(len(host_names), stream=False if getattr(args, "quiet", False) else None),
        quiet=not args.verbose,
        timeout_s=timeout_s,
    )
    print_workers(outcome.workers)
    # a host without an audit result keeps its site: its inventory's policy layers, then --policy (the overrides)
    sites = {name: fleet.host_site(plan.hostvars.get(name, {}), overrides) for name in host_names}
    interrupted = outcome.interrupted
    report = fleet.build_report(
        outcome.results,
        started_at=started_at,
        inventory=", ".join(str(Path(i).resolve()) for i in args.inventory),
        limit=args.limit,
        policy_sources=extravars["gpufleet_policy_sources"],
        complete=not interrupted,
        incomplete_reason=f"interrupted by {interrupted}" if interrupted else None,
        sites=sites,
    )
    for name, host in report["hosts"].items():
        host["via"] = outcome.via.get(name, workers.DIRECT)
    report["run"]["workers"] = [
        {
            "region": r.worker.region,
            "url": r.worker.url,
            "hosts": len(plan.by_worker[r.worker]),
            "status": r.status,
            "error": r.error,
            "wall_s": round(r.wall_s, 2),
        }
        for r in outcome.workers
    ]
    files = writer.write_all(report, out)
    report["_files"] = {k: str(v) for k, v in files.items()}
    return report, interrupted


def show(report: dict[str, Any], files: dict[str, str], args: argparse.Namespace, out: Path) -> None:
    """Print a finished run: the terminal report (fitting $COLUMNS or the terminal), the report's files and which
    link moved; with --quiet only the totals; with --json the report itself on stdout (the rest on stderr)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import terminal

    color = options.use_color(sys.stdout)
    if getattr(args, "json", False):
        print(json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False))
    elif getattr(args, "quiet", False):
        print(terminal.render_summary(report, color=color, width=options.width(sys.stdout)), end="")
        return
    else:
        print(terminal.render_terminal(report, color=color, width=options.width(sys.stdout)))
    for kind, path in sorted(files.items()):
        print(f"{kind:>10}: {path}", file=sys.stderr if getattr(args, "json", False) else sys.stdout)
    print(link_note(report, out), file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    overrides, host_names = preflight.prepare(args, out)
    from gpufleet import workers

    worker_options = getattr(args, "worker", None) or []
    plan = None
    if worker_options or workers.mentions_worker(list(args.inventory)):
        plan = workers.plan(list(args.inventory), host_names, worker_options)
    if plan is not None and plan.by_worker:
        report, interrupted = run_with_workers(args, out, overrides, plan, host_names)
    else:
        report, interrupted = run_audit(args, out, overrides, host_names)
    if report is None:
        return exits.EXIT_HOSTS
    show(report, report.pop("_files"), args, out)
    if interrupted:
        print(f"gpufleet: interrupted by {interrupted}; the report above is partial", file=sys.stderr)
        return exits.EXIT_INTERRUPTED
    return options.exit_with_reason(report, args.fail_on)
