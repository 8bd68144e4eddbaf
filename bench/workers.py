#!/usr/bin/env python3
"""Region-local execution across a long link: `gpufleet audit` of 20 targets from a controller on the far side of
the emulated link (bench/wanemu.c, bench/benchlib/lab.py: 180 ms RTT by default), direct (every target's SSH
connection crosses the link) against `--worker` (one SSH stream to an execution node inside the region, which
audits the targets over the region's own network). Alternated, cold runs; wall time and the link's packets and
request/response turns; the findings of both must be the same.

The region (namespace b1) holds the execution node (sshd on port 22, prepared by playbooks/execution_node.yml) and
the targets (sshd on ports 2201...), each a container sharing b1's network; the controller runs in namespace a1.

    .venv/bin/python bench/workers.py                 # 20 targets, 180 ms, 2 runs of each
    .venv/bin/python bench/workers.py --targets 5 --runs 1

Needs root, podman and the lab image (make lab), the emulator's build dependencies (installed when missing).
Writes bench/results/workers-<date>.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.ansible_link import ANSIBLE_DEPS, SSHD_CONFIG, ssh_keys, sshd_image  # noqa: E402
from benchlib.base import (  # noqa: E402
    REPO,
    RESULTS,
    VENV_BIN,
    finish,
    log,
    median,
    raise_interrupted,
    result_head,
    run,
    run_info,
)
from benchlib.lab import DEPS, PREFIX, Lab, build_emulator, ensure_deps  # noqa: E402
from benchlib.tables import fmt, markdown_table  # noqa: E402

FIRST_PORT = 2201


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    return {
        name: [h["status"], sorted([f["rule"], f["status"]] for f in h["findings"])]
        for name, h in report["hosts"].items()
    }


def audit(lab: Lab, mode: str, r: int, inventory: Path, tmp: Path, node: str, ssh_opts: str, forks: int) -> dict:
    out = tmp / f"reports-{mode}-{r}"
    cmd = ["ip", "netns", "exec", lab.ns("a1"), str(VENV_BIN / "python"), "-m", "gpufleet.cli", "audit"]
    cmd += ["-i", str(inventory), "--out", str(out), "-f", str(forks)]
    if mode == "worker":
        cmd += ["--worker", f"region={node}", f"--worker-ssh-args={ssh_opts}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    # a fresh ControlPath dir: every run starts cold, as a new audit does
    cp = tmp / f"cp-{mode}-{r}"
    cp.mkdir()
    env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(cp)
    lab.emu_cmd("reset")
    started = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)
    wall = time.monotonic() - started
    st = lab.emu_stats()
    for sock in cp.iterdir():  # close this run's master connections (ControlPersist would keep them)
        subprocess.run(
            ["ip", "netns", "exec", lab.ns("a1"), "ssh", "-O", "exit", "-o", f"ControlPath={sock}", "x"],
            capture_output=True,
            timeout=30,
        )
    report: dict[str, Any] = {}
    try:
        report = json.loads((out / "latest" / "report.json").read_text())
    except (OSError, ValueError):
        log(f"  {mode} run {r}: no report (rc {res.returncode}):\n{res.stderr[-2000:]}")
    hosts = report.get("summary", {}).get("hosts", {})
    entry = {
        "mode": mode,
        "run": r,
        "wall_s": round(wall, 2),
        "rc": res.returncode,
        "hosts_ok": hosts.get("ok"),
        "hosts_total": hosts.get("total"),
        "via": sorted({h.get("via", "direct") for h in report.get("hosts", {}).values()}),
        "packets": st["a2b"]["in_pkts"] + st["b2a"]["in_pkts"],
        "turns": st["a2b"]["turns"],
        "syns": st["a2b"]["syns"],
        "load1": round(os.getloadavg()[0], 2),
        "_verdicts": verdicts(report) if report else None,
    }
    log(
        f"  {mode:>6} run {r}: {entry['wall_s']:.1f} s, {entry['hosts_ok']}/{entry['hosts_total']} ok, "
        f"{entry['syns']} SYNs, {entry['packets']} packets over the link"
    )
    return entry


def measure(args: argparse.Namespace) -> dict[str, Any]:
    ensure_deps({**DEPS, **ANSIBLE_DEPS})
    build_emulator()
    t0, load_before = time.monotonic(), os.getloadavg()
    image = sshd_image()
    lab = Lab(1, 1500, args.rtt_ms / 2, args.rate_mbit, args.buffer_ms)
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpufleet-workers-bench-") as tmpdir, lab.running() as session:
        tmp = Path(tmpdir)
        lab.create()
        lab.start_emulator()
        keys = tmp / "keys"
        keys.mkdir()
        ssh_keys(keys, keys, "gpufleet-bench")
        region = lab.addr("b", 1)
        roles = {"node": 22, **{f"t{i:02d}": FIRST_PORT + i - 1 for i in range(1, args.targets + 1)}}
        token = secrets.token_hex(2)
        for role, port in roles.items():
            conf = SSHD_CONFIG.format(addr=f"{region}:{port}").replace("/bench/", f"{keys}/")
            conf = conf.replace(f"{keys}/sshd.pid", f"/run/sshd-{role}.pid").replace("LogLevel DEBUG1", "LogLevel INFO")
            (keys / f"sshd_config-{role}").write_text(conf)
            name = f"{PREFIX}{lab.token}-{token}-{role}"
            run(
                ["podman", "run", "-d", "--name", name, "--network", f"ns:/run/netns/{lab.ns('b1')}",
                 "-v", f"{keys}:{keys}", image, "/usr/sbin/sshd", "-D", "-f", f"{keys}/sshd_config-{role}"],
            )  # fmt: skip
            lab.containers.append(name)
        node_name = f"{PREFIX}{lab.token}-{token}-node"
        ssh_opts = (
            f"-i {keys}/id_ed25519 -o IdentitiesOnly=yes -o UserKnownHostsFile=/dev/null "
            "-o StrictHostKeyChecking=no -o LogLevel=ERROR"
        )
        log(f"region {region}: execution node + {args.targets} targets; preparing the node (execution_node.yml) ...")
        node_inv = tmp / "node.json"
        node_inv.write_text(
            json.dumps(
                {
                    "all": {
                        "hosts": {
                            "node": {
                                "ansible_connection": "containers.podman.podman",
                                "ansible_host": node_name,
                                "ansible_python_interpreter": "/usr/bin/python3",
                            }
                        }
                    }
                }
            )
        )
        prep = subprocess.run(
            [str(VENV_BIN / "ansible-playbook"), "-i", str(node_inv), str(REPO / "playbooks" / "execution_node.yml")],
            capture_output=True, text=True, cwd=REPO, timeout=900,
            env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        )  # fmt: skip
        if prep.returncode != 0:
            raise RuntimeError(f"execution_node.yml failed:\n{prep.stdout[-3000:]}")
        ping = lab.ping(1)
        log(f"  ping a1 -> b1: {fmt(ping['avg_ms'])} ms")
        targets = {
            role: {"ansible_port": port} for role, port in roles.items() if role != "node"
        }  # the node is not audited
        inventory = tmp / "fleet.json"
        inventory.write_text(
            json.dumps(
                {
                    "all": {
                        "vars": {
                            "ansible_host": region,
                            "ansible_user": "root",
                            "ansible_ssh_private_key_file": f"{keys}/id_ed25519",
                            "ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no",
                            "ansible_python_interpreter": "/usr/bin/python3",
                            "gpufleet_sample_seconds": args.sample_seconds,
                        },
                        "children": {"region": {"hosts": targets}},
                    }
                }
            )
        )
        node = f"ssh://root@{region}"
        for r in range(1, args.runs + 1):
            for mode in ("direct", "worker") if r % 2 else ("worker", "direct"):
                runs.append(audit(lab, mode, r, inventory, tmp, node, ssh_opts, args.forks))
        if session.interrupted:
            return {}
        same = len({json.dumps(e["_verdicts"], sort_keys=True) for e in runs}) == 1 and runs[0]["_verdicts"]
        for e in runs:
            e.pop("_verdicts")
        summary = {}
        for mode in ("direct", "worker"):
            mine = [e for e in runs if e["mode"] == mode]
            summary[mode] = {
                "wall_s_median": median([e["wall_s"] for e in mine]),
                "syns_median": median([e["syns"] for e in mine]),
                "packets_median": median([e["packets"] for e in mine]),
                "turns_median": median([e["turns"] for e in mine]),
                "all_hosts_ok": all(e["hosts_ok"] == args.targets for e in mine),
            }
        d, w = summary["direct"]["wall_s_median"], summary["worker"]["wall_s_median"]
        result = {
            **result_head("workers", " ".join(sys.argv)),
            "link": {"rtt_ms": args.rtt_ms, "rate_mbit": args.rate_mbit, "buffer_ms": args.buffer_ms, "ping": ping},
            "emulator": lab.emulator_info(),
            "targets": args.targets,
            "forks": args.forks,
            "findings_equal": bool(same),
            "summary": summary,
            "speedup": round(d / w, 2) if d and w else None,
            "runs": runs,
            **run_info(load_before, t0),
        }
    return result


def report(result: dict[str, Any]) -> str:
    s = result["summary"]
    rows = [
        [
            mode,
            fmt(s[mode]["wall_s_median"]),
            fmt(s[mode]["syns_median"]),
            fmt(s[mode]["packets_median"]),
            fmt(s[mode]["turns_median"]),
            "yes" if s[mode]["all_hosts_ok"] else "NO",
        ]
        for mode in ("direct", "worker")
    ]
    ping = fmt(result["link"]["ping"]["avg_ms"])
    head = (
        f"{result['targets']} targets, RTT {result['link']['rtt_ms']:g} ms (ping {ping}"
        f" ms), forks {result['forks']}; median of {len(result['runs']) // 2} run(s) each; same findings: "
        f"{'yes' if result['findings_equal'] else 'NO'}; direct/worker wall time: {result['speedup']}x"
    )
    table = markdown_table(
        ["mode", "wall s", "SYNs over the link", "packets over the link", "turns", "all hosts ok"], "lrrrrl", rows
    )
    return head + "\n" + table


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", type=int, default=20, help="targets in the region (default 20)")
    p.add_argument("--runs", type=int, default=2, help="runs of each mode, alternated (default 2)")
    p.add_argument("--rtt-ms", type=float, default=180.0, help="round-trip time of the link (default 180)")
    p.add_argument("--rate-mbit", type=float, default=1000.0, help="bottleneck rate (default 1000)")
    p.add_argument("--buffer-ms", type=float, default=20.0, help="bottleneck buffer in ms (default 20)")
    p.add_argument("--forks", type=int, default=25, help="Ansible forks, both modes (default 25, as ansible.cfg)")
    p.add_argument("--sample-seconds", type=float, default=0.2, help="the audit's swap-rate sample (default 0.2)")
    p.add_argument("--out", type=Path, help="results file (default bench/results/workers-<date>.json)")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("workers.py: needs root (network namespaces, podman)")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupted)
    result = measure(args)
    finish(result, report, args.out or RESULTS / f"workers-{dt.date.today().isoformat()}.json")
    return 0 if result else 130


if __name__ == "__main__":
    sys.exit(main())
