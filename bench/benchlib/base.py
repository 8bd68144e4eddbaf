"""What every wan.py measurement shares: the paths, running commands, medians, the results file's common fields."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
WORK = REPO / "build" / "bench" / "wan"
VENV_BIN = REPO / ".venv" / "bin"


def log(msg: str) -> None:
    print(msg, flush=True)


def run(cmd: list[str], check: bool = True, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} -> {res.returncode}: {(res.stderr or res.stdout).strip()[-2000:]}")
    return res


def yaml_value(text: str) -> Any:
    import yaml  # from the venv (ansible-core needs it)

    return yaml.safe_load(text)


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class Interrupted(Exception):
    pass


def raise_interrupted(signum: int, _frame: Any) -> None:
    """Signal handler: SIGTERM/SIGHUP end a measurement like Ctrl-C, through its clean-up."""
    raise Interrupted(signal.Signals(signum).name)


# -------------------------------------------------------------------------------------------- the results file
def git_commit() -> str | None:
    res = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip() or None


def host_info() -> dict[str, Any]:
    iperf = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    ansible = subprocess.run([str(VENV_BIN / "ansible"), "--version"], capture_output=True, text=True).stdout
    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "iperf3": iperf.strip(),
        "ansible": ansible.split("\n")[0].strip(),
    }


def result_head(benchmark: str, command: str | None = None) -> dict[str, Any]:
    """The fields every results file starts with: which benchmark, (the command line,) when, which commit, where."""
    head: dict[str, Any] = {"benchmark": benchmark}
    if command is not None:
        head["command"] = command
    head.update(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), commit=git_commit(), host=host_info()
    )
    return head


def run_info(load_before: tuple[float, float, float], t0: float) -> dict[str, Any]:
    """Load averages around a measurement and its duration, for the results file."""
    return {
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - t0, 1),
    }


def finish(result: dict[str, Any], report: Callable[[dict[str, Any]], str], path: Path) -> None:
    """The end of a measurement: print its report and write its results file (neither when it was interrupted)."""
    if result:
        print(report(result))
    write_result(path, result)


def write_result(path: Path, result: dict[str, Any]) -> None:
    if not result:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"  results: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
