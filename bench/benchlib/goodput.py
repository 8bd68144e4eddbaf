"""`wan.py iperf`: TCP goodput over the emulated long link for three configurations of its two ends, stock,
TuneD's network-throughput and gpufleet's network_tuning role (applied through ansible-playbook), alternated at
each loss rate and stream count; medians, ratios and the targets they are held to."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import iperf3
from .base import (
    REPO,
    RESULTS,
    VENV_BIN,
    WORK,
    finish,
    log,
    median,
    result_head,
    run,
    run_info,
    yaml_value,
)
from .lab import DEPS, NS_KEYS, Lab, build_emulator, capacity_check, emu_summary, ensure_deps
from .tables import fmt, fmt_ratio, markdown_table, pct

CONFIGS = ("stock", "tuned", "gpufleet")
TUNED = {  # TuneD's network-throughput profile (the keys a network namespace can set)
    "net.ipv4.tcp_rmem": "4096 87380 16777216",
    "net.ipv4.tcp_wmem": "4096 16384 16777216",
}
TARGETS = {"ratio_0.1%_min": 40.0, "ratio_1%_min": 150.0, "goodput_0.1%_min_mbps": 0.5 * 956}

APPLY_PLAY = """- name: Tune both ends of the long link (gpufleet.tuning.network_tuning)
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.tuning.network_tuning
"""


def apply_gpufleet(
    lab: Lab, i: int, path_mtu: int, rtt_ms: float, gbps: float, tmp: Path, role_vars: dict[str, Any]
) -> dict[str, Any]:
    """Run the network_tuning role on both ends of pair i with ansible-playbook (local connection whose Python
    runs inside the namespace), the link declared in gpufleet_policy."""
    hosts = {}
    for side, site, peer in (("a", "sg", "fra"), ("b", "fra", "sg")):
        ns = lab.ns(f"{side}{i}")
        wrapper = tmp / f"python-{side}{i}"
        wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {ns} {VENV_BIN / "python"} "$@"\n')
        wrapper.chmod(0o755)
        hosts[f"wan-{side}"] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(wrapper),
            "gpufleet_policy": {
                "site": site,
                "sites": {site: {"links": {peer: {"rtt_ms": rtt_ms, "bandwidth_gbps": gbps}}}},
            },
            "network_tuning_interfaces": ["wan0"],
            "network_tuning_mtu": path_mtu if path_mtu > 1500 else None,
            "network_tuning_load_bbr": False,
            "network_tuning_sysctl_file": str(tmp / f"etc-{side}/sysctl.d/61-gpufleet-network.conf"),
            "network_tuning_persist_method": "none",
            **role_vars,
        }
    inv, play = tmp / "apply-hosts.json", tmp / "apply.yml"
    inv.write_text(json.dumps({"all": {"hosts": hosts}}))
    play.write_text(APPLY_PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    res = run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(play)], check=False, cwd=REPO, env=env)
    (WORK / f"apply-{lab.token}.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"ansible-playbook failed ({res.returncode}), see {WORK / f'apply-{lab.token}.log'}")
    recap = re.findall(r"^(wan-[ab])\s+: (.*)$", res.stdout, re.M)
    return {"seconds": round(time.monotonic() - started, 1), "recap": dict(recap)}


def ns_settings(lab: Lab, ns: str) -> dict[str, Any]:
    values = {k: " ".join(lab.sysctl(ns, k).split()) for k in NS_KEYS}
    values["mtu"] = int(lab.nsexec(ns, "cat", "/sys/class/net/wan0/mtu").stdout)
    return values


def iperf_once(lab: Lab, i: int, streams: int, duration: int) -> dict[str, Any]:
    cmd = ["iperf3", "-c", lab.addr("b", i), "-t", str(duration), "-P", str(streams), "-J", "--connect-timeout", "5000"]
    res = lab.nsexec(lab.ns(f"a{i}"), *cmd, check=False, timeout=duration + 60)
    out = iperf3.parse(res.stdout, res.stderr)
    out.pop("sent_mbps_per_s", None)  # not kept here (coexist keeps it)
    return out


def measure(args: argparse.Namespace) -> int:
    """`wan.py iperf`: set up the lab, run every cell, print the tables, write the results file."""
    losses = [float(x) for x in args.losses.split(",")]
    streams_list = [int(x) for x in args.streams.split(",")]
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"wan.py: unknown config {c!r} (choose from {', '.join(CONFIGS)})")
    role_vars = {}
    for item in args.role_var:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("network_tuning_"):
            sys.exit(f"wan.py: --role-var wants network_tuning_KEY=VALUE (YAML value), not {item!r}")
        role_vars[key] = yaml_value(value)
    ensure_deps(DEPS)
    build_emulator()
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    load_before = os.getloadavg()
    lab = Lab(len(configs), args.path_mtu, args.rtt_ms / 2, args.rate_mbit, args.buffer_ms, args.emu_rt)
    pair = {c: i + 1 for i, c in enumerate(configs)}
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpufleet-wan-") as tmpdir:
        with lab.running() as session:
            n = len(losses) * len(streams_list) * len(configs) * args.runs
            log(
                f"lab {lab.token}: router + {len(configs)} endpoint pairs, path MTU {args.path_mtu}; {n} iperf3 runs "
                f"of {args.duration} s, about {n * (args.duration + 1.9) / 60 + 0.5:.0f} min"
            )
            lab.create()
            lab.start_emulator(loss=0.0)
            settings: dict[str, Any] = {}
            cubic = [lab.ns(f"{s}{pair[c]}") for c in configs if c in ("stock", "tuned") for s in "ab"]
            if cubic:
                lab.set_congestion_control(cubic, "cubic")
            if "tuned" in configs:
                for s in "ab":
                    for k, v in TUNED.items():
                        lab.sysctl(lab.ns(f"{s}{pair['tuned']}"), k, v)
            apply = None
            if "gpufleet" in configs:
                log("applying gpufleet.tuning.network_tuning to both ends of the gpufleet pair (ansible-playbook) ...")
                apply = apply_gpufleet(
                    lab, pair["gpufleet"], args.path_mtu, args.rtt_ms, args.rate_mbit / 1000, Path(tmpdir), role_vars
                )
                log(f"  done in {apply['seconds']} s: {apply['recap']}")
            for c in configs:
                settings[c] = {s: ns_settings(lab, lab.ns(f"{s}{pair[c]}")) for s in "ab"}
                a = settings[c]["a"]
                log(
                    f"  {c:9s} cc {a['net.ipv4.tcp_congestion_control']}, rmem {a['net.ipv4.tcp_rmem']}, "
                    f"wmem {a['net.ipv4.tcp_wmem']}, mtu_probing {a['net.ipv4.tcp_mtu_probing']}, "
                    f"slow_start_after_idle {a['net.ipv4.tcp_slow_start_after_idle']}, MTU {a['mtu']}"
                )
            for c in configs:
                lab.spawn(lab.ns(f"b{pair[c]}"), ["iperf3", "-s", "-B", lab.addr("b", pair[c])], f"iperf3-{c}")
            time.sleep(0.5)
            log("emulator capacity check: 4 TCP streams (BBR, large buffers) for 4 s, loss 0 ...")
            cap_pair = pair.get("gpufleet", 1)
            cap = capacity_check(lab, cap_pair, bbr="gpufleet" in pair)
            log(
                f"  offered {fmt(cap['offered_wire_mbps'])} Mbit/s at the emulator, forwarded "
                f"{fmt(cap['a2b_wire_mbps'])} on average, best 100 ms {fmt(cap['peak_100ms_mbps'])} "
                f"(rate {cap['emulator_rate_mbps']:.0f}), buffer drops "
                f"{cap['a2b_drop_buffer']}, kernel queue drops {cap['kernel_dropped']}, late max "
                f"{cap['late_max_ms']} ms, late > 1 ms {cap['late_over_1ms_pct']} % "
                f"-> {'keeps up' if cap['keeps_up'] else 'DOES NOT keep up (CPU-starved?)'}"
            )
            for loss in losses:
                lab.set_loss(loss)
                for streams in streams_list:
                    for r in range(1, args.runs + 1):
                        for c in configs:
                            i = pair[c]
                            lab.flush_metrics(i)
                            ping = lab.ping(i)
                            kq0 = lab.kernel_queue()
                            lab.emu_cmd("reset")
                            res = iperf_once(lab, i, streams, args.duration)
                            emu = emu_summary(lab.emu_stats(), kq0, lab.kernel_queue())
                            entry = {"loss": loss, "streams": streams, "config": c, "run": r, "ping": ping}
                            entry.update(res, emulator=emu, load1=round(os.getloadavg()[0], 2))
                            runs.append(entry)
                            log(
                                f"loss {pct(loss):7s} P{streams} {c:9s} run {r}: ping -U {fmt(ping['avg_ms'])} ms, "
                                + (
                                    f"{fmt(res['mbps'])} Mbit/s ({res['cc']}, retr {res['retransmits']}), "
                                    if "mbps" in res
                                    else f"FAILED {res.get('error')}, "
                                )
                                + f"emulator: drops loss/buffer {emu['a2b_drop_loss']}/{emu['a2b_drop_buffer']}, "
                                f"kernel {emu['kernel_dropped']}, late max {emu['late_max_ms']} ms, "
                                f"load {os.getloadavg()[0]:.1f}"
                            )
            result = summarise(args, configs, losses, streams_list, runs, role_vars)
            result.update(
                settings=settings,
                emulator=lab.emulator_info(),
                ansible_apply=apply,
                capacity_check=cap,
                **run_info(load_before, t0),
            )
        if session.interrupted:
            return 130
    finish(result, report, args.out or RESULTS / f"wan-{dt.date.today().isoformat()}.json")
    return 0 if all("mbps" in r for r in runs) else 1


def summarise(args, configs, losses, streams_list, runs, role_vars) -> dict[str, Any]:
    med: dict[str, dict[str, dict[str, float | None]]] = {}
    for c in configs:
        for loss in losses:
            for s in streams_list:
                vals = [
                    r["mbps"] for r in runs if (r["config"], r["loss"], r["streams"]) == (c, loss, s) and "mbps" in r
                ]
                med.setdefault(c, {}).setdefault(pct(loss), {})[f"P{s}"] = median(vals)
    ratios: dict[str, Any] = {}
    for num, den in (("gpufleet", "stock"), ("gpufleet", "tuned"), ("tuned", "stock")):
        if num in med and den in med:
            ratios[f"{num}/{den}"] = {
                pct(loss): {
                    f"P{s}": (
                        med[num][pct(loss)][f"P{s}"] / med[den][pct(loss)][f"P{s}"]
                        if med[num][pct(loss)][f"P{s}"] and med[den][pct(loss)][f"P{s}"]
                        else None
                    )
                    for s in streams_list
                }
                for loss in losses
            }
    targets = []
    gs = ratios.get("gpufleet/stock", {})
    if 1 in streams_list:
        for loss, key in ((0.001, "ratio_0.1%_min"), (0.01, "ratio_1%_min")):
            if pct(loss) in gs:
                v = gs[pct(loss)]["P1"]
                targets.append(
                    {
                        "what": f"1 stream gpufleet ÷ stock at {pct(loss)}",
                        "target": f"≥ {TARGETS[key]:g}×",
                        "value": v,
                        "met": bool(v and v >= TARGETS[key]),
                    }
                )
        if "gpufleet" in med and pct(0.001) in med["gpufleet"]:
            v = med["gpufleet"][pct(0.001)]["P1"]
            t = TARGETS["goodput_0.1%_min_mbps"]
            targets.append(
                {
                    "what": "1 stream gpufleet at 0.1 % (Mbit/s)",
                    "target": f"≥ {t:g} (50 % of 956)",
                    "value": v,
                    "met": bool(v and v >= t),
                }
            )
    gt = ratios.get("gpufleet/tuned")
    if gt:
        cells = [v for per in gt.values() for v in per.values()]
        worst = min((v for v in cells if v), default=None)
        targets.append(
            {
                "what": "gpufleet ahead of tuned in every cell",
                "target": "> 1× everywhere",
                "value": worst,
                "met": bool(cells and all(v and v > 1 for v in cells)),
            }
        )
    return {
        **result_head("wan"),
        "params": {
            "rtt_ms": args.rtt_ms,
            "rate_mbit": args.rate_mbit,
            "buffer_ms": args.buffer_ms,
            "path_mtu": args.path_mtu,
            "losses": losses,
            "streams": streams_list,
            "configs": configs,
            "runs": args.runs,
            "duration_s": args.duration,
            "tuned_values": TUNED,
            "role_vars": role_vars,
        },
        "medians_mbps": med,
        "ratios": ratios,
        "targets": targets,
        "runs": runs,
    }


def report(result: dict[str, Any]) -> str:
    """What `wan.py iperf` prints at the end: medians and ratios per config (rows) and loss rate (columns, the
    stream counts side by side), the targets, the emulator's health. Recomputes nothing: a results file's
    dict gives the same text."""
    if not result:
        return ""
    p = result["params"]
    losses, streams = p["losses"], p["streams"]
    label = " / ".join(f"{s} stream{'s' if s > 1 else ''}" for s in streams)
    rows = [
        [c, *(" / ".join(fmt(per[pct(x)][f"P{s}"]) for s in streams) for x in losses)]
        for c, per in result["medians_mbps"].items()
    ]
    rows += [
        [name.replace("/", " ÷ "), *(" / ".join(fmt_ratio(per[pct(x)][f"P{s}"]) for s in streams) for x in losses)]
        for name, per in result["ratios"].items()
    ]
    lines = [
        "",
        f"Mbit/s ({label}), medians of {p['runs']} runs, {p['duration_s']} s each, RTT {p['rtt_ms']:g} ms, "
        f"{p['rate_mbit']:g} Mbit/s bottleneck, path MTU {p['path_mtu']}:",
        "",
        markdown_table(["config", *(f"{pct(x)} loss" for x in losses)], "l" + "r" * len(losses), rows),
        "",
    ]
    for t in result["targets"]:
        v = t["value"]
        shown = "–" if v is None else f"{v:.1f}" if "Mbit" in t["what"] else f"{v:.1f}×"
        lines.append(f"  {t['what']}: {shown} (target {t['target']}): {'met' if t['met'] else 'MISSED'}")
    cap = result.get("capacity_check") or {}
    lines.append(
        f"  emulator: best 100 ms {fmt(cap.get('peak_100ms_mbps'))} Mbit/s of {fmt(cap.get('emulator_rate_mbps'))} "
        f"({'keeps up' if cap.get('keeps_up') else 'did NOT keep up'}); kernel queue drops over all runs: "
        f"{sum(r['emulator']['kernel_dropped'] for r in result['runs'])}; load average before/after "
        f"{result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f}; {result['seconds']:.0f} s"
    )
    return "\n".join(lines)
