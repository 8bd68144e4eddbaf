"""`wan.py ansible`: playbooks/audit.yml (and Ansible's ping, and network_tuning in check mode) over SSH to a
podman container behind the emulated link, the shipped ansible.cfg against Ansible's defaults (an empty config),
alternated, cold runs; wall time, TCP connections, SSH exec requests, SFTP sessions, request/response turns."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .base import REPO, RESULTS, VENV_BIN, WORK, finish, log, median, result_head, run, run_info
from .lab import DEPS, PREFIX, Lab, build_emulator, ensure_deps
from .tables import fmt, markdown_table, pct

SSHD_IMAGE_BASE = "localhost/gpufleet-debian12:current"
SSHD_RECIPE = f"""FROM {SSHD_IMAGE_BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      openssh-server >/dev/null && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* && mkdir -p /run/sshd
"""
# Debian packages for the commands the benchmark runs (and the emulator's header)
ANSIBLE_DEPS = {"ssh": "openssh-client", "ssh-keygen": "openssh-client", "podman": None}
TARGETS = {"ansible_speedup_min": 2}
SSHD_CONFIG = """ListenAddress {addr}
HostKey /bench/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile /bench/authorized_keys
StrictModes no
UseDNS no
LogLevel DEBUG1
PidFile /bench/sshd.pid
MaxSessions 100
MaxStartups 100
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def sshd_image() -> str:
    """localhost/gpufleet-wan-sshd:<recipe hash>: the lab's Debian 12 image plus openssh-server (bench only)."""
    if run(["podman", "image", "exists", SSHD_IMAGE_BASE], check=False).returncode != 0:
        log(f"{SSHD_IMAGE_BASE} is missing: running scripts/lab-setup.sh (what `make lab` does) ...")
        subprocess.run([str(REPO / "scripts" / "lab-setup.sh")], check=True)
    base_id = run(["podman", "image", "inspect", "--format", "{{.Id}}", SSHD_IMAGE_BASE]).stdout.strip()
    tag = hashlib.sha256((SSHD_RECIPE + base_id).encode()).hexdigest()[:12]
    image = f"localhost/gpufleet-wan-sshd:{tag}"
    if run(["podman", "image", "exists", image], check=False).returncode != 0:
        log(f"building {image} (openssh-server on {SSHD_IMAGE_BASE}; once) ...")
        with tempfile.TemporaryDirectory(prefix="gpufleet-wan-image-") as ctx:
            (Path(ctx) / "Containerfile").write_text(SSHD_RECIPE)
            run(["podman", "build", "--network", "host", "-t", image, ctx], timeout=900)
    return image


def ssh_keys(client: Path, host: Path, comment: str) -> Path:
    """A client key pair (``client/id_ed25519``) that sshd accepts (``host/authorized_keys``) and the host key
    (``host/ssh_host_ed25519_key``); returns the client's private key."""
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client / "id_ed25519"), "-C", comment])
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host / "ssh_host_ed25519_key")])
    shutil.copy(client / "id_ed25519.pub", host / "authorized_keys")
    return client / "id_ed25519"


def sshd_log_counts(text: str) -> dict[str, int]:
    return {
        "tcp_connections": len(re.findall(r"Connection from \S+ port \d+ on", text)),
        "exec_requests": len(re.findall(r"server_input_channel_req: channel \d+ request exec", text)),
        "sftp_sessions": len(re.findall(r"Starting session: subsystem 'sftp'", text)),
        "auths": len(re.findall(r"Accepted publickey", text)),
    }


# What runs over the link. "audit" is the product's main job (one module call per host, gather_facts: false);
# "tune-check" is a play as people write them (no gather_facts line: Ansible's default gathers facts), the
# network_tuning role in check mode, changing nothing on the target.
TUNE_CHECK_PLAY = """- name: Long-haul network tuning, check mode (a play without a gather_facts line)
  hosts: all
  roles:
    - role: gpufleet.tuning.network_tuning
      vars:
        network_tuning_load_bbr: false
"""
WORKLOADS = {
    "audit": "playbooks/audit.yml: the audit, one module call, report on the controller",
    "ping": "ansible all -m ansible.builtin.ping: Ansible's minimal round trip, the floor for one module call",
    "tune-check": "roles/network_tuning in --check, in a play that leaves fact gathering to the config",
}


def ansible_run(
    lab: Lab, workload: str, contender: str, cfg: str, r: int, rtt: float, inv: Path, tmp: Path, sshd_log: Path
) -> dict[str, Any]:
    """One cold run of a workload from namespace a1 to the container with ANSIBLE_CONFIG=cfg."""
    tag = f"{workload}-{contender}-{rtt:g}-{r}"
    cp_dir = tmp / f"cp-{tag}"  # a fresh ControlPath dir: every run starts cold, as a new audit does
    cp_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=cfg,
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(cp_dir),
        ANSIBLE_NOCOLOR="1",
    )
    report_dir = tmp / f"reports-{tag}"
    cmd = ["ip", "netns", "exec", lab.ns("a1"), str(VENV_BIN / "ansible-playbook"), "-i", str(inv)]
    if workload == "audit":
        cmd += [str(REPO / "playbooks" / "audit.yml"), "-e", f"gpufleet_report_dir={report_dir}"]
    elif workload == "ping":
        cmd = ["ip", "netns", "exec", lab.ns("a1"), str(VENV_BIN / "ansible"), "all", "-i", str(inv)]
        cmd += ["-m", "ansible.builtin.ping"]
    else:
        play = tmp / "tune-check.yml"
        play.write_text(TUNE_CHECK_PLAY)
        cmd += [str(play), "--check"]
    ping = lab.ping(1)
    offset = sshd_log.stat().st_size
    lab.emu_cmd("reset")
    started = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
    wall = time.monotonic() - started
    st = lab.emu_stats()
    with open(sshd_log, errors="replace") as fh:
        fh.seek(offset)
        counts = sshd_log_counts(fh.read())
    # close this run's master connection (ControlPersist would keep it for the next run)
    for sock in cp_dir.iterdir():
        exit_cmd = ["ip", "netns", "exec", lab.ns("a1"), "ssh", "-O", "exit", "-o", f"ControlPath={sock}", "x"]
        subprocess.run(exit_cmd, capture_output=True, timeout=30)
    (WORK / f"ansible-{tag}-{lab.token}.log").write_text(res.stdout + res.stderr)
    ok = False
    with contextlib.suppress(Exception):
        if workload == "audit":
            rep = json.loads((report_dir / "latest" / "report.json").read_text())
            ok = res.returncode == 0 and rep["summary"]["hosts"]["ok"] == 1
        elif workload == "ping":
            ok = res.returncode == 0 and "wan-target | SUCCESS" in res.stdout
        else:
            ok = res.returncode == 0 and bool(re.search(r"wan-target\s+: ok=\d+ .*failed=0", res.stdout))
    tasks = re.search(
        r"wan-target\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=\d+\s+skipped=(\d+)", res.stdout
    )
    return {
        "workload": workload,
        "contender": contender,
        "rtt_ms": rtt,
        "run": r,
        "wall_s": round(wall, 2),
        "rc": res.returncode,
        "ok": ok,
        "ping_ms": ping["avg_ms"],
        **counts,
        "syns": st["a2b"]["syns"],
        "packets": st["a2b"]["in_pkts"] + st["b2a"]["in_pkts"],
        "turns": st["a2b"]["turns"],
        "tasks_ok_changed_skipped": [int(x) for x in tasks.groups()] if tasks else None,
        "load1": round(os.getloadavg()[0], 2),
    }


def measure(args: argparse.Namespace) -> int:
    """`wan.py ansible`: set up the lab and the target, run every workload, print the table, write the results."""
    ensure_deps({**DEPS, **ANSIBLE_DEPS})
    build_emulator()
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    load_before = os.getloadavg()
    image = sshd_image()
    lab = Lab(1, 1500, args.rtt_ms / 2, args.rate_mbit, args.buffer_ms, args.emu_rt)
    contenders = {"shipped": str(REPO / "ansible.cfg"), "defaults": None}
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"wan.py: unknown workload {w!r} (choose from {', '.join(WORKLOADS)})")
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpufleet-wan-") as tmpdir:
        tmp = Path(tmpdir)
        with lab.running() as session:
            lab.create()
            lab.start_emulator(loss=args.loss)
            # keys and sshd config for the target, in a directory only this run uses
            bench_dir = tmp / "target"
            bench_dir.mkdir()
            ssh_keys(tmp, bench_dir, "gpufleet-wan")
            target = lab.addr("b", 1)
            (bench_dir / "sshd_config").write_text(SSHD_CONFIG.format(addr=target))
            name = f"{PREFIX}{lab.token}-target"
            run(
                [
                    "podman",
                    "run",
                    "-d",
                    "--name",
                    name,
                    "--network",
                    f"ns:/run/netns/{lab.ns('b1')}",
                    "-v",
                    f"{bench_dir}:/bench",
                    image,
                    "/usr/sbin/sshd",
                    "-D",
                    "-f",
                    "/bench/sshd_config",
                    "-E",
                    "/bench/sshd.log",
                ]
            )
            lab.containers.append(name)
            sshd_log = bench_dir / "sshd.log"
            for _ in range(100):
                if sshd_log.exists() and "Server listening" in sshd_log.read_text():
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError(f"sshd did not start in {name}: {sshd_log.read_text() if sshd_log.exists() else ''}")
            empty_cfg = tmp / "empty.cfg"
            empty_cfg.write_text("# Ansible's defaults\n")
            ssh_args = (
                f"-o UserKnownHostsFile={tmp / 'known_hosts'} -o GlobalKnownHostsFile=/dev/null "
                "-o StrictHostKeyChecking=no -o IdentitiesOnly=yes -o IdentityAgent=none"
            )
            inv = tmp / "hosts.json"
            host_vars = {
                "ansible_host": target,
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(tmp / "id_ed25519"),
                "ansible_ssh_common_args": ssh_args,
                "gpufleet_sample_seconds": args.sample_seconds,
                # set per fleet, as inventories/example does (there: the venv prereqs installs pynvml into);
                # --discover-interpreter leaves it to Ansible's discovery (one more SSH command per host)
                **({} if args.discover_interpreter else {"ansible_python_interpreter": "/usr/bin/python3"}),
            }
            inv.write_text(json.dumps({"all": {"hosts": {"wan-target": host_vars}}}))
            ping = lab.ping(1)
            log(f"target {name} ({image}) at {target}, ping -U {fmt(ping['avg_ms'])} ms; loss {pct(args.loss)}")
            rtts = [args.rtt_ms] + ([0.0] if args.rtt0 else [])
            for r in range(1, args.runs + 1):
                for rtt in rtts:
                    lab.emu_cmd(f"delay {rtt / 2}")
                    for w in workloads:
                        for c in contenders:
                            cfg = contenders[c] or str(empty_cfg)
                            entry = ansible_run(lab, w, c, cfg, r, rtt, inv, tmp, sshd_log)
                            runs.append(entry)
                            log(
                                f"{w:10s} RTT {rtt:3.0f} ms run {r} {c:8s}: {entry['wall_s']:6.2f} s "
                                f"{'ok' if entry['ok'] else 'FAILED'}, TCP connections {entry['syns']} "
                                f"(sshd: {entry['tcp_connections']}), exec {entry['exec_requests']}, "
                                f"sftp {entry['sftp_sessions']}, client turns {entry['turns']}, packets "
                                f"{entry['packets']}, ping {fmt(entry['ping_ms'])} ms, load {entry['load1']}"
                            )
            shutil.copy(sshd_log, WORK / f"sshd-{lab.token}.log")
            result = summarise(args, workloads, runs, image)
            result.update(
                **run_info(load_before, t0),
            )
        if session.interrupted:
            return 130
    finish(result, report, args.out or RESULTS / f"wan-ansible-{dt.date.today().isoformat()}.json")
    return 0 if runs and all(r["ok"] for r in runs) else 1


def summarise(args, workloads, runs, image) -> dict[str, Any]:
    keys = ("wall_s", "syns", "tcp_connections", "exec_requests", "sftp_sessions", "turns", "packets")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    out: dict[str, Any] = {}
    long, zero = f"{args.rtt_ms:g}", "0"
    for w in workloads:
        med: dict[str, dict[str, Any]] = {}
        for rtt in sorted({r["rtt_ms"] for r in runs}, reverse=True):
            for c in ("shipped", "defaults"):
                ok = [r for r in runs if (r["workload"], r["contender"], r["rtt_ms"]) == (w, c, rtt) and r["ok"]]
                med[f"{c}@{rtt:g}"] = {k: median([r[k] for r in ok]) for k in keys} | {
                    "contender": c,
                    "rtt_ms": rtt,
                    "runs_ok": len(ok),
                }
        speedup = ratio(med[f"defaults@{long}"]["wall_s"], med[f"shipped@{long}"]["wall_s"])
        network: dict[str, float | None] = {}
        if f"shipped@{zero}" in med:
            for c in ("shipped", "defaults"):
                w1, w0 = med[f"{c}@{long}"]["wall_s"], med[f"{c}@{zero}"]["wall_s"]
                network[c] = w1 - w0 if w1 is not None and w0 is not None else None
        out[w] = {
            "what": WORKLOADS[w],
            "medians": med,
            "speedup": speedup,
            "network_seconds": network,
            "network_speedup": ratio(network.get("defaults"), network.get("shipped")),
        }
    per_call = {}
    if "audit" in out and "ping" in out:
        for key, m in out["audit"]["medians"].items():
            floor = out["ping"]["medians"].get(key, {}).get("wall_s")
            per_call[key] = ratio(m["wall_s"], floor)
    targets = [
        {
            "what": f"{w}: defaults ÷ shipped wall at {long} ms",
            "target": f"≥ {TARGETS['ansible_speedup_min']}×",
            "value": out[w]["speedup"],
            "met": bool(out[w]["speedup"] and out[w]["speedup"] >= TARGETS["ansible_speedup_min"]),
        }
        for w in workloads
    ]
    return {
        **result_head("wan-ansible"),
        "params": {
            "rtt_ms": args.rtt_ms,
            "rate_mbit": args.rate_mbit,
            "loss": args.loss,
            "runs": args.runs,
            "workloads": workloads,
            "sample_seconds": args.sample_seconds,
            "discover_interpreter": args.discover_interpreter,
            "image": image,
            "reference_rtt0": args.rtt0,
        },
        "workloads": out,
        "audit_over_ping": per_call,
        "targets": targets,
        "runs": runs,
    }


def report(result: dict[str, Any]) -> str:
    """What `wan.py ansible` prints at the end: per workload, RTT and config the median wall time and what went
    over the link; the targets; the time the link adds; audit ÷ ping. A results file's dict gives the same text."""
    if not result:
        return ""
    p = result["params"]
    rows = []
    for w, res in result["workloads"].items():
        for m in res["medians"].values():
            label = "shipped ansible.cfg" if m["contender"] == "shipped" else "Ansible defaults"
            rows.append(
                [
                    w,
                    f"{m['rtt_ms']:g} ms",
                    label,
                    f"{m['wall_s'] or 0:.2f}",
                    fmt(m["syns"]),
                    fmt(m["exec_requests"]),
                    fmt(m["sftp_sessions"]),
                    fmt(m["turns"]),
                    fmt(m["packets"]),
                ]
            )
    header = ["workload", "RTT", "ansible config", "wall s", "TCP conns", "SSH exec", "SFTP", "client turns", "packets"]
    lines = [
        "",
        f"Over SSH to one container, loss {pct(p['loss'])}, medians of {p['runs']} cold runs (audit "
        f"sample_seconds {p['sample_seconds']}):",
        "",
        markdown_table(header, "lrlrrrrrr", rows),
        "",
    ]
    for t in result["targets"]:
        shown = "–" if t["value"] is None else f"{t['value']:.2f}×"
        lines.append(f"  {t['what']}: {shown} (target {t['target']}): {'met' if t['met'] else 'MISSED'}")
    for w, res in result["workloads"].items():
        net = res["network_seconds"]
        if net.get("shipped") is not None and net.get("defaults") is not None:
            ns = res["network_speedup"]
            lines.append(
                f"  {w}: time the {p['rtt_ms']:g} ms link adds (wall at {p['rtt_ms']:g} ms − wall at 0 ms): shipped "
                f"{net['shipped']:.2f} s, defaults {net['defaults']:.2f} s" + (f" ({ns:.2f}×)" if ns else "")
            )
    for key, r in result.get("audit_over_ping", {}).items():
        if r:
            c, rtt = key.split("@")
            lines.append(f"  audit ÷ ping (one host, {c} config, RTT {rtt} ms): {r:.2f}×")
    lines.append(
        f"  load average before/after {result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f}; "
        f"{result['seconds']:.0f} s"
    )
    return "\n".join(lines)
