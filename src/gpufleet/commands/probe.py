"""`gpufleet probe`: run playbooks/probe.yml (read-only) and print, per host, the GPUs, their processes and the
balance findings (HOST-BAL-001..004).

A host's answer is the result of the gpu_probe module (``PROBE_ACTION``), found by that module, never by the task's
display name.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpufleet import exits, paths, preflight
from gpufleet.commands import options
from gpufleet.runner import run_playbook
from gpufleet.text import clean

PLAYBOOK = "probe.yml"
PROBE_ACTION = "gpufleet.tuning.gpu_probe"
MAX_SECONDS = 60


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.5 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be between 0.5 and {MAX_SECONDS}, got {text}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "probe",
        help="sample running GPU jobs against their CPUs, NUMA node and host memory",
        description="Sample each host for a few seconds while its GPU jobs run: GPU utilization (NVML), the "
        "processes holding each GPU with their CPU time, threads, allowed CPUs and the CPUs they ran on, the busy "
        "time of the GPU's local CPUs, host swapping and memory pressure; then judge it with the balance rules "
        "(HOST-BAL-001 input-bound, 002 far NUMA node, 003 pinned to too few CPUs, 004 swapping under a GPU job). "
        "Changes nothing.",
        examples="""
  gpufleet probe -i inventories/prod -l gpu07            # while the job you suspect runs
  gpufleet probe -i inventories/prod -l gpu07 --seconds 15 --fail-on high
""",
    )
    options.fleet(parser, inventory_required=True, verb="sample")
    parser.add_argument(
        "--seconds",
        type=_seconds,
        default=5.0,
        help=f"how long to sample each host, 0.5 to {MAX_SECONDS} (default: %(default)s)",
    )
    options.fail_on(parser)
    parser.set_defaults(func=run)


def _gpu_line(g: dict[str, Any]) -> str:
    if g.get("lost"):
        return f"  GPU {g['index']}: lost ({g.get('error') or 'GpuIsLost'})"
    util = g.get("utilization") or {}
    local = g.get("local_cpus") or "?"
    busy = g.get("local_cpus_busy_pct")
    return (
        f"  GPU {g['index']} {g.get('bus_id') or ''}: {_pct(util.get('gpu_pct'))} busy, memory "
        f"{_pct(util.get('memory_pct'))}; NUMA node {_none(g.get('numa_node'))}, local CPUs {local}"
        f" ({_pct(busy)} busy)"
    )


def _process_line(p: dict[str, Any]) -> str:
    if not p.get("visible"):
        return f"    PID {p['pid']}: {p.get('error') or 'not visible'}"
    ran_on = ",".join(sorted(p.get("last_cpu") or {}, key=int))
    return (
        f"    PID {p['pid']} {p.get('name')}: {p.get('cpu_pct')}% CPU, {p.get('threads')} threads, allowed CPUs "
        f"{p.get('allowed_cpus')}{' (pinned)' if p.get('pinned') else ''} {_pct(p.get('saturation_pct'))} busy, "
        f"ran on {ran_on}, {_none(p.get('used_memory_mib'))} MiB of GPU memory"
    )


def _pct(value: Any) -> str:
    return "?%" if value is None else f"{value}%"


def _none(value: Any) -> str:
    return "?" if value is None else str(value)


def print_host(name: str, res: dict[str, Any], out=None) -> None:
    """One host's sample, GPUs, processes and findings. Every line is host data (process names are whatever a job
    set, 15 bytes, escapes and newlines included): each goes through text.clean, one printed line per line."""
    out = out or sys.stdout

    def say(line: str) -> None:
        print(clean(line), file=out)

    sample = res.get("probe") or {}
    if not sample.get("available"):
        say(f"{name}: GPUs not readable: {sample.get('error')}")
    else:
        mem = sample.get("memory") or {}
        say(
            f"{name}: sampled {sample.get('sample_seconds')} s ({sample.get('reads')} reads); swap in/out "
            f"{_none(mem.get('swap_in_per_s'))}/{_none(mem.get('swap_out_per_s'))} pages/s, memory PSI some avg10 "
            f"{_none(mem.get('psi_some_avg10'))}"
            + ("; /proc did not change (a fixture tree): CPU figures since boot" if sample.get("proc_static") else "")
        )
        procs = {p["pid"]: p for p in sample.get("processes") or []}
        for g in sample.get("gpus") or []:
            say(_gpu_line(g))
            for pid in g.get("processes") or []:
                if pid in procs:
                    say(_process_line(procs[pid]))
    for f in res.get("findings") or []:
        say(f"  {str(f['status']).upper():4} {f['rule']} ({f['severity']}) {f['title']}: {f.get('message')}")


def run(args: argparse.Namespace) -> int:
    paths.import_collection()
    overrides = preflight.load_policy_file(args.policy)
    preflight.inventory_hosts(args.inventory, args.limit, overrides, args.policy)
    extravars: dict[str, Any] = {"gpufleet_probe_seconds": args.seconds}
    if overrides:
        extravars["gpufleet_policy_overrides"] = overrides
    result = run_playbook(PLAYBOOK, args.inventory, limit=args.limit, extravars=extravars, quiet=not args.verbose)
    from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import severity_rank

    code = exits.EXIT_OK
    threshold = None if args.fail_on == "none" else severity_rank(args.fail_on)
    for name, host in sorted(result.hosts.items()):
        res = host.actions.get(PROBE_ACTION) or {}
        if host.status != "ok" or not res:
            code = max(code, exits.EXIT_HOSTS)
            print(clean(f"{name}: probe {host.status.upper()}: {host.message or res.get('msg')}"))
            continue
        print_host(name, res)
        failing = [f for f in res.get("findings") or [] if f["status"] == "fail"]
        if threshold is not None and any(severity_rank(f["severity"]) <= threshold for f in failing):
            code = max(code, exits.EXIT_FINDINGS)
    if result.interrupted:
        return exits.EXIT_INTERRUPTED
    return code
