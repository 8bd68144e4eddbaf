#!/usr/bin/env python3
"""Benchmark: the one-call gpufleet audit against Ansible's floor (ping) and a naive per-setting audit.

For each fleet size N it builds N simulated GPU hosts (tests/sim/demo.py's eight host kinds, cycled: A100/H100/L40S,
4 or 8 GPUs, drivers 535/550/570, each with its own fake NVML state, fixture /proc+/sys root and recorded ethtool
output), writes an inventory for them (local connection, like inventories/demo) and runs, alternating
A B C D A B C D ..., each contender --runs times on the same inventory with the same --forks:

  audit-cli       gpufleet audit -i INV --out TMP --forks F         (the CLI: ansible-runner + the playbook below)
  audit-playbook  ansible-playbook playbooks/audit.yml -i INV -f F  (one gpufleet.tuning.audit call per host,
                                                                     then the four reports on the controller)
  ping            ansible all -i INV -m ping -f F                   (Ansible's minimal round trip: the floor)
  naive           ansible-playbook bench/naive_audit.yml -i INV -f F (one task per setting, 46 module calls/host)

Per run: wall time, controller CPU (user+sys of the command and every descendant it reaped, from wait4()), the
largest single process's max RSS (ru_maxrss of the same rusage) and the process tree's peak RSS (sum over the
tree, sampled every --sample-interval s; shared copy-on-write pages are counted once per process, so it is an
upper bound). With a local connection the "targets" are processes on this machine, so controller CPU includes
the module processes; --profile splits the two. Medians are reported.

Everything is read-only: fleets, inventories, logs, reports and Ansible's temp files go under build/bench/
(git-ignored). Results: bench/results/audit_scale-<YYYY-MM-DD>.json.

    .venv/bin/python bench/audit_scale.py                     # N = 10, 50; 3 runs each
    .venv/bin/python bench/audit_scale.py --sizes 200 --runs 3 --contenders audit-playbook,ping
    .venv/bin/python bench/audit_scale.py --sizes 50 --runs 1 --profile   # where the time goes
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchlib.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import simulators  # noqa: E402  (tests/simulators.py: loads a simulator script under one name)

BENCH = REPO / "bench"
VENV_BIN = REPO / ".venv" / "bin"
SIM_LIB = REPO / "build" / "sim" / "libnvidia-ml.so.1"
FAKE_ETHTOOL = REPO / "tests" / "fixtures" / "ethtool" / "fake-ethtool"
FAKE_SMI = BENCH / "fake-nvidia-smi"
NAIVE = BENCH / "naive_audit.yml"
AUDIT_PLAYBOOK = REPO / "playbooks" / "audit.yml"
CONTENDERS = ("audit-cli", "audit-cli-base", "audit-playbook", "ping", "naive")
CLI_GOAL = 1.10  # issue 18: the CLI costs at most 10 % more than the bare playbook
CONTROLLER_GOAL = 1.5  # issue 18: the audit's controller CPU per host within 1.5x ping's
TARGETS = {"audit_over_ping_max": 1.3, "naive_over_audit_min": 10.0, "at_n": 50}
PAGE = os.sysconf("SC_PAGE_SIZE")
FLEET_VERSION = "1"  # bump when build_fleet() would build different hosts


# --------------------------------------------------------------------------------------------------- the fleet


def _builder_stamp(n: int) -> str:
    """Changes when the fleet would come out differently (size, this builder, the simulation's builders)."""
    h = hashlib.sha256(f"{FLEET_VERSION}/{n}".encode())
    for path in (
        REPO / "tests/sim/demo.py",
        REPO / "tests/sim/nvml/profiles.py",
        REPO / "tests/sim/host/mkroot.py",
        REPO / "tests/sim/host/netroot.py",
    ):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _link_tree(src: Path, dst: Path) -> None:
    """A copy of src whose files are hard links (read-only fixtures: 200 hosts cost the disk of 8)."""
    shutil.copytree(src, dst, symlinks=True, copy_function=os.link)


def _rename_host(root: Path, old: str, new: str) -> None:
    """Files that name the host get their own copy (unlink first: never write through a shared hard link)."""
    for rel in ("etc/hostname", "proc/sys/kernel/hostname", "var/log/kern.log", ".gpufleet-mkroot.json"):
        path = root / rel
        if path.is_file():
            text = path.read_text().replace(old, new)
            path.unlink()
            path.write_text(text)


def build_fleet(n: int, work: Path, sample_seconds: float) -> tuple[Path, dict[str, set[str]]]:
    """N simulated hosts under work/fleet-N/ and their inventory; the hosts are reused while the stamp matches.

    Returns the inventory and, per host, the rule ids its audit must fail (demo.EXPECTED of its kind)."""
    demo = simulators.load("gpufleet_bench_demo", REPO / "tests/sim/demo.py")
    fleet = work / f"fleet-{n}"
    stamp = _builder_stamp(n)
    kinds = list(demo.HOSTS)
    names = [f"{kinds[i % len(kinds)].rsplit('-', 1)[0]}-{i:03d}" for i in range(n)]
    inventory = fleet / "inventory" / "hosts.yml"
    groups: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        groups.setdefault(demo.HOSTS[kinds[i % len(kinds)]]["group"], []).append(name)
    expected = {name: set(demo.EXPECTED[kinds[i % len(kinds)]]) for i, name in enumerate(names)}
    if (fleet / ".stamp").is_file() and (fleet / ".stamp").read_text() == stamp:
        _write_inventory(fleet, groups, sample_seconds)
        return inventory, expected
    if fleet.exists():
        shutil.rmtree(fleet)
    started = time.monotonic()
    templates = work / f"fleet-{n}.templates"
    if templates.exists():
        shutil.rmtree(templates)
    demo.build(templates)  # the eight demo hosts, exactly as `make demo` builds them
    for i, name in enumerate(names):
        kind = kinds[i % len(kinds)]
        spec = demo.HOSTS[kind]
        host = fleet / name
        host.mkdir(parents=True)
        _link_tree(templates / kind / "root", host / "root")
        _link_tree(templates / kind / "ethtool", host / "ethtool")
        _rename_host(host / "root", kind, name)
        # Own GPU state: same profile and overrides, UUIDs and serials seeded by the host's name.
        profile, count, driver, overrides = spec["gpu"]
        state = demo.profiles.build_state(profile, gpus=count, driver=driver, overrides=overrides, seed=name)
        if any(o.startswith("gpu.*.utilization_gpu") for o in overrides):
            for g in range(count):
                state[f"gpu.{g}.pcie_gen_current"] = state[f"gpu.{g}.pcie_gen_max"]
        demo.profiles.write_state(host / "nvml.state", state)
    shutil.rmtree(templates)
    _write_inventory(fleet, groups, sample_seconds)
    (fleet / ".stamp").write_text(stamp)
    print(f"built fleet of {n} simulated hosts in {fleet} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return inventory, expected


def _write_inventory(fleet: Path, groups: dict[str, list[str]], sample_seconds: float) -> None:
    """Like inventories/demo (same policy and sites), with absolute paths into this fleet.

    The simulation's per-host paths (fixture root, fake NVML state, recorded ethtool output) are literal host
    variables, not templates over inventory_hostname as in inventories/demo: a real host has none of them, and as
    templates they cost the audit three Jinja compiles per host that ping, which never reads them, does not pay
    (docs/benchmarks.md, "Where the controller's CPU goes"). The policy's templated `site` stays, as a user might
    write it."""
    inv = fleet / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    lines = [
        "---",
        "# Generated by bench/audit_scale.py: simulated GPU hosts (read-only audits).",
        "all:",
        "  children:",
    ]
    for group, hosts in sorted(groups.items()):
        lines += [f"    {group}:", "      hosts:"]
        for h in hosts:
            environment = {
                "LD_LIBRARY_PATH": str(SIM_LIB.parent),
                "FAKE_NVML_STATE": str(fleet / h / "nvml.state"),
                "FAKE_ETHTOOL_DIR": str(fleet / h / "ethtool"),
            }
            lines += [
                f"        {h}:",
                f"          gpufleet_audit_root: {json.dumps(str(fleet / h / 'root'))}",
                f"          gpufleet_environment: {json.dumps(environment)}",
            ]
    (inv / "hosts.yml").write_text("\n".join(lines) + "\n")
    demo_vars = (REPO / "inventories/demo/group_vars/all/fleet.yml").read_text()
    policy = demo_vars[demo_vars.index("gpufleet_policy:") : demo_vars.index("# Remediation")].rstrip()
    (inv / "group_vars" / "all.yml").write_text(f"""---
ansible_connection: local
ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
gpufleet_ethtool_path: {json.dumps(str(FAKE_ETHTOOL))}
# Fixture files do not change over time (swap rates are 0 whatever the sample): see bench/README.md (--sample-seconds).
gpufleet_sample_seconds: {sample_seconds}
# For bench/naive_audit.yml: nvidia-smi that answers from the same FAKE_NVML_STATE.
naive_nvidia_smi: {json.dumps(str(FAKE_SMI))}

{policy}
""")


# ------------------------------------------------------------------------------------------------- measuring


def _descendants(root_pid: int) -> list[int]:
    parent = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
                parent[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        kids = [c for c, p in parent.items() if p == pid]
        found += kids
        todo += kids
    return found


def _tree_memory(root_pid: int) -> tuple[int, int, int]:
    """(sum of RSS, sum of PSS, process count) of root_pid and its descendants, from /proc (bytes).

    PSS (proportional set size, /proc/PID/smaps_rollup) splits pages shared by forked workers between them, so
    the PSS sum is the tree's real footprint; the RSS sum counts shared pages once per process."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * PAGE
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total_rss, total_pss, count, todo = 0, 0, 0, [root_pid]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        if pid not in rss:
            continue
        total_rss += rss[pid]
        count += 1
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                m = re.search(rb"^Pss:\s+(\d+) kB", f.read(), re.M)
            total_pss += int(m.group(1)) * 1024 if m else rss[pid]
        except OSError:
            pass  # exited since the scan
    return total_rss, total_pss, count


def measure(cmd: list[str], env: dict[str, str], log: Path, interval: float, timeout: float) -> dict[str, Any]:
    """Run cmd (stdout+stderr to log); wall, CPU of the whole reaped tree, max RSS, sampled tree peak memory.

    Past `timeout` seconds the run is killed: its process group (its own session) and every descendant
    (ansible-runner starts ansible-playbook in a session of its own)."""
    load_before = os.getloadavg()[0]
    peak = {"rss": 0, "pss": 0, "procs": 0}
    done = threading.Event()
    with open(log, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

        def sample() -> None:
            while not done.is_set():
                rss, pss, count = _tree_memory(proc.pid)
                peak["rss"] = max(peak["rss"], rss)
                peak["pss"] = max(peak["pss"], pss)
                peak["procs"] = max(peak["procs"], count)
                done.wait(interval)

        def kill() -> None:
            for pid in _descendants(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        alarm = threading.Timer(timeout, kill)
        alarm.start()
        _, status, usage = os.wait4(proc.pid, 0)
        alarm.cancel()
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        done.set()
        sampler.join()
    return {
        "rc": proc.returncode,
        "wall_s": round(wall, 3),
        "cpu_user_s": round(usage.ru_utime, 3),
        "cpu_sys_s": round(usage.ru_stime, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "tree_peak_rss_mib": round(peak["rss"] / 2**20, 1),
        "tree_peak_pss_mib": round(peak["pss"] / 2**20, 1),
        "tree_peak_procs": peak["procs"],
        "timed_out": wall >= timeout,
        "load1_before": round(load_before, 2),
    }


# ----------------------------------------------------------------------------------------------- contenders


def command(name: str, inventory: Path, forks: int, out_dir: Path, extra: list[str]) -> list[str]:
    if name in ("audit-cli", "audit-cli-base"):
        # audit-cli-base: the same CLI with src/gpufleet/runner.py as of --cli-baseline REF (PYTHONPATH, see
        # cli_baseline_env): what the CLI cost before a change to how it runs the playbook.
        exe = [str(VENV_BIN / "gpufleet")] if name == "audit-cli" else [str(VENV_BIN / "python"), "-m", "gpufleet.cli"]
        return [*exe, "audit", "-i", str(inventory), "--out", str(out_dir), "--forks", str(forks)]
    if name == "audit-playbook":
        return [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            str(AUDIT_PLAYBOOK),
            "-f",
            str(forks),
            "-e",
            json.dumps({"gpufleet_report_dir": str(out_dir)}),
            *extra,
        ]
    if name == "ping":
        return [
            str(VENV_BIN / "ansible"),
            "all",
            "-i",
            str(inventory),
            "-m",
            "ansible.builtin.ping",
            "-f",
            str(forks),
            *extra,
        ]
    if name == "naive":
        return [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(NAIVE), "-f", str(forks), *extra]
    raise ValueError(name)


RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def check(name: str, result: dict[str, Any], log: Path, out_dir: Path, expected: dict[str, set[str]]) -> str | None:
    """Why this run does not count, or None. Every host must have answered, and audited what its simulation
    holds: the audit fails exactly the rules tests/sim/demo.py expects of the host's kind; the naive playbook's
    few checks find a subset of them."""
    text = log.read_text(errors="replace")
    if result["timed_out"]:
        return f"killed after the timeout (log {log})"
    if result["rc"] != 0:
        return f"exit code {result['rc']} (log {log})"
    if name == "ping":
        ok = len(re.findall(r"^\S+ \| SUCCESS", text, re.M))
        return None if ok == len(expected) else f"{ok}/{len(expected)} hosts answered ping (log {log})"
    if name.startswith("audit"):
        path = out_dir / "latest" / "report.json"
        if not path.is_file():
            return f"no {path} (log {log})"
        report = json.loads(path.read_text())
        hosts = report["summary"]["hosts"]  # total, ok, and a count per other status (failed, timeout, ...)
        others = {k: v for k, v in hosts.items() if k not in ("total", "ok") and v}
        if hosts.get("total") != len(expected) or hosts.get("ok") != len(expected) or others:
            return f"report summary {hosts}: want all {len(expected)} hosts ok"
        failing = {
            h: {f["rule"] for f in v["findings"] if f["status"] in ("fail", "warn")} for h, v in report["hosts"].items()
        }
        wrong = sorted(h for h in expected if failing.get(h) != expected[h])
        return f"unexpected findings on {wrong[:5]} (log {log})" if wrong else None
    recap = {m[0]: (int(m[1]), int(m[3]), int(m[4])) for m in RECAP.findall(text)}
    bad = [h for h in expected if h not in recap or recap[h][1] or recap[h][2]]
    found = dict(re.findall(r"naive-audit: (\S+) gpus=[48] findings=([A-Z0-9,-]*)", text))
    wrong = sorted(h for h in expected if h not in found or not set(filter(None, found[h].split(","))) <= expected[h])
    if bad or wrong:
        return f"naive: {len(bad)} hosts failed or missing, findings off on {wrong[:5]} (log {log})"
    return None


def base_env(tmp: Path, pipelining: bool, strategy: str | None = None) -> dict[str, str]:
    """The environment of every contender: ansible.cfg of this checkout, Ansible's temp files under tmp; with
    ``strategy``, ANSIBLE_STRATEGY for all of them (without, the playbooks and ping run ansible.builtin.linear and
    the CLI its own default, gpufleet.tuning.linear)."""
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-remote"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        }
    )
    for key in (
        "ANSIBLE_CALLBACKS_ENABLED",
        "ANSIBLE_STDOUT_CALLBACK",
        "ANSIBLE_FORKS",
        "ANSIBLE_INVENTORY",
        "ANSIBLE_PIPELINING",
        "ANSIBLE_STRATEGY",
    ):
        env.pop(key, None)
    if strategy:
        env["ANSIBLE_STRATEGY"] = strategy
    if pipelining:
        # ansible.cfg turns pipelining on for ssh only; the local connection then copies each module to a temp
        # dir and runs it (mkdir, write, chmod, run, rm). With this, one exec per call, as over ssh.
        env["ANSIBLE_PIPELINING"] = "True"
    return env


# ---------------------------------------------------------------------------------------------------- report


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


METRICS = ("wall_s", "cpu_s", "cpu_user_s", "cpu_sys_s", "max_rss_mib", "tree_peak_pss_mib", "tree_peak_rss_mib")


def summarize(results: dict[str, Any]) -> None:
    for size in results["sizes"].values():
        med = {}
        for name, c in size["contenders"].items():
            good = [r for r in c["runs"] if not r.get("invalid")]
            c["valid_runs"] = len(good)
            c["median"] = {k: _median(good, k) for k in METRICS} if good else None
            med[name] = c["median"]
        ratios: dict[str, Any] = {}
        for audit in ("audit-playbook", "audit-cli"):
            if med.get(audit) and med.get("ping"):
                ratios[f"{audit}/ping"] = {k: round(med[audit][k] / med["ping"][k], 2) for k in ("wall_s", "cpu_s")}
            if med.get(audit) and med.get("naive"):
                ratios[f"naive/{audit}"] = {k: round(med["naive"][k] / med[audit][k], 2) for k in ("wall_s", "cpu_s")}
        for cli in ("audit-cli", "audit-cli-base"):
            if med.get(cli) and med.get("audit-playbook"):
                ratios[f"{cli}/audit-playbook"] = {
                    k: round(med[cli][k] / med["audit-playbook"][k], 3) for k in ("wall_s", "cpu_s")
                }
        size["ratios"] = ratios
        prof = size.get("profile") or {}
        if prof.get("audit-playbook") and prof.get("ping"):
            n = size["hosts"]
            per_host = {name: round(prof[name]["controller_cpu_s"] / n, 4) for name in ("audit-playbook", "ping")}
            # The CLI was not profiled (its playbook is audit-playbook's): its controller CPU is its median CPU
            # less the module CPU of the profiled audit-playbook run (the same module calls).
            if med.get("audit-cli"):
                per_host["audit-cli (estimate)"] = round(
                    (med["audit-cli"]["cpu_s"] - prof["audit-playbook"]["module_cpu_s"]) / n, 4
                )
            size["controller_cpu_per_host_s"] = per_host
            size["controller_cpu_ratio"] = round(per_host["audit-playbook"] / per_host["ping"], 2)


def table(results: dict[str, Any]) -> str:
    rows = []
    for n, size in results["sizes"].items():
        for name, c in size["contenders"].items():
            m = c["median"]
            if m is None:
                rows.append([n, name, 0, "–", "–", "–", "–", "–"])
                continue
            rows.append(
                [
                    n,
                    name,
                    c["valid_runs"],
                    f"{m['wall_s']:.2f}",
                    f"{m['cpu_s']:.2f} ({m['cpu_user_s']:.2f}+{m['cpu_sys_s']:.2f})",
                    f"{m['max_rss_mib']:.0f}",
                    f"{m['tree_peak_pss_mib']:.0f}",
                    f"{m['tree_peak_rss_mib']:.0f}",
                ]
            )
    ratios = []
    for n, size in results["sizes"].items():
        for label, r in size["ratios"].items():
            if label.endswith("/audit-playbook"):
                target = f"≤ {CLI_GOAL}× (CPU {'met' if r['cpu_s'] <= CLI_GOAL else 'MISSED'})"
            elif label.endswith("/ping"):
                target = f"≤ {TARGETS['audit_over_ping_max']}× (wall {'met' if r['wall_s'] <= 1.3 else 'MISSED'})"
            else:
                target = f"≥ {TARGETS['naive_over_audit_min']:.0f}× (wall {'met' if r['wall_s'] >= 10 else 'MISSED'})"
            ratios.append([n, label, f"{r['wall_s']:.2f}×", f"{r['cpu_s']:.2f}×", target])
    header = ["N", "contender", "runs", "wall s", "CPU s (user+sys)", "max RSS MiB", "tree peak PSS MiB"]
    parts = [
        markdown_table([*header, "tree peak RSS MiB"], "rlrrrrrr", rows),
        "",
        markdown_table(["N", "ratio", "wall", "CPU", "target"], "rlrrl", ratios),
    ]
    controller = []
    for n, size in results["sizes"].items():
        for name, v in (size.get("controller_cpu_per_host_s") or {}).items():
            goal = ""
            if name == "audit-playbook":
                ok = size["controller_cpu_ratio"] <= CONTROLLER_GOAL
                goal = f"{size['controller_cpu_ratio']:.2f}× ping (≤ {CONTROLLER_GOAL}×: {'met' if ok else 'MISSED'})"
            controller.append([n, name, f"{1000 * v:.1f}", goal])
    if controller:
        parts += ["", markdown_table(["N", "controller CPU per host", "ms", "goal"], "rlrl", controller)]
    build = (results.get("report_build") or {}).get("sizes") or {}
    if build:
        rows = [
            [
                n,
                f"{r['build_s']:.2f}",
                f"{r['write_s']:.2f}",
                f"{r['per_host_ms']:.2f}",
                f"{r['render']['html']:.2f}",
                *(f"{r['bytes'][k] / 1e6:.2f}" for k in ("json", "html", "junit", "prometheus")),
            ]
            for n, r in build.items()
        ]
        head = ["N", "build s", "render+write s", "ms/host", "html render s", "json MB", "html MB", "junit MB"]
        parts += ["", markdown_table([*head, "prom MB"], "rrrrrrrrr", rows)]
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------- profile


def profile(
    n: int,
    inventory: Path,
    hosts: dict[str, set[str]],
    forks: int,
    work: Path,
    env: dict[str, str],
    interval: float,
    timeout: float,
    contenders: list[str],
    runs_dir: Path,
    split_cpus: bool = False,
) -> dict[str, Any]:
    """One extra run per contender (not in the medians) where every module process runs under /usr/bin/time
    (a wrapper interpreter, one more exec per call): CPU of the module processes ("target side") vs the rest
    ("controller side"). The playbooks also get ansible.posix.profile_tasks (wall per task).

    ``split_cpus``: the controller's processes run on CPU 0 and the module processes (and theirs) on the other
    CPUs (taskset), so that the targets' work does not share a core with the controller's, as on remote hosts."""
    cpus = sorted(os.sched_getaffinity(0))
    if split_cpus and len(cpus) < 2:
        raise SystemExit("--split-cpus needs at least 2 CPUs")
    targets = ",".join(str(c) for c in cpus[1:])
    out: dict[str, Any] = {}
    for name in contenders:
        if name.startswith("audit-cli"):
            continue  # same playbook as audit-playbook; its extra cost is ansible-runner's
        tmp = Path(tempfile.mkdtemp(prefix=f"profile-{n}-{name}-", dir=work / "tmp"))
        calls = tmp / "module-calls.log"
        wrapper = tmp / "timed-python"
        wrapper.write_text(
            f"#!/bin/sh\nexec /usr/bin/time -a -o {calls} -f '%e %U %S %M' "
            + (f"taskset -c {targets} " if split_cpus else "")
            + f'{VENV_BIN / "python"} "$@"\n'
        )
        wrapper.chmod(0o755)
        extra = ["-e", json.dumps({"ansible_python_interpreter": str(wrapper)})]
        penv = dict(env)
        if name != "ping":
            penv["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
            penv["PROFILE_TASKS_SORT_ORDER"] = "none"
        log = runs_dir / f"{n}-{name}-profile.log"
        cmd = command(name, inventory, forks, tmp / "reports", extra)
        if split_cpus:
            cmd = ["taskset", "-c", str(cpus[0]), *cmd]
        res = measure(cmd, penv, log, interval, timeout)
        res["invalid"] = check(name, res, log, tmp / "reports", hosts)
        # One "%e %U %S %M" line per module process (GNU time adds "Command exited with non-zero status N" lines).
        lines = calls.read_text().splitlines() if calls.exists() else []
        rows = [r for r in (line.split() for line in lines) if len(r) == 4]
        mod_cpu = sum(float(r[1]) + float(r[2]) for r in rows)
        mod_wall = [float(r[0]) for r in rows]
        tasks = re.findall(r"^(.+?) -+ (\d+\.\d+)s$", log.read_text(errors="replace"), re.M)
        out[name] = {
            **res,
            "module_calls": len(rows),
            "module_cpu_s": round(mod_cpu, 2),
            "module_wall_median_s": round(statistics.median(mod_wall), 3) if mod_wall else None,
            "module_wall_max_s": round(max(mod_wall), 3) if mod_wall else None,
            "controller_cpu_s": round(res["cpu_s"] - mod_cpu, 2),
            "task_wall_s": {t.strip(): float(s) for t, s in tasks},
        }
        shutil.rmtree(tmp)
    tmp = Path(tempfile.mkdtemp(prefix="module-", dir=work / "tmp"))
    first = sorted(hosts)[0]
    out["module_direct"] = {"host": first, **module_breakdown(inventory.parent.parent / first, tmp)}
    shutil.rmtree(tmp)
    return out


# Phases of one audit module run (cProfile cumulative time), by (file, function).
PHASES = {
    "imports (ansible.module_utils.basic)": ("basic.py", "<module>"),
    "gpu facts (pynvml, fake NVML)": ("gpu.py", "read"),
    "host facts": ("host.py", "collect"),
    "  of which per-CPU files (read_cpu)": ("host.py", "read_cpu"),
    "network facts": ("nic.py", "collect"),
    "  of which ethtool runs (run_command)": ("basic.py", "run_command"),
    "rules": ("rules.py", "evaluate"),
    "exit_json (JSON out)": ("basic.py", "exit_json"),
}


def module_breakdown(fleet_host: Path, tmp: Path, repeats: int = 5) -> dict[str, Any]:
    """The audit and ping modules run directly (no Ansible around them) on one simulated host: median wall and
    CPU of `repeats` runs each, and where one audit run spends its time (cProfile, which inflates it)."""
    import pstats

    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": str(REPO / ".collections"),
            "LD_LIBRARY_PATH": str(SIM_LIB.parent),
            "FAKE_NVML_STATE": str(fleet_host / "nvml.state"),
            "FAKE_ETHTOOL_DIR": str(fleet_host / "ethtool"),
        }
    )
    args = tmp / "args.json"
    args.write_text(
        json.dumps(
            {
                "ANSIBLE_MODULE_ARGS": {
                    "root": str(fleet_host / "root"),
                    "sample_seconds": 0,
                    "ethtool_path": str(FAKE_ETHTOOL),
                    "policy": {"network": {"min_mtu": 9000}},
                }
            }
        )
    )
    ping_args = tmp / "ping.json"
    ping_args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {}}))

    python = str(VENV_BIN / "python")
    runs: dict[str, Any] = {}
    for label, cmd in (
        ("audit", [python, str(REPO / "plugins/modules/audit.py"), str(args)]),
        ("ping", [python, "-m", "ansible.modules.ping", str(ping_args)]),  # -m: its folder stays off sys.path
    ):
        got = [measure(cmd, env, tmp / f"{label}.out", 1.0, 120) for _ in range(repeats)]
        runs[label] = {k: round(statistics.median(r[k] for r in got), 3) for k in ("wall_s", "cpu_s", "max_rss_mib")}
    stats_file = tmp / "audit.prof"
    subprocess.run(
        [python, "-m", "cProfile", "-o", str(stats_file), str(REPO / "plugins/modules/audit.py"), str(args)],
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=120,
    )
    stats = pstats.Stats(str(stats_file)).stats
    total = max(v[3] for v in stats.values())
    phases = {}
    for label, (file, func) in PHASES.items():
        cum = [v[3] for (f, _line, fn), v in stats.items() if f.endswith("/" + file) and fn == func]
        phases[label] = round(max(cum), 3) if cum else None
    runs["audit_cprofile_s"] = {"total": round(total, 3), **phases}
    return runs


# ------------------------------------------------------------------------------------------ report building


def report_sizes(out_dir: Path) -> dict[str, int]:
    """Bytes of each file an audit wrote under out_dir/latest/ (report.json, report.html, junit.xml, ...)."""
    latest = out_dir / "latest"
    return {f.name: f.stat().st_size for f in sorted(latest.iterdir()) if f.is_file()} if latest.is_dir() else {}


def cli_baseline_env(env: dict[str, str], ref: str, tmp: Path) -> dict[str, str]:
    """The environment of audit-cli-base: src/gpufleet of this checkout with runner.py as of ``ref``, first on
    PYTHONPATH (the venv finds gpufleet through an editable .pth, which comes after PYTHONPATH)."""
    base = Path(tempfile.mkdtemp(prefix="cli-base-", dir=tmp))
    shutil.copytree(REPO / "src" / "gpufleet", base / "gpufleet", ignore=shutil.ignore_patterns("__pycache__"))
    old = subprocess.run(
        ["git", "show", f"{ref}:src/gpufleet/runner.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    (base / "gpufleet" / "runner.py").write_text(old)
    # Outside the checkout, gpufleet finds the collection through GPUFLEET_COLLECTION (gpufleet.paths).
    return {**env, "PYTHONPATH": str(base), "GPUFLEET_COLLECTION": str(REPO)}


def recorded_results(fleet: Path, kinds: int = 8, shape: str = "compact") -> list[dict[str, Any]]:
    """The audit module's result (its JSON output, as registered) on the first host of each demo kind of a fleet,
    run directly (no Ansible): the recorded results the report build is timed on. ``shape``: the module's
    ``result`` option (compact: what playbooks/audit.yml registers; full: every value its own)."""
    names = sorted((p.name for p in fleet.iterdir() if (p / "nvml.state").is_file()), key=lambda n: n[-3:])[:kinds]
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(REPO / ".collections"), "LD_LIBRARY_PATH": str(SIM_LIB.parent)})
    demo_vars = (fleet / "inventory" / "group_vars" / "all.yml").read_text()
    out = []
    with tempfile.TemporaryDirectory(prefix="recorded-") as tmp:
        for name in names:
            host = fleet / name
            args = Path(tmp) / "args.json"
            module_args = {
                "root": str(host / "root"),
                "sample_seconds": 0,
                "ethtool_path": str(FAKE_ETHTOOL),
                "result": shape,
            }
            if "gpufleet_policy:" in demo_vars:
                import yaml

                module_args["policy"] = [yaml.safe_load(demo_vars).get("gpufleet_policy") or {}]
            args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
            proc = subprocess.run(
                [str(VENV_BIN / "python"), str(REPO / "plugins/modules/audit.py"), str(args)],
                env={**env, "FAKE_NVML_STATE": str(host / "nvml.state"), "FAKE_ETHTOOL_DIR": str(host / "ethtool")},
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            res = json.loads(proc.stdout)
            out.append({k: v for k, v in res.items() if k != "invocation"})
    return out


def report_build(sizes: list[int], work: Path, repeats: int = 3) -> dict[str, Any]:
    """The controller's report step alone, in this process: fleet.build_report on N recorded results (the demo
    kinds' results cycled over N host names, as the fleet is built), then writer.write_all (the four formats
    rendered and written: write_s), and each format's rendering alone again (render).
    Median of `repeats`; what audit_report does on the controller after the audit, minus Ansible's templating of
    the registered results (hostvars)."""
    sys.path.insert(0, str(REPO / ".collections"))
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet as fleet_mod
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    (work / "tmp").mkdir(parents=True, exist_ok=True)
    fleets = sorted(work.glob("fleet-*/.stamp"))
    if not fleets:
        build_fleet(8, work, 0.0)
        fleets = sorted(work.glob("fleet-*/.stamp"))
    recorded = recorded_results(fleets[0].parent)
    sites = ("fra", "iad", "sg")
    out: dict[str, Any] = {"recorded_kinds": len(recorded), "repeats": repeats, "sizes": {}}
    for n in sizes:
        runs = []
        for _ in range(repeats):
            results = {f"host-{i:04d}": json.loads(json.dumps(recorded[i % len(recorded)])) for i in range(n)}
            site_of = {name: sites[i % len(sites)] for i, name in enumerate(results)}
            t0 = time.perf_counter()
            report = fleet_mod.build_report(results, started_at="2026-12-01T00:00:00+00:00", sites=site_of)
            t1 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="report-build-", dir=work / "tmp") as tmp:
                files = writer.write_all(report, tmp)  # renders the four formats and writes them
                t2 = time.perf_counter()
                sizes_b = {k: files[k].stat().st_size for k in writer.FILES}
            render = {}
            for key, fn in (
                ("json", lambda r: json.dumps(r, sort_keys=True, indent=2, ensure_ascii=False)),
                ("html", writer.render_html),
                ("junit", writer.render_junit),
                ("prometheus", writer.render_prometheus),
            ):
                r0 = time.perf_counter()
                fn(report)
                render[key] = time.perf_counter() - r0
            runs.append({"build_s": t1 - t0, "write_s": t2 - t1, "render": render, "bytes": sizes_b})
        med = {k: round(statistics.median(r[k] for r in runs), 3) for k in ("build_s", "write_s")}
        out["sizes"][str(n)] = {
            **med,
            "render": {k: round(statistics.median(r["render"][k] for r in runs), 3) for k in runs[0]["render"]},
            "per_host_ms": round(1000 * (med["build_s"] + med["write_s"]) / n, 3),
            "bytes": runs[-1]["bytes"],
        }
    return out


# ------------------------------------------------------------------------------------------------------ main


def _versions() -> dict[str, str]:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60).stdout.strip()
        except OSError:
            return ""

    return {
        "ansible_core": run(str(VENV_BIN / "ansible"), "--version").splitlines()[0] if VENV_BIN.exists() else "",
        "python": platform.python_version(),
        "git_commit": run("git", "rev-parse", "--short", "HEAD"),
        "kernel": platform.release(),
        "cpus": str(os.cpu_count()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,50", help="fleet sizes, comma-separated (default: %(default)s; 200 is slow)")
    ap.add_argument(
        "--runs",
        type=int,
        default=3,
        help="timed runs per contender and size (default: %(default)s; 0 with --profile: the profiled runs only)",
    )
    ap.add_argument("--forks", type=int, default=25, help="Ansible forks for every contender (default: %(default)s)")
    ap.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help="comma-separated, run in this order each round (default: %(default)s)",
    )
    ap.add_argument(
        "--naive-max-size",
        type=int,
        default=10,
        help="run naive only at sizes up to this (default: %(default)s, so a default run takes under 10 minutes; "
        "naive at N = 50 takes ~8 min a run: --naive-max-size 50 for its target)",
    )
    ap.add_argument(
        "--sample-seconds",
        type=float,
        default=0.0,
        help="the audit's swap-rate sample (gpufleet_sample_seconds; module default 1.0, "
        "inventories/demo: 0; default here: %(default)s)",
    )
    ap.add_argument("--sample-interval", type=float, default=0.5, help="tree memory sampling period (s)")
    ap.add_argument(
        "--pipelining",
        action="store_true",
        help="ANSIBLE_PIPELINING=True for every contender (the local connection otherwise copies each "
        "module to a temp dir; ansible.cfg pipelines ssh only)",
    )
    ap.add_argument(
        "--split-cpus",
        action="store_true",
        help="with --profile: the controller on CPU 0, the module processes on the other CPUs (taskset), so the "
        "targets' work does not share the controller's core, as on remote hosts",
    )
    ap.add_argument(
        "--strategy",
        help="ANSIBLE_STRATEGY for every contender, e.g. gpufleet.tuning.linear (default: none set: the playbooks "
        "and ping run ansible.builtin.linear, the CLI gpufleet.tuning.linear)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="kill a run (its process group) after this many seconds; it then does not count (default: %(default)s)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="after the timed runs, one profiled run per contender: module-process vs controller CPU, wall per task",
    )
    ap.add_argument(
        "--cli-baseline",
        metavar="REF",
        help="with contender audit-cli-base: the git commit whose src/gpufleet/runner.py that CLI runs",
    )
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of each contender")
    ap.add_argument(
        "--report-sizes",
        default="",
        help="also time the report build alone (fleet.build_report + the four writers, in this process) from "
        "recorded audit results at these N, comma-separated (default: the --sizes)",
    )
    ap.add_argument("--no-report-build", action="store_true", help="skip the report-build measurement")
    ap.add_argument("--work", default=str(REPO / "build" / "bench"), help="fleets, logs, temp files (git-ignored)")
    ap.add_argument("--out", help="results JSON (default: bench/results/audit_scale-<date>.json)")
    ap.add_argument("--keep-logs", action="store_true", help="keep every run's log under WORK/runs/")
    args = ap.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = set(contenders) - set(CONTENDERS)
    if unknown or not contenders or args.runs < (0 if args.profile else 1) or any(n < 1 for n in sizes):
        ap.error(f"bad --contenders/--runs/--sizes (contenders: {', '.join(CONTENDERS)})")
    if not SIM_LIB.is_file():
        ap.error(f"{SIM_LIB} is missing: run `make sim` first")
    work = Path(args.work).resolve()
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    runs_dir = work / "runs" / dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    runs_dir.mkdir(parents=True)
    env = base_env(work / "tmp", args.pipelining, args.strategy)
    base_env_cli = env
    if "audit-cli-base" in contenders:
        if not args.cli_baseline:
            ap.error("audit-cli-base needs --cli-baseline REF (the commit whose runner.py it runs)")
        base_env_cli = cli_baseline_env(env, args.cli_baseline, work / "tmp")
    today = dt.date.today().isoformat()
    out_path = Path(args.out) if args.out else BENCH / "results" / f"audit_scale-{today}.json"

    results: dict[str, Any] = {
        "benchmark": "audit_scale",
        "date": today,
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "config": {
            "forks": args.forks,
            "runs": args.runs,
            "contenders": contenders,
            "naive_max_size": args.naive_max_size,
            "sizes": sizes,
            "sample_seconds": args.sample_seconds,
            "connection": "local",
            "pipelining": args.pipelining,
            "split_cpus": args.split_cpus,
            "strategy": args.strategy or "ansible.builtin.linear (the CLI: gpufleet.tuning.linear)",
            "order": "alternating, one of each per round",
            "tree_memory_sample_interval_s": args.sample_interval,
        },
        "environment": _versions(),
        "targets": TARGETS,
        "sizes": {},
    }
    started = time.monotonic()
    for n in sizes:
        inventory, hosts = build_fleet(n, work, args.sample_seconds)
        here = [c for c in contenders if c != "naive" or n <= args.naive_max_size]
        size = results["sizes"][str(n)] = {"hosts": n, "contenders": {c: {"runs": []} for c in here}}
        # Warm-up (not timed): Python bytecode, page cache and Ansible's plugin caches for every contender.
        for name in here if n == sizes[0] and not args.no_warmup else []:
            if name == "naive":
                continue  # the other contenders already warm everything it loads
            tmp = Path(tempfile.mkdtemp(prefix="warmup-", dir=work / "tmp"))
            warm_env = base_env_cli if name == "audit-cli-base" else env
            measure(command(name, inventory, args.forks, tmp / "reports", []), warm_env, tmp / "log", 1.0, args.timeout)
            shutil.rmtree(tmp)
        for r in range(args.runs):
            for name in here:
                tmp = Path(tempfile.mkdtemp(prefix=f"{n}-{name}-", dir=work / "tmp"))
                log = runs_dir / f"{n}-{name}-{r + 1}.log"
                res = measure(
                    command(name, inventory, args.forks, tmp / "reports", []),
                    base_env_cli if name == "audit-cli-base" else env,
                    log,
                    args.sample_interval,
                    args.timeout,
                )
                why = check(name, res, log, tmp / "reports", hosts)
                if why:
                    res["invalid"] = why
                if name.startswith("audit"):
                    res["report_bytes"] = report_sizes(tmp / "reports")
                size["contenders"][name]["runs"].append(res)
                shutil.rmtree(tmp)
                print(
                    f"N={n:<4} run {r + 1}/{args.runs} {name:<15} wall {res['wall_s']:7.2f} s  "
                    f"cpu {res['cpu_s']:7.2f} s  maxrss {res['max_rss_mib']:6.0f} MiB  "
                    f"tree pss {res['tree_peak_pss_mib']:5.0f} MiB  load {res['load1_before']:.1f}"
                    + (f"  INVALID: {why}" if why else ""),
                    file=sys.stderr,
                    flush=True,
                )
        if args.profile:
            size["profile"] = profile(
                n,
                inventory,
                hosts,
                args.forks,
                work,
                env,
                args.sample_interval,
                args.timeout,
                here,
                runs_dir,
                split_cpus=args.split_cpus,
            )
            for name, p in size["profile"].items():
                if name == "module_direct":
                    print(f"N={n:<4} module alone (one host): {json.dumps(p)}", file=sys.stderr)
                    continue
                print(
                    f"N={n:<4} profile {name:<15} wall {p['wall_s']:.2f} s cpu {p['cpu_s']:.2f} s = module "
                    f"{p['module_cpu_s']:.2f} s ({p['module_calls']} calls) "
                    f"+ controller {p['controller_cpu_s']:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
    if not args.no_report_build:
        report_n = [int(x) for x in args.report_sizes.split(",") if x.strip()] or sizes
        results["report_build"] = report_build(report_n, work)
        for n, r in results["report_build"]["sizes"].items():
            print(
                f"N={n:<5} report build {r['build_s']:.2f} s + write {r['write_s']:.2f} s "
                f"({r['per_host_ms']:.2f} ms/host), files {json.dumps(r['bytes'])}",
                file=sys.stderr,
                flush=True,
            )
    results["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    summarize(results)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    invalid = [
        r for s in results["sizes"].values() for c in s["contenders"].values() for r in c["runs"] if r.get("invalid")
    ]
    if not args.keep_logs and not invalid:
        shutil.rmtree(runs_dir)
    print(table(results))
    print(f"\nresults: {out_path} (elapsed {results['elapsed_s']:.0f} s)")
    if invalid:
        print(f"{len(invalid)} run(s) did not count; logs kept in {runs_dir}", file=sys.stderr)
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
