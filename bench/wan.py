#!/usr/bin/env python3
"""Benchmark: gpufleet's long-haul fixes over an emulated overseas link (180 ms RTT, 1 Gbit/s, random loss).

Two subcommands, each building its own network namespaces (named gpufleet-wan-<token>-*) and tearing them down:

  iperf (default)  TCP goodput with iperf3, 1 and 4 streams, at each loss rate, for three configurations of the two
                   ends, alternated A B C A B C ... (medians of --runs):
                     stock     the namespace's defaults, cubic
                     tuned     TuneD network-throughput's values: 16 MiB tcp_rmem/tcp_wmem max, cubic
                     gpufleet  the collection's network_tuning role applied to both ends through ansible-playbook,
                               with the link declared in policy (rtt_ms 180, bandwidth_gbps 1)
  ansible          playbooks/audit.yml over SSH to a podman container behind the same link: the shipped
                   ansible.cfg against Ansible's defaults (an empty config), alternated, medians of --runs; wall
                   time, TCP connections, SSH channel requests and request/response turns.
  coexist          a tuned long-haul flow (BBR, 4 x BDP buffers: what network_tuning sets) sharing the bottleneck
                   with a stock cubic flow from a neighbour host and with the tuned host's own other traffic, BBR
                   set host-wide (the namespace's tcp_congestion_control) vs per route (`ip route ... congctl bbr`
                   to the long-haul peer's prefix only) vs following the routing table (scope follow:
                   plugins/module_utils/route_follow.py sync); each flow's goodput, retransmits and link drops, the
                   bottleneck's drops, ss's view of each connection's congestion control, load averages.

Topology: every endpoint namespace has one veth to a router namespace, whose FORWARD chain hands each direction to
NFQUEUE; bench/wanemu.c (built into build/bench/) holds each packet there for the link's delay, drops it at random
(loss) or when the 1 Gbit/s bottleneck's 20 ms buffer is full. The bottleneck is in the network, not on the
sender's interface (a shaper there never drops: TCP small queues hold the sender back). This kernel has no
sch_netem; `tc netem` is not used even where it exists, so that every machine measures the same emulator.

The three configurations are three endpoint pairs on the one router (so the gpufleet pair is configured by
Ansible once); only one pair sends at a time. Before each run the RTT is checked with `ping -U` (plain ping
under-reports delay added on the receive side) and `ip tcp_metrics` is flushed on both ends.

Host-wide state: nothing, except that a namespace can only choose cubic as its default congestion control while
the global net.ipv4.tcp_allowed_congestion_control lists it; if it does not, cubic is added for the moment the
stock and tuned namespaces are set up and the recorded value is restored right after (and on any exit,
Ctrl-C and SIGTERM included). Results: bench/results/wan-<YYYY-MM-DD>.json, wan-ansible-<YYYY-MM-DD>.json,
wan-coexist-<YYYY-MM-DD>.json.

    .venv/bin/python bench/wan.py                       # 3 loss rates x 1/4 streams x 3 configs x 3 runs, 10 s
    .venv/bin/python bench/wan.py --duration 30         # steady state
    .venv/bin/python bench/wan.py --path-mtu 9000       # jumbo frames along the path (the role sets MTU 9000)
    .venv/bin/python bench/wan.py ansible               # shipped ansible.cfg vs defaults, 3 runs each
    .venv/bin/python bench/wan.py coexist               # 6 cases x 0 / 0.1 % loss x 3 runs of 15 s

The code: bench/benchlib/ — lab.py (namespaces, veth, the emulator), goodput.py (iperf), ansible_link.py
(ansible), coexist.py (coexist), iperf3.py (iperf3's JSON), tables.py (the one table printer), base.py (paths,
commands, the results file). This file is the command line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from benchlib import ansible_link, coexist, goodput
from benchlib.ansible_link import WORKLOADS
from benchlib.base import raise_interrupted
from benchlib.coexist import COEX_CASES, COEX_DEFAULT_CASES
from benchlib.goodput import CONFIGS


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv.insert(0, "iperf")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    link = argparse.ArgumentParser(add_help=False)
    link.add_argument("--rtt-ms", type=float, default=180.0, help="round-trip time (half each way; default 180)")
    link.add_argument("--rate-mbit", type=float, default=1000.0, help="bottleneck rate (default 1000)")
    link.add_argument("--buffer-ms", type=float, default=20.0, help="bottleneck buffer in ms at its rate (default 20)")
    link.add_argument("--runs", type=int, default=3, help="runs per contender, alternated (default 3)")
    link.add_argument(
        "--emu-rt",
        type=int,
        default=20,
        help="SCHED_FIFO priority of the emulator process (default 20; 0: normal scheduling)",
    )
    link.add_argument("--out", type=Path, help="results file (default bench/results/<name>-<date>.json)")
    p = sub.add_parser("iperf", parents=[link], help="TCP goodput: stock vs TuneD vs gpufleet (default)")
    p.add_argument("--duration", type=int, default=10, help="seconds per iperf3 run (default 10; 30 = steady state)")
    p.add_argument("--losses", default="0,0.001,0.01", help="random loss rates (default 0,0.001,0.01)")
    p.add_argument("--streams", default="1,4", help="parallel streams (default 1,4)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="default stock,tuned,gpufleet")
    p.add_argument("--path-mtu", type=int, default=1500, help="MTU the path allows (default 1500)")
    p.add_argument(
        "--role-var",
        action="append",
        default=[],
        metavar="network_tuning_KEY=VALUE",
        help="extra variable for the network_tuning role in the gpufleet config (repeatable; e.g. to try another "
        "network_tuning_buffer_factor)",
    )
    q = sub.add_parser("ansible", parents=[link], help="playbooks/audit.yml over SSH: shipped ansible.cfg vs defaults")
    q.add_argument("--loss", type=float, default=0.0, help="random loss rate (default 0)")
    q.add_argument("--sample-seconds", type=float, default=1.0, help="the audit's swap-rate sample (default 1.0)")
    q.add_argument("--workloads", default=",".join(WORKLOADS), help="default " + ",".join(WORKLOADS))
    q.add_argument(
        "--discover-interpreter",
        action="store_true",
        help="leave ansible_python_interpreter unset (Ansible discovers it: one more SSH command per run)",
    )
    q.add_argument(
        "--no-rtt0",
        dest="rtt0",
        action="store_false",
        help="skip the reference runs at 0 ms RTT (they show how much of the wall time the link adds)",
    )
    c = sub.add_parser(
        "coexist",
        parents=[link],
        help="a tuned long-haul flow beside stock cubic traffic on the shared bottleneck, BBR host-wide vs per route",
    )
    c.add_argument("--duration", type=int, default=15, help="seconds per run, all flows together (default 15)")
    c.add_argument("--losses", default="0,0.001", help="random loss rates (default 0,0.001)")
    c.add_argument(
        "--cases",
        default=COEX_DEFAULT_CASES,
        help=f"default {COEX_DEFAULT_CASES}; also {','.join(k for k in COEX_CASES if k not in COEX_DEFAULT_CASES)}",
    )
    c.add_argument(
        "--local-mbit", type=float, default=50.0, help="rate of the local flow (not over the link; default 50)"
    )
    c.add_argument(
        "--cap-share",
        type=float,
        default=0.7,
        help="case follow-capped: the tuned flow's pacing cap as a share of the bottleneck rate (default 0.7)",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("wan.py: needs root (network namespaces, iptables, apt)")
    if args.runs < 1:
        sys.exit("wan.py: --runs must be at least 1")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupted)
    measure = {"iperf": goodput.measure, "ansible": ansible_link.measure, "coexist": coexist.measure}[args.cmd]
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
