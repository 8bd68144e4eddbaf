#!/usr/bin/env python3
"""Benchmark: where the audit's controller CPU goes beyond ``ansible -m ping``'s (issue 18).

On one simulated fleet (bench/audit_scale.py's: N hosts on the local connection, forks 25) it runs, under
ansible.builtin.linear and under gpufleet.tuning.linear (plugins/strategy/linear.py), alternated:

  ping           a play: ansible.builtin.ping on each host, registered (Ansible's floor, as a playbook)
  echo           a throwaway module that answers at once with a recorded audit result (~50 KB, ~4,700 values):
                 what the size of the audit's result costs the controller
  audit          playbooks/audit.yml without its report task: the audit module on each host
  audit+report   playbooks/audit.yml as shipped (the report task reads every result and writes four files)
  echo-wait      echo, answering after the audit's median module wall time in this round: what waiting on slow
                 hosts costs the controller
  audit+report-full  the shipped playbook with the audit's result in the full shape (`result: full`: every value
                 its own) instead of its compact one (one JSON string): what the compact shape saves

Controller CPU = CPU of the whole run (wait4 of its process tree) less that of the module processes (each runs
under /usr/bin/time through a wrapper interpreter), per host. With the local connection the module processes share
the controller's CPUs; on real hosts they do not, so the controller is idle while it waits (echo-wait shows what
it then spends).

    .venv/bin/python bench/controller_cost.py                 # N = 100, 1 round
    .venv/bin/python bench/controller_cost.py --size 300 --rounds 2
    .venv/bin/python bench/controller_cost.py --phases --strategies gpufleet.tuning.linear \
        --contenders ping,audit+report

--phases splits the controller's CPU further: the main process's own (getrusage at its exit) against the forks'
(the rest: ansible-core's fork processes), and, per task, the mean CPU of one fork in its phases (templating the
task, compiling Jinja templates, building the module, running commands, parsing the result). It runs each play
under a measuring subclass of the strategy (a temporary strategy plugin that wraps ansible-core functions with
process-time counters, so its figures carry that small overhead); the plain runs do not.

Results: bench/results/controller_cost-<date>.json. Everything is written under build/bench/ (git-ignored).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import audit_scale as scale
from benchlib.tables import markdown_table

STRATEGIES = ("ansible.builtin.linear", "gpufleet.tuning.linear")
STRATEGY_BASES = {
    "ansible.builtin.linear": "ansible.plugins.strategy.linear",
    "gpufleet.tuning.linear": "ansible_collections.gpufleet.tuning.plugins.strategy.linear",
}
CONTENDERS = ("ping", "echo", "audit", "audit+report", "echo-wait", "audit+report-full")

ECHO_MODULE = """\
#!/usr/bin/python
# bench/controller_cost.py: answers with a recorded audit result, after `wait` seconds.
import json
import time

from ansible.module_utils.basic import AnsibleModule


def main():
    spec = dict(path=dict(type="path", required=True), wait=dict(type="float", default=0))
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    time.sleep(module.params["wait"])
    with open(module.params["path"]) as f:
        result = json.load(f)
    result.pop("changed", None)
    module.exit_json(changed=False, **result)


main()
"""


# --phases: a strategy plugin subclassing the strategy under test. In the main process it records its own CPU at exit;
# in every fork it adds process-time counters around ansible-core's phases of running a task and appends
# one JSON line per fork to $GPUFLEET_PHASES. Measurement only: ansible-core internals, wrapped where they exist.
PHASES_STRATEGY = """\
import atexit, functools, json, os, resource, time
from {base} import StrategyModule as _Base

_MAIN = os.getpid()
_ACC = {{}}


def _record_main():
    if os.getpid() == _MAIN:
        r = resource.getrusage(resource.RUSAGE_SELF)
        with open(os.environ["GPUFLEET_PHASES"] + ".main", "w") as f:
            json.dump({{"main_cpu_s": r.ru_utime + r.ru_stime, "main_max_rss_kib": r.ru_maxrss}}, f)


atexit.register(_record_main)


def _wrap(module, cls, name, label):
    try:
        mod = __import__(module, fromlist=[cls])
        klass = getattr(mod, cls)
        orig = getattr(klass, name)
    except (ImportError, AttributeError):
        return

    @functools.wraps(orig)
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return orig(*args, **kwargs)
        finally:
            _ACC[label] = _ACC.get(label, 0.0) + time.process_time() - start
            _ACC[label + "_calls"] = _ACC.get(label + "_calls", 0) + 1

    setattr(klass, name, timed)


for _args in (
    ("ansible.playbook.task", "Task", "post_validate", "template_task"),
    ("ansible._internal._templating._engine", "TemplateEngine", "_compile_template", "jinja_compile"),
    ("ansible._internal._templating._engine", "TemplateEngine", "_compile_expression", "jinja_compile_expr"),
    ("ansible.plugins.action", "ActionBase", "_configure_module", "build_module"),
    ("ansible.plugins.action", "ActionBase", "_low_level_execute_command", "run_commands"),
    ("ansible.plugins.action", "ActionBase", "_parse_returned_data", "parse_result"),
):
    _wrap(*_args)

from ansible.executor.process import worker as _fork  # noqa: E402

_run = _fork.WorkerProcess._run


def _measured_run(self):
    _ACC.clear()
    start = time.process_time()
    try:
        return _run(self)
    finally:
        _ACC["fork"] = time.process_time() - start
        _ACC["task"] = self._task.get_name()
        with open(os.environ["GPUFLEET_PHASES"], "a") as f:
            f.write(json.dumps(_ACC) + "\\n")


_fork.WorkerProcess._run = _measured_run


class StrategyModule(_Base):
    pass
"""


def _phases_env(strategy: str, run_tmp: Path) -> dict[str, str]:
    """The environment that runs ``strategy`` under its measuring subclass (--phases)."""
    plugins = run_tmp / "strategy_plugins"
    plugins.mkdir()
    (plugins / "measured.py").write_text(PHASES_STRATEGY.format(base=STRATEGY_BASES[strategy]))
    return {
        "ANSIBLE_STRATEGY_PLUGINS": str(plugins),
        "ANSIBLE_STRATEGY": "measured",
        "GPUFLEET_PHASES": str(run_tmp / "phases.jsonl"),
    }


def _phases(run_tmp: Path, controller_cpu: float) -> dict[str, Any]:
    """Main process vs forks (ansible-core's fork processes), each task's mean phases in one fork in ms (--phases)."""
    path = run_tmp / "phases.jsonl"
    main = json.loads((run_tmp / "phases.jsonl.main").read_text()) if (run_tmp / "phases.jsonl.main").exists() else {}
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    tasks: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        tasks.setdefault(row.pop("task"), []).append(row)
    per_task = {}
    for task, items in tasks.items():
        keys = sorted({k for item in items for k in item})
        per_task[task] = {"forks": len(items)} | {
            k: round(sum(i.get(k, 0) for i in items) / len(items) * (1 if k.endswith("_calls") else 1000), 2)
            for k in keys
        }
    out: dict[str, Any] = {"tasks": per_task}
    if "main_cpu_s" in main:
        out["main_cpu_s"] = round(main["main_cpu_s"], 2)
        out["main_max_rss_mib"] = round(main["main_max_rss_kib"] / 1024, 1)
        out["forks_cpu_s"] = round(controller_cpu - main["main_cpu_s"], 2)
    return out


def _plays(tmp: Path, recorded: Path) -> dict[str, Path]:
    """The play file of each contender (echo-wait's wait comes as an extra variable)."""
    task = {"register": "gpufleet_audit", "ignore_errors": True, "ignore_unreachable": True}
    plays = {
        "ping": [{"hosts": "all", "gather_facts": False, "tasks": [{"ansible.builtin.ping": None, **task}]}],
        "echo": [
            {
                "hosts": "all",
                "gather_facts": False,
                "tasks": [{"echo_result": {"path": str(recorded), "wait": "{{ echo_wait | default(0) }}"}, **task}],
            }
        ],
    }
    out = {}
    for name, body in plays.items():
        out[name] = tmp / f"{name}.yml"
        out[name].write_text(json.dumps(body))
    shipped = scale.AUDIT_PLAYBOOK.read_text()
    cut = shipped.index("    - name: Write the fleet report on the controller")
    out["audit"] = tmp / "audit-without-report.yml"
    out["audit"].write_text(shipped[:cut])
    out["audit+report"] = scale.AUDIT_PLAYBOOK
    if "result: compact" not in shipped:
        raise SystemExit(f"{scale.AUDIT_PLAYBOOK}: no `result: compact` to turn into the full shape")
    out["audit+report-full"] = tmp / "audit-full.yml"
    out["audit+report-full"].write_text(shipped.replace("result: compact", "result: full"))
    return out


def run_one(
    name: str,
    strategy: str,
    plays: dict[str, Path],
    inventory: Path,
    forks: int,
    env: dict[str, str],
    tmp: Path,
    wait: float,
    log_dir: Path,
    phases: bool = False,
) -> dict[str, Any]:
    run_tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))
    calls = run_tmp / "module-calls.log"
    wrapper = run_tmp / "timed-python"
    wrapper.write_text(
        f"#!/bin/sh\nexec /usr/bin/time -a -o {calls} -f '%e %U %S' {scale.VENV_BIN / 'python'} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    play = plays["echo" if name == "echo-wait" else name]
    extra = {"ansible_python_interpreter": str(wrapper), "gpufleet_report_dir": str(run_tmp / "reports")}
    if name == "echo-wait":
        extra["echo_wait"] = wait
    cmd = [
        str(scale.VENV_BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        str(play),
        "-f",
        str(forks),
        "-e",
        json.dumps(extra),
    ]
    log = log_dir / f"{name}-{strategy}.log".replace("+", "-")
    run_env = {**env, "ANSIBLE_STRATEGY": strategy, **(_phases_env(strategy, run_tmp) if phases else {})}
    res = scale.measure(cmd, run_env, log, 1.0, 3600)
    rows = [r.split() for r in calls.read_text().splitlines()] if calls.exists() else []
    rows = [r for r in rows if len(r) == 3]
    module_cpu = sum(float(r[1]) + float(r[2]) for r in rows)
    recap = scale.RECAP.findall(log.read_text(errors="replace"))
    bad = [h for h, ok, _c, unreachable, failed in recap if unreachable != "0" or failed != "0" or ok == "0"]
    out = {
        "rc": res["rc"],
        "wall_s": res["wall_s"],
        "cpu_s": res["cpu_s"],
        "module_calls": len(rows),
        "module_cpu_s": round(module_cpu, 2),
        "module_wall_median_s": round(statistics.median(float(r[0]) for r in rows), 2) if rows else None,
        "controller_cpu_s": round(res["cpu_s"] - module_cpu, 2),
        "hosts_not_ok": len(bad),
        "load1_before": res["load1_before"],
    }
    if phases:
        out["phases"] = _phases(run_tmp, out["controller_cpu_s"])
    return out


def _print_phases(phases: dict[str, Any], n: int) -> None:
    if "main_cpu_s" in phases:
        print(
            f"    main process {1000 * phases['main_cpu_s'] / n:.1f} ms/host"
            f" (max RSS {phases['main_max_rss_mib']} MiB), forks {1000 * phases['forks_cpu_s'] / n:.1f} ms/host"
        )
    for task, p in phases["tasks"].items():
        parts = ", ".join(f"{k} {v}" for k, v in p.items() if k != "forks")
        print(f"    {task[:60]:<60} {p['forks']:>5} forks, ms each: {parts}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=100, help="hosts (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every contender x strategy (default: 1)")
    ap.add_argument("--forks", type=int, default=25)
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated (default: %(default)s)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated (default: %(default)s)")
    ap.add_argument("--phases", action="store_true", help="main process vs forks, and the forks' phases")
    ap.add_argument("--work", default=str(scale.REPO / "build" / "bench"))
    ap.add_argument("--out", help="results JSON (default: bench/results/controller_cost-<date>.json)")
    args = ap.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    contenders = [c for c in args.contenders.split(",") if c]
    for value, allowed, flag in ((strategies, STRATEGIES, "--strategies"), (contenders, CONTENDERS, "--contenders")):
        unknown = sorted(set(value) - set(allowed))
        if unknown or not value:
            ap.error(f"{flag}: {', '.join(unknown) or 'none given'}; choose from {', '.join(allowed)}")
    if "echo-wait" in contenders and "audit" not in contenders:
        ap.error("--contenders: echo-wait waits as long as the audit's modules took: add audit")
    work = Path(args.work).resolve()
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    fleet_inventory, _expected = scale.build_fleet(args.size, work, 0.0)
    fleet = fleet_inventory.parent.parent
    log_dir = Path(tempfile.mkdtemp(prefix="controller-cost-", dir=work / "tmp"))
    library = log_dir / "library"
    library.mkdir()
    (library / "echo_result.py").write_text(ECHO_MODULE)
    recorded = log_dir / "recorded-result.json"
    recorded.write_text(json.dumps(scale.recorded_results(fleet, kinds=1, shape="full")[0]))
    env = {**scale.base_env(work / "tmp", False), "ANSIBLE_LIBRARY": str(library)}
    plays = _plays(log_dir, recorded)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {c: [] for c in contenders} for s in strategies}
    for rnd in range(args.rounds):
        for strategy in strategies:
            wait = 0.0
            for name in contenders:
                r = run_one(
                    name, strategy, plays, fleet_inventory, args.forks, env, work / "tmp", wait, log_dir, args.phases
                )
                if name == "audit":
                    wait = r["module_wall_median_s"] or 0.0
                runs[strategy][name].append(r)
                print(
                    f"round {rnd + 1} {strategy:<24} {name:<13} wall {r['wall_s']:7.2f} s  controller "
                    f"{r['controller_cpu_s']:7.2f} s  module {r['module_cpu_s']:7.2f} s ({r['module_calls']} "
                    f"calls, median {r['module_wall_median_s']} s)  not ok {r['hosts_not_ok']}",
                    flush=True,
                )
                if args.phases:
                    _print_phases(r["phases"], args.size)
    n = args.size
    rows = []
    summary: dict[str, dict[str, float]] = {}
    for strategy in strategies:
        ping = (
            statistics.median(r["controller_cpu_s"] for r in runs[strategy]["ping"]) / n if "ping" in contenders else 0
        )
        summary[strategy] = {}
        for name in contenders:
            per_host = statistics.median(r["controller_cpu_s"] for r in runs[strategy][name]) / n
            summary[strategy][name] = round(per_host, 4)
            wall = statistics.median(r["wall_s"] for r in runs[strategy][name])
            ratio = f"{per_host / ping:.2f}×" if ping else "–"
            rows.append([strategy, name, f"{wall:.1f}", f"{1000 * per_host:.1f}", ratio])
    print()
    print(markdown_table(["strategy", "contender", "wall s", "controller CPU ms/host", "÷ ping"], "llrrr", rows))
    out = (
        Path(args.out) if args.out else scale.BENCH / "results" / f"controller_cost-{dt.date.today().isoformat()}.json"
    )
    out.write_text(
        json.dumps(
            {
                "benchmark": "controller_cost",
                "date": dt.date.today().isoformat(),
                "config": {
                    "hosts": n,
                    "forks": args.forks,
                    "rounds": args.rounds,
                    "connection": "local",
                    "phases": args.phases,
                },
                "environment": scale._versions(),
                "runs": runs,
                "controller_cpu_per_host_s": summary,
            },
            indent=1,
        )
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
