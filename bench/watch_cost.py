#!/usr/bin/env python3
"""Benchmark: what one run of the on-host checker (gpufleet-watch, role watch) costs a GPU server.

Builds the demo fleet's eight simulated hosts (tests/sim/demo.py: A100/H100/L40S, 4 or 8 GPUs, drivers 535-570,
each with its fake NVML state, fixture /proc+/sys root and recorded ethtool output) and the checker exactly as the
watch_install module builds it (plugins/module_utils/watch/bundle.py), then runs the checker --runs times per host,
as the timer does (`gpufleet-watch --config FILE`: readers, rules, textfile and state written), alternating hosts.

Per run, from wait4() of the checker's process (interpreter start-up and imports included): wall time, CPU time
(user + system) and max RSS. Two sample settings: --sample 0 (no counter sample) and the default 1 s (swap rate,
GPU error counters and NIC drops sampled over one second: a sleep, so wall time grows and CPU does not). Medians
per host. The configuration carries the simulated library's environment, so each run includes the checker's one
re-exec that applies it (as a host with a driver in /opt would). Everything is written under build/bench/watch
(git-ignored); results: bench/results/watch_cost-<YYYY-MM-DD>.json.

    .venv/bin/python bench/watch_cost.py                 # 8 hosts x 5 runs x samples 0 and 1 s
    .venv/bin/python bench/watch_cost.py --runs 3 --samples 0
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

from benchlib.base import REPO, RESULTS, finish, median, result_head, run_info
from benchlib.tables import fmt, markdown_table

sys.path.insert(0, str(REPO / ".collections"))
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import bundle  # noqa: E402

WORK = REPO / "build" / "bench" / "watch"
SIM_DIR = REPO / "build" / "sim"
FAKE_ETHTOOL = REPO / "tests" / "fixtures" / "ethtool" / "fake-ethtool"


def _config(host: str, host_dir: Path, out: Path, sample: float) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "host": host,
        "policy": {"watch": {"textfile_dir": str(out / "textfile"), "state_file": str(out / "state.json")}},
        "environment": {
            "LD_LIBRARY_PATH": str(SIM_DIR),
            "FAKE_NVML_STATE": str(host_dir / "nvml.state"),
            "FAKE_ETHTOOL_DIR": str(host_dir / "ethtool"),
        },
        "audit": {"root": str(host_dir / "root"), "ethtool_path": str(FAKE_ETHTOOL), "sample_seconds": sample},
    }
    path = out / "watch.json"
    path.write_text(json.dumps(config))
    return path


def _gpu_count(state: Path) -> int:
    for line in state.read_text().splitlines():
        if line.startswith("gpu_count="):
            return int(line.split("=", 1)[1])
    return 0


def _one_run(checker: Path, config: Path) -> dict[str, float]:
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: the checker, as systemd starts it (its journal lines to /dev/null)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execv(sys.executable, [sys.executable, str(checker), "--config", str(config)])
        finally:
            os._exit(127)
    _pid, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{checker} --config {config} exited {os.waitstatus_to_exitcode(status)}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mib": usage.ru_maxrss / 1024}


def measure(args: argparse.Namespace) -> dict:
    load, t0 = os.getloadavg(), time.monotonic()
    if WORK.exists():
        shutil.rmtree(WORK)
    fleet = WORK / "fleet"
    demo.build(fleet)
    data, version = bundle.build(python=sys.executable)
    checker = WORK / "gpufleet-watch"
    checker.write_bytes(data)
    checker.chmod(0o755)
    hosts = sorted(p.name for p in fleet.iterdir() if (p / "nvml.state").exists())
    rows = []
    for sample in args.samples:
        runs: dict[str, list[dict[str, float]]] = {h: [] for h in hosts}
        configs = {h: _config(h, fleet / h, WORK / "out" / f"{h}-s{sample}", sample) for h in hosts}
        for _ in range(args.runs):
            for host in hosts:  # alternate hosts, so that a slow moment of the machine spreads over all of them
                runs[host].append(_one_run(checker, configs[host]))
        for host in hosts:
            rows.append(
                {
                    "host": host,
                    "sample_s": sample,
                    "gpus": _gpu_count(fleet / host / "nvml.state"),
                    "wall_s": median([r["wall_s"] for r in runs[host]]),
                    "cpu_s": median([r["cpu_s"] for r in runs[host]]),
                    "max_rss_mib": median([r["max_rss_mib"] for r in runs[host]]),
                }
            )
    result = result_head("watch_cost", " ".join(sys.argv))
    result.update(checker_version=version, checker_bytes=len(data), runs=args.runs, rows=rows, run=run_info(load, t0))
    return result


def report(result: dict) -> str:
    table = markdown_table(
        ["host", "GPUs", "sample (s)", "wall (s)", "CPU (s)", "max RSS (MiB)"],
        "lrrrrr",
        [
            [r["host"], r["gpus"], fmt(r["sample_s"]), fmt(r["wall_s"]), fmt(r["cpu_s"]), fmt(r["max_rss_mib"])]
            for r in result["rows"]
        ],
    )
    cpu = [r["cpu_s"] for r in result["rows"]]
    return (
        f"gpufleet-watch {result['checker_version']} ({result['checker_bytes'] // 1024} KiB), medians of "
        f"{result['runs']} runs per host\n{table}\nCPU per run: {fmt(min(cpu))}-{fmt(max(cpu))} s; at the "
        f"default interval (300 s) that is at most {100 * max(cpu) / 300:.3f} % of one core."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--samples",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.0, 1.0],
        help="sample_seconds values, comma-separated (default 0,1)",
    )
    args = parser.parse_args()
    if not (SIM_DIR / "libnvidia-ml.so.1").exists():
        print("build/sim/libnvidia-ml.so.1 is missing: run `make sim` first", file=sys.stderr)
        return 2
    result = measure(args)
    finish(result, report, RESULTS / f"watch_cost-{dt.date.today().isoformat()}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
