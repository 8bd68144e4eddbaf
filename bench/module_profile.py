#!/usr/bin/env python3
"""Benchmark: the audit module's own time on one host, by phase (issue 27 §4, the host side).

Runs ``plugins/modules/audit.py`` directly (no Ansible around it: what a target spends once the module has arrived)
on simulated hosts: the reference hosts of tests/sim/reference.py (or the demo fleet's, ``--fleet demo``), with the
audit's sample window as given (``--samples``, default 0 and 1 s: the module's default is 1 s), alternated with
ansible-core's ping module as the floor. Per run: wall and CPU from wait4(). Then one more run per host and sample in
which a timeline is taken inside the process: when each phase started and ended after the interpreter's start
(imports of ansible.module_utils.basic and of the audit's module_utils; argument parsing; the GPU, host and network
readers and their sample windows; topology; links; rules; the JSON written by exit_json), so what runs inside the
sample window and what after it can be read off.

    .venv/bin/python bench/module_profile.py
    .venv/bin/python bench/module_profile.py --hosts dgx-h100 --samples 1 --runs 9
    .venv/bin/python bench/module_profile.py --fleet demo --shape full

Results: bench/results/module_profile-<date>.json. Hosts are built under build/bench/module_profile/ (git-ignored).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import audit_scale as scale
from benchlib.tables import markdown_table

REPO = scale.REPO
sys.path.insert(0, str(REPO / "tests" / "sim"))

# The timeline: this runs in the module's own process (python -c), wrapping the phases with wall-clock timers
# (time.monotonic relative to the process's start, from /proc/self/stat) and writing them as JSON to $PROFILE_OUT
# at exit. exit_json's own JSON is written to /dev/null.
TIMELINE = r"""
import atexit, functools, json, os, sys, threading, time
T0 = time.monotonic()
with open("/proc/self/stat") as f:
    _start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
with open("/proc/uptime") as f:
    _uptime = float(f.read().split()[0])
# seconds since the process started (the interpreter's own start-up included), approximately: /proc/uptime has
# 10 ms resolution; the offset is taken once
OFFSET = _uptime - _start_ticks / os.sysconf("SC_CLK_TCK") - (time.monotonic() - T0)
EVENTS = []

def now():
    return round(time.monotonic() - T0 + OFFSET, 4)

def phase(label, start, end):
    EVENTS.append({"phase": label, "start": start, "end": end, "thread": threading.current_thread().name})

def timed(owner, name, label):
    orig = getattr(owner, name)
    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        start = now()
        try:
            return orig(*args, **kwargs)
        finally:
            phase(label, start, now())
    setattr(owner, name, wrapper)

def dump():
    EVENTS.append({"phase": "end", "start": now(), "end": now(), "thread": "MainThread"})
    with open(os.environ["PROFILE_OUT"], "w") as f:
        json.dump(EVENTS, f)

atexit.register(dump)
s = now(); phase("interpreter start-up", 0.0, s)
import ansible.module_utils.basic as basic
e = now(); phase("import ansible.module_utils.basic", s, e)
from ansible_collections.gpufleet.tuning.plugins.module_utils import (
    audit_core, gpu, host, links, nic, rules, topology)
from ansible_collections.gpufleet.tuning.plugins.modules import audit
phase("import the audit's module_utils", e, now())
timed(basic.AnsibleModule, "__init__", "argument spec and parameters")
timed(gpu, "read", "GPU readers (NVML, with their counter sample)")
timed(nic, "collect", "NIC readers (ethtool, with their counter sample)")
timed(host, "collect", "host readers (with the swap-rate sample)")
timed(topology, "collect", "topology")
timed(links, "resolve", "links")
timed(rules, "evaluate", "rules")
timed(audit_core, "module_result", "result shaped")
timed(basic.AnsibleModule, "exit_json", "exit_json (JSON out)")
sys.argv = ["audit.py", os.environ["PROFILE_ARGS"]]
sys.stdout = open(os.devnull, "w")
audit.main()
"""


def build_hosts(fleet: str, work: Path, names: list[str] | None) -> dict[str, Path]:
    """The simulated hosts (built once per run under ``work``): name -> directory (root/, nvml.state, ethtool/)."""
    out = work / fleet
    if fleet == "demo":
        import demo

        built = {name: Path(p) for name, p in demo.build(out).items()}
    else:
        import reference

        built = {name: Path(info["dir"]) for name, info in reference.build(out).items()}
    if names:
        unknown = sorted(set(names) - set(built))
        if unknown:
            raise SystemExit(f"--hosts: unknown {', '.join(unknown)}; choose from {', '.join(built)}")
        built = {n: built[n] for n in names}
    return built


def _env(host: Path, collections: Path = REPO / ".collections") -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(collections),
        "LD_LIBRARY_PATH": str(scale.SIM_LIB.parent),
        "FAKE_NVML_STATE": str(host / "nvml.state"),
        "FAKE_ETHTOOL_DIR": str(host / "ethtool"),
    }


def _args(tmp: Path, host: Path, sample: float, shape: str) -> Path:
    path = tmp / f"args-{host.name}-{sample}.json"
    module_args = {
        "root": str(host / "root"),
        "sample_seconds": sample,
        "ethtool_path": str(scale.FAKE_ETHTOOL),
        "result": shape,
    }
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
    return path


def baseline(ref: str, tmp: Path) -> Path:
    """The collection's plugins/ as of git commit ``ref``, as an ansible_collections tree under ``tmp``."""
    root = tmp / "baseline"
    tree = root / "ansible_collections" / "gpufleet" / "tuning"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "plugins"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return root


def _module(collections: Path) -> str:
    return str(collections / "ansible_collections" / "gpufleet" / "tuning" / "plugins" / "modules" / "audit.py")


def timeline(host: Path, args: Path, tmp: Path, collections: Path = REPO / ".collections") -> list[dict[str, Any]]:
    out = tmp / "timeline.json"
    env = {**_env(host, collections), "PROFILE_OUT": str(out), "PROFILE_ARGS": str(args)}
    subprocess.run([str(scale.VENV_BIN / "python"), "-c", TIMELINE], env=env, check=True, timeout=120)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleet", choices=["reference", "demo"], default="reference", help="(default: %(default)s)")
    ap.add_argument("--hosts", help="comma-separated host names of the fleet (default: all)")
    ap.add_argument("--samples", default="0,1", help="the audit's sample_seconds, comma-separated (default: 0,1)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per host, sample and contender (default: 5)")
    ap.add_argument("--shape", choices=["compact", "full"], default="compact", help="the result option (compact)")
    ap.add_argument(
        "--baseline",
        metavar="REF",
        help="also run the module as of git commit REF (contender audit-base, alternated with the others)",
    )
    ap.add_argument("--work", default=str(REPO / "build" / "bench" / "module_profile"))
    ap.add_argument("--out", help="results JSON (default: bench/results/module_profile-<date>.json)")
    args = ap.parse_args(argv)
    samples = [float(s) for s in args.samples.split(",") if s.strip()]
    if args.runs < 1 or not samples or any(not 0 <= s <= 10 for s in samples):
        ap.error("--runs must be >= 1 and --samples between 0 and 10")
    if not scale.SIM_LIB.is_file():
        ap.error(f"{scale.SIM_LIB} is missing: run `make sim` first")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    hosts = build_hosts(args.fleet, work, [h for h in (args.hosts or "").split(",") if h])
    python = str(scale.VENV_BIN / "python")

    results: dict[str, Any] = {
        "benchmark": "module_profile",
        "date": dt.date.today().isoformat(),
        "config": {
            "fleet": args.fleet,
            "samples": samples,
            "runs": args.runs,
            "shape": args.shape,
            "baseline": args.baseline,
        },
        "environment": scale._versions(),
        "hosts": {},
    }
    rows, phase_rows = [], []
    with tempfile.TemporaryDirectory(prefix="module-profile-", dir=work) as tmp_name:
        tmp = Path(tmp_name)
        ping_args = tmp / "ping.json"
        ping_args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {}}))
        base = baseline(args.baseline, tmp) if args.baseline else None
        collections = {"audit": REPO / ".collections", "audit-base": base, "ping": REPO / ".collections"}
        for name, host in hosts.items():
            per_host = results["hosts"][name] = {}
            for sample in samples:
                audit_args = _args(tmp, host, sample, args.shape)
                cmds = {"audit": [python, _module(collections["audit"]), str(audit_args)]}
                if base is not None:
                    base_args = _args(tmp, host, sample, "full" if args.shape == "full" else "compact")
                    cmds["audit-base"] = [python, _module(base), str(base_args)]
                cmds["ping"] = [python, "-m", "ansible.modules.ping", str(ping_args)]  # -m: its folder off sys.path
                runs: dict[str, list[dict[str, Any]]] = {c: [] for c in cmds}
                for _ in range(args.runs):  # alternated: audit, (audit-base,) ping, audit, ...
                    for label, cmd in cmds.items():
                        env = _env(host, collections[label])
                        runs[label].append(scale.measure(cmd, env, tmp / f"{label}.out", 1.0, 120))
                        if runs[label][-1]["rc"] != 0:
                            raise SystemExit(f"{name}: {label} failed: {(tmp / f'{label}.out').read_text()[-2000:]}")
                med = {
                    label: {k: round(statistics.median(r[k] for r in got), 3) for k in ("wall_s", "cpu_s")}
                    for label, got in runs.items()
                }
                events = timeline(host, audit_args, tmp)
                per_host[str(sample)] = {"median": med, "runs": runs, "timeline": events}
                for label in [c for c in cmds if c != "ping"]:
                    rows.append(
                        [
                            name,
                            f"{sample:g}",
                            label,
                            f"{med[label]['wall_s']:.2f}",
                            f"{med[label]['cpu_s']:.2f}",
                            f"{med['ping']['wall_s']:.2f}",
                            f"{med['ping']['cpu_s']:.2f}",
                            f"{med[label]['wall_s'] / med['ping']['wall_s']:.2f}×",
                        ]
                    )
                for ev in events:
                    phase_rows.append(
                        [
                            name,
                            f"{sample:g}",
                            ev["phase"],
                            ev["thread"],
                            f"{ev['start']:.3f}",
                            f"{ev['end']:.3f}",
                            f"{ev['end'] - ev['start']:.3f}",
                        ]
                    )
    out = Path(args.out) if args.out else scale.BENCH / "results" / f"module_profile-{results['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(
        markdown_table(
            ["host", "sample s", "module", "wall s", "CPU s", "ping wall s", "ping CPU s", "÷ ping"],
            "lllrrrrr",
            rows,
        )
    )
    print()
    print(markdown_table(["host", "sample s", "phase", "thread", "start s", "end s", "took s"], "lllllrr", phase_rows))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
