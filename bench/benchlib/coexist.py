"""`wan.py coexist`: what a tuned long-haul flow (BBR, 4 x BDP buffers: what network_tuning sets) does to the
traffic that shares the emulated link's bottleneck, a stock cubic flow from a neighbour host and the tuned host's
own other traffic, with BBR set host-wide, per route (`ip route ... congctl bbr` to the long-haul peer's prefix
only) or per destination following the routing table (network.congestion_control_scope: follow: route_follow.py's
table of its own and policy rule); each flow's goodput, its share of the link's drops, ss's view of its congestion
control; the bottleneck's drops; load averages."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import iperf3
from .base import RESULTS, WORK, finish, log, median, result_head, run, run_info
from .lab import DEPS, NS_KEYS, Lab, build_emulator, capacity_check, emu_summary, emulator_kept_up, ensure_deps
from .tables import fmt, fmt_count, markdown_table, pct

# One site (side a) shares the emulated link's bottleneck towards the far site (side b). The tuned host is three
# namespaces that differ only in how BBR is turned on, so that no case has to change a namespace's default
# congestion control between runs (a child namespace can choose cubic only while the host-wide allowed list has
# it): every endpoint is set up once.
COEX_ENDS = {
    "hw": ("a", 1),  # the tuned host, BBR host-wide: net.ipv4.tcp_congestion_control=bbr (in its namespace only)
    "pr": ("a", 2),  # the tuned host, BBR per route: default cubic, the long-haul peer's prefix routed `congctl bbr`
    "cu": ("a", 3),  # the tuned host's buffers without BBR: cubic everywhere
    # the tuned host, BBR following the routing table (scope follow): default cubic, route_follow.py sync - a rule to
    # the peer's prefix into table 7250, which mirrors the main table's default route with congctl bbr
    "fo": ("a", 6),
    "n": ("a", 4),  # a stock neighbour at the same site (cubic, stock buffers)
    "l": ("a", 5),  # a local peer at the same site: through the router, not through the emulated link
    "p": ("b", 1),  # the long-haul peer (the prefix the policy declares long-haul), tuned like the sender
    "q": ("b", 2),  # another destination behind the same bottleneck, stock; the policy does not list it
}
COEX_TUNED_HOSTS = {"host-wide": "hw", "per-route": "pr", "cubic": "cu", "follow": "fo"}
# flow -> (source: "host" = the case's tuned host, or a role; destination role; iperf3 port; what it is)
COEX_FLOWS = {
    "A": ("host", "p", 5201, "the tuned long-haul flow: the tuned host to its long-haul peer"),
    "B": ("n", "q", 5201, "a stock cubic flow from a neighbour host over the same bottleneck"),
    "own": (
        "host",
        "q",
        5202,
        "the tuned host's other traffic over the same bottleneck, to a destination not listed as long-haul",
    ),
    "local": ("host", "l", 5201, "the tuned host's local traffic (not over the link), iperf3 -b LOCAL_MBIT"),
}
COEX_CASES = {
    "B-alone": (None, ("B",), "the stock cubic flow alone"),
    "A-alone": ("per-route", ("A",), "the tuned long-haul flow alone (BBR: the same flow whichever way it is set)"),
    "both-cubic": ("cubic", ("A", "B", "own", "local"), "the tuned host's buffers without BBR: every flow cubic"),
    "host-wide": ("host-wide", ("A", "B", "own", "local"), "BBR host-wide: A, own and local are BBR, B cubic"),
    "per-route": ("per-route", ("A", "B", "own", "local"), "BBR per route to the long-haul peer: only A is BBR"),
    "follow": ("follow", ("A", "B", "own", "local"), "BBR following the routing table (scope follow): only A is BBR"),
    # not in the default set: the two-flow view (the tuned flow and the neighbour only)
    "A+B": ("per-route", ("A", "B"), "the tuned long-haul flow and the stock neighbour only"),
    "A+own-host-wide": ("host-wide", ("A", "own"), "host-wide: the tuned flow and the host's own other flow"),
    "A+own-per-route": ("per-route", ("A", "own"), "per-route: the tuned flow and the host's own other flow"),
    # not a scope: what a pacing cap on the long-haul flow would do (SO_MAX_PACING_RATE, iperf3 --fq-rate, at
    # --cap-share of the bottleneck), BBR per destination as in follow
    "follow-capped": ("follow", ("A", "B", "own", "local"), "follow, the tuned flow paced at most at --cap-share"),
}
COEX_DEFAULT_CASES = "B-alone,A-alone,both-cubic,host-wide,per-route,follow"
COEX_CAPPED = ("follow-capped",)
FOLLOW = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "route_follow.py"


def coex_buffer_bytes(rtt_ms: float, rate_mbit: float, factor: float = 4.0) -> int:
    """network_tuning's buffer: factor x bandwidth-delay product (network.buffer_factor, 4 since 46b78d1), capped
    at network.max_buffer_bytes (256 MiB): 90,000,000 bytes for 180 ms at 1 Gbit/s."""
    return int(min(factor * rtt_ms / 1000 * rate_mbit * 1e6 / 8, 256 * 2**20))


def coex_addr(role: str) -> str:
    side, i = COEX_ENDS[role]
    return Lab.addr(side, i)


def coex_setup(lab: Lab, rtt_ms: float, rate_mbit: float) -> dict[str, Any]:
    """Configure every endpoint once: buffers, default congestion control, the per-route congctl."""
    ns = {role: lab.ns(f"{side}{i}") for role, (side, i) in COEX_ENDS.items()}
    buf = coex_buffer_bytes(rtt_ms, rate_mbit)
    tuned = {
        "net.ipv4.tcp_rmem": f"4096 131072 {buf}",
        "net.ipv4.tcp_wmem": f"4096 16384 {buf}",
        "net.ipv4.tcp_mtu_probing": "1",
        "net.ipv4.tcp_slow_start_after_idle": "0",
    }
    for role in ("hw", "pr", "cu", "fo", "p"):
        for k, v in tuned.items():
            lab.sysctl(ns[role], k, v)
    # stock: what a new namespace copies from the host (tcp_rmem max 32 MiB, tcp_wmem max 4 MiB here), cubic
    lab.set_congestion_control([ns[r] for r in ("pr", "cu", "fo", "n", "l", "q")], "cubic")
    for role in ("hw", "p"):
        lab.sysctl(ns[role], "net.ipv4.tcp_congestion_control", "bbr")
    # per route (ip-route(8) `congctl`, Linux 4.0, commit 81164413ad09): connections to the long-haul peer's prefix
    # start with BBR, every other one with the namespace's default (cubic). Without `lock` an application may still
    # choose another one with TCP_CONGESTION; iperf3 does not unless given -C.
    side, i = COEX_ENDS["pr"]
    prefix = coex_addr("p").rsplit(".", 1)[0] + ".0/24"
    run(["ip", "-n", ns["pr"], "route", "replace", prefix, "via", f"10.250.{i}.1", "dev", "wan0", "congctl", "bbr"])
    # follow (network.congestion_control_scope: follow): the collection's own program, as its unit runs it
    config = WORK / f"route-follow-{lab.token}.json"
    config.write_text(json.dumps({"prefixes": [prefix], "congestion_control": "bbr"}))
    run(["ip", "netns", "exec", ns["fo"], sys.executable, str(FOLLOW), "sync", str(config)])
    # local traffic does not cross the emulated link: the router forwards a -> a itself (before the NFQUEUE rules)
    lab.nsexec(lab.ns("r"), lab.ipt, "-I", "FORWARD", "1", "-i", "a+", "-o", "a+", "-j", "ACCEPT")
    # per-flow counters: packets a flow offered to the link (FORWARD, before NFQUEUE) and packets the link let
    # through (mangle POSTROUTING, after the emulator's accept verdict); the difference is what it dropped
    for src in ("hw", "pr", "cu", "fo", "n"):
        for dst in ("p", "q"):
            rule = ["-s", coex_addr(src), "-d", coex_addr(dst)]
            lab.nsexec(lab.ns("r"), lab.ipt, "-I", "FORWARD", "2", *rule)
            lab.nsexec(lab.ns("r"), lab.ipt, "-t", "mangle", "-A", "POSTROUTING", *rule)
    settings: dict[str, Any] = {}
    for role in COEX_ENDS:
        values = {k: " ".join(lab.sysctl(ns[role], k).split()) for k in NS_KEYS[:5]}
        values["routes"] = lab.nsexec(ns[role], "ip", "route", "show").stdout.strip().splitlines()
        settings[role] = values
    for role in ("pr", "fo"):
        settings[role]["route_get"] = {
            dst: " ".join(lab.nsexec(ns[role], "ip", "route", "get", coex_addr(dst)).stdout.split())
            for dst in ("p", "q", "l")
        }
    return settings


TCP_HEADERS = 52  # IPv4 20 + TCP 32 (20 + the timestamp option, on by default in Linux): every data segment's


def coex_counters(lab: Lab) -> dict[tuple[str, str], dict[str, int]]:
    """Per (source, destination) address pair: packets and bytes in FORWARD (offered to the link, before NFQUEUE)
    and in mangle POSTROUTING (let through by the emulator).

    The two packet counts cannot be compared: FORWARD sees the sender's GSO packets (up to 64 KB, one IP header),
    and the kernel splits them into MTU-sized segments when it queues them to NFQUEUE (the emulator and POSTROUTING
    see segments). The payload can: bytes minus one header per counted packet, on both sides."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for tag, table, chain in (("offered", "filter", "FORWARD"), ("passed", "mangle", "POSTROUTING")):
        out = lab.nsexec(lab.ns("r"), lab.ipt, "-t", table, "-S", chain, "-v").stdout
        for m in re.finditer(r"-s ([\d.]+)/32 -d ([\d.]+)/32 -c (\d+) (\d+)", out):
            c = counts.setdefault((m.group(1), m.group(2)), {})
            c[f"{tag}_packets"], c[f"{tag}_bytes"] = int(m.group(3)), int(m.group(4))
            c[f"{tag}_payload"] = int(m.group(4)) - TCP_HEADERS * int(m.group(3))
    return counts


def coex_ss(lab: Lab, namespaces: list[str]) -> dict[str, list[str]]:
    """Congestion control of the established TCP connections, by peer address:port (`ss -tin`)."""
    seen: dict[str, list[str]] = {}
    for ns in namespaces:
        out = lab.nsexec(ns, "ss", "-tinH", "state", "established", check=False).stdout
        peer = None
        for line in out.splitlines():
            if not line[:1].isspace():
                f = line.split()
                peer = f[3] if len(f) >= 4 else None  # Recv-Q Send-Q Local:Port Peer:Port
                continue
            m = re.search(r"\b(bbr|cubic|reno)\b", line)
            if peer and m:
                seen.setdefault(peer, [])
                if m.group(1) not in seen[peer]:
                    seen[peer].append(m.group(1))
    return seen


def coex_run(
    lab: Lab,
    case: str,
    loss: float,
    r: int,
    duration: int,
    local_mbit: float,
    mtu: int = 1500,
    cap_mbit: float | None = None,
) -> dict[str, Any]:
    """One run of a case: its flows started together, sampled with ss halfway, per-flow and emulator counters."""
    mode, flows, _ = COEX_CASES[case]
    host = COEX_TUNED_HOSTS[mode] if mode else None
    for side, i in COEX_ENDS.values():
        run(["ip", "-n", lab.ns(f"{side}{i}"), "tcp_metrics", "flush", "all"], check=False)
    ping = lab.ping(1)
    lab.nsexec(lab.ns("r"), lab.ipt, "-Z")
    lab.nsexec(lab.ns("r"), lab.ipt, "-t", "mangle", "-Z")
    kq0 = lab.kernel_queue()
    lab.emu_cmd("reset")
    load_start = [round(x, 2) for x in os.getloadavg()]
    procs: dict[str, tuple[subprocess.Popen, str, str]] = {}
    for f in flows:
        src, dst, port, _ = COEX_FLOWS[f]
        src = host if src == "host" else src
        assert src
        side, i = COEX_ENDS[src]
        cmd = ["iperf3", "-c", coex_addr(dst), "-p", str(port), "-t", str(duration), "-J", "--connect-timeout", "5000"]
        if f == "local":
            cmd += ["-b", f"{local_mbit:g}M"]
        if f == "A" and case in COEX_CAPPED and cap_mbit:
            cmd += ["--fq-rate", f"{cap_mbit:g}M"]  # SO_MAX_PACING_RATE: TCP's own pacing honours it (no fq needed)
        procs[f] = (
            subprocess.Popen(
                ["ip", "netns", "exec", lab.ns(f"{side}{i}"), *cmd],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ),
            src,
            dst,
        )
        lab.procs.append(procs[f][0])  # stopped by lab.close() if the run is interrupted
    time.sleep(1 + duration / 2)  # the control connections take ~3 round trips; then halfway through the data
    senders = sorted({lab.ns("".join(map(str, COEX_ENDS[src]))) for _, src, _ in procs.values()})
    ss = coex_ss(lab, senders)
    out: dict[str, Any] = {}
    for f, (proc, src, dst) in procs.items():
        try:
            stdout, _ = proc.communicate(timeout=duration + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
        res = iperf3.parse(stdout)
        if "mbps" in res:
            res = {
                "mbps": round(res["mbps"], 2),
                "sent_mbps": round(res["sent_mbps"], 2),
                "retransmits": res["retransmits"],
                "cc": res["cc"],
                "sent_mbps_per_s": [round(x, 1) for x in res["sent_mbps_per_s"]],
            }
        port = COEX_FLOWS[f][2]
        res.update(src=src, dst=dst, ss_cc=ss.get(f"{coex_addr(dst)}:{port}", []))
        out[f] = res
    time.sleep(0.3)  # let the last packets leave the emulator (90 ms one way) before reading the counters
    counts = coex_counters(lab)
    for f, res in out.items():
        if f == "local":
            continue
        c = counts.get((coex_addr(res["src"]), coex_addr(res["dst"])), {})
        lost = c.get("offered_payload", 0) - c.get("passed_payload", 0)
        res.update(
            link_counters=c,
            link_segments=c.get("passed_packets", 0),
            # dropped payload in full-sized segments (MSS = path MTU - headers): the flow's share of the drops
            link_drops=round(lost / (mtu - TCP_HEADERS)),
            link_drop_pct=round(100 * lost / c["offered_payload"], 3) if c.get("offered_payload") else None,
        )
    emu = emu_summary(lab.emu_stats(), kq0, lab.kernel_queue())
    # cross-check: the flows' drops (from the counters) against the emulator's own count of its drops
    emu["flows_drops_sum"] = sum(res.get("link_drops", 0) for res in out.values())
    return {
        "case": case,
        "loss": loss,
        "run": r,
        "mode": mode,
        "tuned_host": host,
        "ping": ping,
        "flows": out,
        "ss": ss,
        "emulator": emu,
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
    }


def coex_line(e: dict[str, Any]) -> str:
    parts = []
    for f, res in e["flows"].items():
        if "mbps" not in res:
            parts.append(f"{f} FAILED {res.get('error')}")
            continue
        ss = "/".join(res["ss_cc"]) or "?"
        drops = f", drops {res['link_drops']} ({res['link_drop_pct']} %)" if "link_drops" in res else ""
        parts.append(f"{f} {fmt(res['mbps'])} ({res['cc']}, ss {ss}, retr {res['retransmits']}{drops})")
    emu = e["emulator"]
    return (
        f"loss {pct(e['loss']):6s} {e['case']:10s} run {e['run']}: " + "; ".join(parts) + f" | buffer drops "
        f"{emu['a2b_drop_buffer']}, loss drops {emu['a2b_drop_loss']} (flows' sum {emu['flows_drops_sum']}), kernel "
        f"{emu['kernel_dropped']}, late max "
        f"{emu['late_max_ms']} ms, load {e['load_end'][0]:.1f}"
    )


def measure(args: argparse.Namespace) -> int:
    """`wan.py coexist`: set up the lab, run every case, print the table, write the results file."""
    losses = [float(x) for x in args.losses.split(",")]
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in COEX_CASES:
            sys.exit(f"wan.py: unknown case {c!r} (choose from {', '.join(COEX_CASES)})")
    ensure_deps({**DEPS, "ss": "iproute2"})
    build_emulator()
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    load_before = os.getloadavg()
    ends = [COEX_ENDS[r] for r in COEX_ENDS]
    lab = Lab(0, 1500, args.rtt_ms / 2, args.rate_mbit, args.buffer_ms, args.emu_rt, ends=ends)
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    with lab.running() as session:
        n = len(losses) * len(cases) * args.runs
        log(
            f"lab {lab.token}: router + {len(ends)} endpoints; {n} runs of {args.duration} s (cases {', '.join(cases)}"
            f"; losses {', '.join(pct(x) for x in losses)}), about {(n * (args.duration + 3.5) + 30) / 60:.0f} min"
        )
        lab.create()
        lab.start_emulator(loss=0.0)
        settings = coex_setup(lab, args.rtt_ms, args.rate_mbit)
        for role in ("hw", "pr", "cu", "fo", "n"):
            s = settings[role]
            log(
                f"  {role:2s} cc {s['net.ipv4.tcp_congestion_control']}, wmem {s['net.ipv4.tcp_wmem']}, "
                f"rmem {s['net.ipv4.tcp_rmem']}"
            )
        for role in ("pr", "fo"):
            log(f"  {role}: ip route get {coex_addr('p')}: {settings[role]['route_get']['p']}")
        servers = {("p", 5201), ("q", 5201), ("q", 5202), ("l", 5201)}
        for role, port in sorted(servers):
            side, i = COEX_ENDS[role]
            cmd = ["iperf3", "-s", "-B", coex_addr(role), "-p", str(port)]
            lab.spawn(lab.ns(f"{side}{i}"), cmd, f"iperf3-{role}-{port}")
        time.sleep(0.5)
        log("emulator capacity check: 4 TCP streams (BBR, large buffers) for 4 s, loss 0 ...")
        cap = capacity_check(lab, COEX_ENDS["hw"][1], bbr=True)
        log(
            f"  offered {fmt(cap['offered_wire_mbps'])} Mbit/s, best 100 ms {fmt(cap['peak_100ms_mbps'])}, kernel "
            f"queue drops {cap['kernel_dropped']}, late max {cap['late_max_ms']} ms, late > 1 ms "
            f"{cap['late_over_1ms_pct']} % -> {'keeps up' if cap['keeps_up'] else 'DOES NOT keep up (CPU-starved?)'}"
        )
        for loss in losses:
            lab.set_loss(loss)
            for r in range(1, args.runs + 1):
                for case in cases:
                    entry = coex_run(
                        lab, case, loss, r, args.duration, args.local_mbit, cap_mbit=args.cap_share * args.rate_mbit
                    )
                    runs.append(entry)
                    log(coex_line(entry))
        result = summarise(args, cases, losses, runs)
        result.update(
            settings=settings,
            emulator=lab.emulator_info(),
            capacity_check=cap,
            **run_info(load_before, t0),
        )
    if session.interrupted:
        return 130
    finish(result, report, args.out or RESULTS / f"wan-coexist-{dt.date.today().isoformat()}.json")
    ok = all("mbps" in f for e in runs for f in e["flows"].values())
    return 0 if ok else 1


def summarise(args, cases, losses, runs) -> dict[str, Any]:
    med: dict[str, dict[str, Any]] = {}
    for loss in losses:
        for case in cases:
            sel = [e for e in runs if (e["case"], e["loss"]) == (case, loss)]
            flows: dict[str, Any] = {}
            for f in COEX_CASES[case][1]:
                ok = [e["flows"][f] for e in sel if "mbps" in e["flows"][f]]
                flows[f] = {
                    k: median([x.get(k) for x in ok])
                    for k in ("mbps", "retransmits", "link_drops", "link_drop_pct")
                    if f != "local" or k in ("mbps", "retransmits")
                }
                flows[f]["sent_mbps_2nd_half"] = median([iperf3.second_half(x.get("sent_mbps_per_s")) for x in ok])
                flows[f]["cc"] = sorted({x["cc"] for x in ok if x.get("cc")})
                flows[f]["ss_cc"] = sorted({c for x in ok for c in x.get("ss_cc", [])})
                flows[f]["mbps_runs"] = [x["mbps"] for x in ok]
                flows[f]["runs_ok"] = len(ok)
            link = [f for f in flows if f != "local"]
            totals = [sum(e["flows"][f].get("mbps", 0) for f in link) for e in sel]
            med[f"{case}@{pct(loss)}"] = {
                "case": case,
                "loss": loss,
                "flows": flows,
                "link_mbps": median(totals),
                "buffer_drops": median([e["emulator"]["a2b_drop_buffer"] for e in sel]),
                "loss_drops": median([e["emulator"]["a2b_drop_loss"] for e in sel]),
                "late_max_ms": max((e["emulator"]["late_max_ms"] for e in sel), default=None),
                "kernel_dropped": sum(e["emulator"]["kernel_dropped"] for e in sel),
                "emulator_kept_up_runs": sum(emulator_kept_up(e["emulator"]) for e in sel),
                "load1": [e["load_end"][0] for e in sel],
                "runs": len(sel),
            }
    # what the neighbour keeps: B's median beside the tuned flow against B alone
    keeps: dict[str, Any] = {}
    for loss in losses:
        alone = med.get(f"B-alone@{pct(loss)}", {}).get("flows", {}).get("B", {}).get("mbps")
        for case in cases:
            b = med[f"{case}@{pct(loss)}"]["flows"].get("B", {}).get("mbps")
            if case != "B-alone" and alone and b is not None:
                keeps[f"{case}@{pct(loss)}"] = round(b / alone, 3)
    return {
        **result_head("wan-coexist", command=" ".join(["bench/wan.py", *sys.argv[1:]])),
        "params": {
            "rtt_ms": args.rtt_ms,
            "rate_mbit": args.rate_mbit,
            "buffer_ms": args.buffer_ms,
            "losses": losses,
            "cases": {
                c: {"mode": COEX_CASES[c][0], "flows": list(COEX_CASES[c][1]), "what": COEX_CASES[c][2]} for c in cases
            },
            "flows": {f: {"from": v[0], "to": v[1], "what": v[3]} for f, v in COEX_FLOWS.items()},
            "endpoints": {r: {"namespace": f"{s}{i}", "address": coex_addr(r)} for r, (s, i) in COEX_ENDS.items()},
            "runs": args.runs,
            "duration_s": args.duration,
            "local_mbit": args.local_mbit,
            "tuned_buffer_bytes": coex_buffer_bytes(args.rtt_ms, args.rate_mbit),
            "cap_mbit": args.cap_share * args.rate_mbit,
        },
        "medians": med,
        "b_keeps_vs_alone": keeps,
        "runs": runs,
    }


def report(result: dict[str, Any]) -> str:
    """What `wan.py coexist` prints at the end: per case and loss rate each flow's median goodput, congestion
    control, second-half rate, retransmits and drops; the link total; what the neighbour keeps; the emulator's
    health. From the medians in the result (a results file's dict gives the same text)."""
    if not result:
        return ""
    p = result["params"]
    rows = []
    for key, m in result["medians"].items():
        fl = m["flows"]

        def cell(f: str, fl: dict[str, Any] = fl) -> str:
            if f not in fl:
                return "–"
            x = fl[f]
            cc = "/".join(sorted(set(x["cc"]) | set(x["ss_cc"])))
            return (
                f"{fmt(x['mbps'])} ({cc}; 2nd half {fmt(x.get('sent_mbps_2nd_half'))}; retr "
                f"{fmt_count(x['retransmits'])}, drops {fmt_count(x.get('link_drops'))})"
            )

        local = "/".join(fl["local"]["ss_cc"] or fl["local"]["cc"]) if "local" in fl else "–"
        keep = result["b_keeps_vs_alone"].get(key)
        loads = "–".join(f"{x:.1f}" for x in (min(m["load1"]), max(m["load1"]))) if m["load1"] else "–"
        rows.append(
            [
                pct(m["loss"]),
                m["case"],
                cell("A"),
                cell("B"),
                cell("own"),
                local,
                fmt(m["link_mbps"]),
                "–" if keep is None else f"{keep:.2f}",
                fmt_count(m["buffer_drops"]),
                fmt_count(m["loss_drops"]),
                loads,
            ]
        )
    header = [
        "loss",
        "case",
        "A: tuned long-haul",
        "B: stock neighbour",
        "own: other traffic",
        "local cc",
        "link total",
        "B ÷ B alone",
        "buffer drops",
        "loss drops",
        "load 1 min",
    ]
    bad = [k for k, m in result["medians"].items() if m["emulator_kept_up_runs"] < m["runs"]]
    cap = result.get("capacity_check") or {}
    return "\n".join(
        [
            "",
            f"Mbit/s per flow, medians of {p['runs']} runs of {p['duration_s']} s started together, RTT "
            f"{p['rtt_ms']:g} ms, {p['rate_mbit']:g} Mbit/s bottleneck with a {p['buffer_ms']:g} ms buffer; cc = "
            f"what iperf3 and ss saw; 2nd half = its sending rate over the second half of the run; drops = the "
            f"flow's packets the link dropped (buffer + random loss):",
            "",
            markdown_table(header, "llrrrlrrrrl", rows),
            "",
            f"  emulator capacity check: {'keeps up' if cap.get('keeps_up') else 'did NOT keep up'} (best 100 ms "
            f"{fmt(cap.get('peak_100ms_mbps'))} Mbit/s, late > 1 ms {cap.get('late_over_1ms_pct')} %); runs where "
            f"it fell behind (kernel queue drops, or a packet > 10 ms late): {', '.join(bad) if bad else 'none'}",
            f"  load average before/after {result['load_average_before'][0]:.1f}/"
            f"{result['load_average_after'][0]:.1f}; {result['seconds']:.0f} s",
        ]
    )


README_FLOWS = ("A", "B", "own")  # the flows over the link, in the table's order


def readme_table(result: dict[str, Any]) -> str:
    """The table docs/benchmarks.md shows for a results file (bench/coexist_table.py prints it): per case and loss
    rate each flow's median goodput, its congestion control (iperf3's and ss's view) and the share of its payload
    the link dropped; the median sending rate over each run's second half; the bottleneck's buffer drops; the stock
    neighbour's goodput against its own alone; the load averages. Recomputed from the runs (older files lack the
    second-half medians)."""
    runs = result["runs"]
    keys: list[tuple[float, str]] = []
    for e in runs:
        if (e["loss"], e["case"]) not in keys:
            keys.append((e["loss"], e["case"]))
    alone = {
        loss: median([e["flows"]["B"]["mbps"] for e in runs if (e["loss"], e["case"]) == (loss, "B-alone")])
        for loss in {e["loss"] for e in runs}
    }
    rows = []
    for loss, case in keys:
        sel = [e for e in runs if (e["loss"], e["case"]) == (loss, case)]
        cells, halves = {}, {}
        for f in (*README_FLOWS, "local"):
            ok = [e["flows"][f] for e in sel if f in e["flows"] and "mbps" in e["flows"][f]]
            if not ok:
                cells[f], halves[f] = "–", "–"
                continue
            cc = "/".join(sorted({x["cc"] for x in ok if x.get("cc")} | {c for x in ok for c in x.get("ss_cc", [])}))
            mbps = median([x["mbps"] for x in ok])
            drop = median([x.get("link_drop_pct") for x in ok])
            cells[f] = f"{fmt(mbps)} {cc}" + ("" if drop is None else f" ({drop:.1f} %)")
            halves[f] = fmt(median([iperf3.second_half(x.get("sent_mbps_per_s")) for x in ok]))
        total = median([sum(e["flows"][f].get("mbps", 0) for f in README_FLOWS if f in e["flows"]) for e in sel])
        b = median([e["flows"]["B"]["mbps"] for e in sel if "B" in e["flows"] and "mbps" in e["flows"]["B"]])
        keep = f"{b / alone[loss]:.2f}" if case != "B-alone" and b is not None and alone.get(loss) else "–"
        drops = median([e["emulator"]["a2b_drop_buffer"] for e in sel])
        loads = [e["load_end"][0] for e in sel]
        rows.append(
            [
                pct(loss),
                case,
                cells["A"],
                cells["B"],
                cells["own"],
                cells["local"],
                fmt(total),
                keep,
                " / ".join(halves[f] for f in README_FLOWS),
                f"{drops:,.0f}",
                f"{min(loads):.1f}–{max(loads):.1f}",
            ]
        )
    header = [
        "loss",
        "case",
        "A: tuned long-haul",
        "B: stock neighbour",
        "own: other traffic over the link",
        "local",
        "link total",
        "B ÷ B alone",
        "2nd half A / B / own",
        "buffer drops",
        "load 1 min",
    ]
    late = [
        f"{e['case']}@{pct(e['loss'])} run {e['run']} ({e['emulator']['late_max_ms']} ms)"
        for e in runs
        if not emulator_kept_up(e["emulator"])
    ]
    p = result["params"]
    return "\n".join(
        [
            f"`{result['command']}`, commit {result['commit']}, {result['date']}, {p['runs']} runs of "
            f"{p['duration_s']} s, {result['seconds'] / 60:.1f} min, load average before/after "
            f"{result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f}",
            "",
            markdown_table(header, "llrrrlrrrrl", rows),
            "",
            "emulator capacity check: " + ("keeps up" if result["capacity_check"]["keeps_up"] else "did NOT keep up"),
            "kernel queue drops over all runs: " + str(sum(e["emulator"]["kernel_dropped"] for e in runs)),
            "runs with a packet released > 10 ms late: " + (", ".join(late) or "none"),
        ]
    )
