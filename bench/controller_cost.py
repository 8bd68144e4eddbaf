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

Controller CPU = CPU of the whole run (wait4 of its process tree) less that of the module processes (each runs
under /usr/bin/time through a wrapper interpreter), per host. With the local connection the module processes share
the controller's CPUs; on real hosts they do not, so the controller is idle while it waits (echo-wait shows what
it then spends).

    .venv/bin/python bench/controller_cost.py                 # N = 100, 1 round, ~7 min
    .venv/bin/python bench/controller_cost.py --size 300 --rounds 2

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
CONTENDERS = ("ping", "echo", "audit", "audit+report", "echo-wait")

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
    res = scale.measure(cmd, {**env, "ANSIBLE_STRATEGY": strategy}, log, 1.0, 3600)
    rows = [r.split() for r in calls.read_text().splitlines()] if calls.exists() else []
    rows = [r for r in rows if len(r) == 3]
    module_cpu = sum(float(r[1]) + float(r[2]) for r in rows)
    recap = scale.RECAP.findall(log.read_text(errors="replace"))
    bad = [h for h, ok, _c, unreachable, failed in recap if unreachable != "0" or failed != "0" or ok == "0"]
    return {
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=100, help="hosts (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every contender x strategy (default: 1)")
    ap.add_argument("--forks", type=int, default=25)
    ap.add_argument("--work", default=str(scale.REPO / "build" / "bench"))
    ap.add_argument("--out", help="results JSON (default: bench/results/controller_cost-<date>.json)")
    args = ap.parse_args(argv)
    work = Path(args.work).resolve()
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    fleet_inventory, _expected = scale.build_fleet(args.size, work, 0.0)
    fleet = fleet_inventory.parent.parent
    log_dir = Path(tempfile.mkdtemp(prefix="controller-cost-", dir=work / "tmp"))
    library = log_dir / "library"
    library.mkdir()
    (library / "echo_result.py").write_text(ECHO_MODULE)
    recorded = log_dir / "recorded-result.json"
    recorded.write_text(json.dumps(scale.recorded_results(fleet, kinds=1)[0]))
    env = {**scale.base_env(work / "tmp", False), "ANSIBLE_LIBRARY": str(library)}
    plays = _plays(log_dir, recorded)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {c: [] for c in CONTENDERS} for s in STRATEGIES}
    for rnd in range(args.rounds):
        for strategy in STRATEGIES:
            wait = 0.0
            for name in CONTENDERS:
                r = run_one(name, strategy, plays, fleet_inventory, args.forks, env, work / "tmp", wait, log_dir)
                if name == "audit":
                    wait = r["module_wall_median_s"] or 0.0
                runs[strategy][name].append(r)
                print(
                    f"round {rnd + 1} {strategy:<24} {name:<13} wall {r['wall_s']:7.2f} s  controller "
                    f"{r['controller_cpu_s']:7.2f} s  module {r['module_cpu_s']:7.2f} s ({r['module_calls']} "
                    f"calls, median {r['module_wall_median_s']} s)  not ok {r['hosts_not_ok']}",
                    flush=True,
                )
    n = args.size
    rows = []
    summary: dict[str, dict[str, float]] = {}
    for strategy in STRATEGIES:
        ping = statistics.median(r["controller_cpu_s"] for r in runs[strategy]["ping"]) / n
        summary[strategy] = {}
        for name in CONTENDERS:
            per_host = statistics.median(r["controller_cpu_s"] for r in runs[strategy][name]) / n
            summary[strategy][name] = round(per_host, 4)
            wall = statistics.median(r["wall_s"] for r in runs[strategy][name])
            rows.append([strategy, name, f"{wall:.1f}", f"{1000 * per_host:.1f}", f"{per_host / ping:.2f}×"])
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
                "config": {"hosts": n, "forks": args.forks, "rounds": args.rounds, "connection": "local"},
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
