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
                   to the long-haul peer's prefix only); each flow's goodput, retransmits and link drops, the
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
    .venv/bin/python bench/wan.py --duration 30         # steady state (about 3 x longer)
    .venv/bin/python bench/wan.py --path-mtu 9000       # jumbo frames along the path (the role sets MTU 9000)
    .venv/bin/python bench/wan.py ansible               # shipped ansible.cfg vs defaults, 3 runs each
    .venv/bin/python bench/wan.py coexist               # 5 cases x 0 / 0.1 % loss x 3 runs of 15 s (~9 min)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
WORK = REPO / "build" / "bench" / "wan"
EMU_SRC = BENCH / "wanemu.c"
EMU_BIN = REPO / "build" / "bench" / "wanemu"
VENV_BIN = REPO / ".venv" / "bin"
PREFIX = "gpufleet-wan-"
CONFIGS = ("stock", "tuned", "gpufleet")
CUBIC_ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
TUNED = {  # TuneD's network-throughput profile (the keys a network namespace can set)
    "net.ipv4.tcp_rmem": "4096 87380 16777216",
    "net.ipv4.tcp_wmem": "4096 16384 16777216",
}
TARGETS = {"ratio_0.1%_min": 40.0, "ratio_1%_min": 150.0, "goodput_0.1%_min_mbps": 0.5 * 956, "ansible_speedup_min": 2}
SSHD_IMAGE_BASE = "localhost/gpufleet-debian12:current"
SSHD_RECIPE = f"""FROM {SSHD_IMAGE_BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      openssh-server >/dev/null && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* && mkdir -p /run/sshd
"""
# Debian packages for the commands the benchmark runs (and the emulator's header)
DEPS = {
    "iperf3": "iperf3",
    "ping": "iputils-ping",
    "iptables": "iptables",
    "gcc": "gcc",
    "ip": "iproute2",
    "ethtool": "ethtool",
    "/usr/include/libnetfilter_queue/libnetfilter_queue.h": "libnetfilter-queue-dev",
}
ANSIBLE_DEPS = {"ssh": "openssh-client", "ssh-keygen": "openssh-client", "podman": None}


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


# ------------------------------------------------------------------------------------------------- dependencies
def ensure_deps(deps: dict[str, str | None]) -> None:
    missing = sorted({pkg for what, pkg in deps.items() if pkg and not (shutil.which(what) or Path(what).exists())})
    unfixable = [what for what, pkg in deps.items() if pkg is None and not shutil.which(what)]
    if unfixable:
        sys.exit(f"wan.py: {', '.join(unfixable)} missing: run `make lab` (scripts/lab-setup.sh) first")
    if not missing:
        return
    log(f"installing {' '.join(missing)} (apt-get install --no-install-recommends)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        run(["apt-get", "update", "-qq"], env=env, timeout=600)
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            sys.exit(f"wan.py: could not install {' '.join(missing)}:\n{res.stderr[-2000:]}")


def build_emulator() -> Path:
    """Compile bench/wanemu.c into build/bench/wanemu when the source (or the compiler command) changed."""
    cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-o", str(EMU_BIN), str(EMU_SRC), "-lnetfilter_queue", "-lnfnetlink"]
    stamp = EMU_BIN.with_suffix(".stamp")
    digest = hashlib.sha256(EMU_SRC.read_bytes() + " ".join(cmd).encode()).hexdigest()
    if EMU_BIN.exists() and stamp.exists() and stamp.read_text() == digest:
        return EMU_BIN
    EMU_BIN.parent.mkdir(parents=True, exist_ok=True)
    res = run(cmd)
    if res.stderr.strip():
        log(f"compiler said:\n{res.stderr.strip()}")
    stamp.write_text(digest)
    return EMU_BIN


# -------------------------------------------------------------------------------------------- global settings
class GlobalSettings:
    """Host-wide sysctls changed on purpose: recorded before the change, restored (only if still ours)."""

    def __init__(self) -> None:
        self.changed: dict[str, tuple[str, str]] = {}

    def set(self, path: str, value: str) -> None:
        original = Path(path).read_text().strip()
        if path not in self.changed:
            self.changed[path] = (original, value)
        Path(path).write_text(value)
        log(f"  (host-wide) {path}: {original!r} -> {value!r}, restored when set-up is done")

    def restore(self) -> None:
        for path, (original, ours) in list(self.changed.items()):
            current = Path(path).read_text().strip()
            if current.split() == ours.split():
                Path(path).write_text(original)
                log(f"  (host-wide) {path}: restored {original!r}")
            else:
                log(f"  (host-wide) {path}: now {current!r}, changed by someone else since; left as it is")
            del self.changed[path]


class Interrupted(Exception):
    pass


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


# -------------------------------------------------------------------------------------------------------- the lab
class Lab:
    """Endpoint pairs (a<i>, b<i>) joined through one router namespace that runs the emulator."""

    def __init__(
        self,
        pairs: int,
        path_mtu: int,
        delay_ms: float,
        rate_mbit: float,
        buffer_ms: float,
        rt: int = 0,
        ends: list[tuple[str, int]] | None = None,
    ) -> None:
        self.token = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.pairs = pairs
        # the endpoint namespaces, (side, i) -> <side><i> at 10.25{0,1}.<i>.2: pairs a<i>/b<i> unless given
        self.ends = ends or [(s, i) for i in range(1, pairs + 1) for s in "ab"]
        self.ipt = "iptables"
        self.path_mtu = path_mtu
        self.emu_args = ["--delay-ms", str(delay_ms), "--rate-mbit", str(rate_mbit), "--buffer-ms", str(buffer_ms)]
        self.emu_args += ["--queue-maxlen", "100000", "--rt", str(rt)]
        # With more than one CPU: the emulator on CPU 0, every veth's receive processing (RPS) on the others, so
        # that the packets it releases are not processed inside its own verdict calls (that made it fall behind).
        ncpu = os.cpu_count() or 1
        self.emu_cpu = 0 if ncpu > 1 else None
        self.rps_mask = f"{((1 << ncpu) - 1) & ~1:x}" if ncpu > 1 else None
        if self.emu_cpu is not None:
            self.emu_args += ["--cpu", str(self.emu_cpu)]
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.containers: list[str] = []
        self.emu: subprocess.Popen | None = None
        self.globals = GlobalSettings()

    # names and addresses
    def ns(self, role: str) -> str:
        return f"{PREFIX}{self.token}-{role}"

    @staticmethod
    def addr(side: str, i: int) -> str:
        return f"10.{250 if side == 'a' else 251}.{i}.2"

    def nsexec(self, ns: str, *cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return run(["ip", "netns", "exec", ns, *cmd], check=check, timeout=timeout)

    def sysctl(self, ns: str, key: str, value: str | None = None) -> str:
        path = Path("/proc/sys") / key.replace(".", "/")
        if value is None:
            return self.nsexec(ns, "cat", str(path)).stdout.strip()
        self.nsexec(ns, "sysctl", "-q", "-w", f"{key}={value}")
        return value

    def create(self) -> None:
        others = [n.split()[0] for n in run(["ip", "netns", "list"]).stdout.splitlines() if n.startswith(PREFIX)]
        if others:
            log(f"warning: other {PREFIX}* namespaces exist ({len(others)}): another run may be sharing the CPUs")
        router = self.ns("r")
        for ns in [router] + [self.ns(f"{s}{i}") for s, i in self.ends]:
            run(["ip", "netns", "add", ns])
            self.namespaces.append(ns)
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        for side, i in self.ends:
            ns, rdev = self.ns(f"{side}{i}"), f"{side}{i}"
            net = 250 if side == "a" else 251
            run(["ip", "link", "add", "wan0", "netns", ns, "type", "veth", "peer", "name", rdev, "netns", router])
            run(["ip", "-n", router, "link", "set", rdev, "mtu", str(self.path_mtu)])
            run(["ip", "-n", router, "addr", "add", f"10.{net}.{i}.1/24", "dev", rdev])
            run(["ip", "-n", router, "link", "set", rdev, "up"])
            run(["ip", "-n", ns, "addr", "add", f"10.{net}.{i}.2/24", "dev", "wan0"])
            run(["ip", "-n", ns, "link", "set", "wan0", "up"])
            run(["ip", "-n", ns, "route", "add", "default", "via", f"10.{net}.{i}.1"])
        if self.rps_mask:
            for side, i in self.ends:
                self.set_rps(self.ns(f"{side}{i}"), "wan0")
                self.set_rps(router, f"{side}{i}")
        self.sysctl(router, "net.ipv4.ip_forward", "1")
        ok = self.nsexec(router, "iptables", "-S", check=False).returncode == 0
        self.ipt = ipt = "iptables" if ok else "iptables-legacy"
        for side, queue in (("a", 0), ("b", 1)):  # each direction to its own queue: A->B on 0, B->A on 1
            self.nsexec(router, ipt, "-A", "FORWARD", "-i", f"{side}+", "-j", "NFQUEUE", "--queue-num", str(queue))

    def set_rps(self, ns: str, dev: str) -> None:
        """Steer a veth's receive processing to the CPUs the emulator is not on (a device setting in our own
        namespace: /sys there is that namespace's)."""
        self.nsexec(ns, "sh", "-c", f"echo {self.rps_mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus")

    def start_emulator(self, loss: float = 0.0) -> None:
        log_file = open(WORK / f"wanemu-{self.token}.log", "w")  # noqa: SIM115 - lives as long as the process
        self.emu = subprocess.Popen(
            ["ip", "netns", "exec", self.ns("r"), str(EMU_BIN), *self.emu_args, "--loss", str(loss)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            bufsize=1,
        )
        self.procs.append(self.emu)
        line = self.emu.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"emulator did not start: {line!r} (see {log_file.name})")

    def emu_cmd(self, cmd: str) -> str:
        assert self.emu and self.emu.stdin and self.emu.stdout
        self.emu.stdin.write(cmd + "\n")
        self.emu.stdin.flush()
        return self.emu.stdout.readline().strip()

    def emu_stats(self) -> dict[str, Any]:
        return json.loads(self.emu_cmd("stats"))

    def set_loss(self, loss: float) -> None:
        if self.emu_cmd(f"loss {loss}") != "ok":
            raise RuntimeError("emulator refused the loss rate")

    def kernel_queue(self) -> dict[int, dict[str, int]]:
        """The kernel's own NFQUEUE counters in the router: packets it dropped because the emulator was behind."""
        out = {}
        assert self.emu
        # /proc/PID/net is the network namespace of that process: the router's, read without entering it
        for line in Path(f"/proc/{self.emu.pid}/net/netfilter/nfnetlink_queue").read_text().splitlines():
            f = line.split()
            if len(f) >= 8:
                out[int(f[0])] = {"queued": int(f[2]), "queue_dropped": int(f[5]), "user_dropped": int(f[6])}
        return out

    def spawn(self, ns: str, cmd: list[str], log_name: str) -> subprocess.Popen:
        fh = open(WORK / f"{log_name}-{self.token}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=fh, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def ping(self, i: int) -> dict[str, Any]:
        """RTT A->B with -U (user-to-user: includes delay added on the receiving side)."""
        res = self.nsexec(
            self.ns(f"a{i}"), "ping", "-U", "-q", "-c", "3", "-i", "0.02", "-W", "2", self.addr("b", i), check=False
        )
        m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", res.stdout)
        rx = re.search(r"(\d+) received", res.stdout)
        return {
            "min_ms": float(m.group(1)) if m else None,
            "avg_ms": float(m.group(2)) if m else None,
            "max_ms": float(m.group(3)) if m else None,
            "received": int(rx.group(1)) if rx else 0,
        }

    def flush_metrics(self, i: int) -> None:
        for side in "ab":
            run(["ip", "-n", self.ns(f"{side}{i}"), "tcp_metrics", "flush", "all"], check=False)

    def close(self) -> None:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            if self.emu and self.emu.poll() is None:
                with contextlib.suppress(Exception):
                    self.emu.stdin.write("quit\n")
                    self.emu.stdin.flush()
            for name in self.containers:
                subprocess.run(["podman", "rm", "-f", "-t", "1", name], capture_output=True, timeout=60)
            for proc in reversed(self.procs):
                if proc.poll() is None:
                    try:
                        proc.wait(timeout=2 if proc is self.emu else 0.01)
                    except subprocess.TimeoutExpired:
                        proc.terminate()
                        try:
                            proc.wait(timeout=3)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            proc.wait(timeout=3)
            for ns in reversed(self.namespaces):
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
            self.namespaces.clear()
            self.globals.restore()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def set_congestion_control(self, namespaces: list[str], cc: str) -> None:
        """Choose a namespace's default congestion control. A child namespace may only pick one listed in the
        host-wide tcp_allowed_congestion_control: if cc is not there, add it just for this, then restore."""
        allowed = Path(CUBIC_ALLOWED).read_text().split()
        try:
            if cc not in allowed:
                self.globals.set(CUBIC_ALLOWED, " ".join(allowed + [cc]))
            for ns in namespaces:
                self.sysctl(ns, "net.ipv4.tcp_congestion_control", cc)
        finally:
            self.globals.restore()
        for ns in namespaces:
            if self.sysctl(ns, "net.ipv4.tcp_congestion_control") != cc:
                raise RuntimeError(f"{ns}: congestion control is not {cc}")


# ------------------------------------------------------------------------------------------ the configurations
NS_KEYS = (
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.core.rmem_max",
    "net.core.wmem_max",
)

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
    try:
        data = json.loads(res.stdout)
    except json.JSONDecodeError:
        return {"error": (res.stderr or res.stdout)[-500:]}
    if "error" in data:
        return {"error": data["error"]}
    end = data["end"]
    return {
        "mbps": end["sum_received"]["bits_per_second"] / 1e6,
        "sent_mbps": end["sum_sent"]["bits_per_second"] / 1e6,
        "retransmits": end["sum_sent"].get("retransmits"),
        "cc": end.get("sender_tcp_congestion"),
        "seconds": end["sum_received"]["seconds"],
    }


def emu_summary(st: dict[str, Any], kq0: dict, kq1: dict) -> dict[str, Any]:
    d = st["a2b"]
    span = (d["last_out_ns"] - d["first_out_ns"]) / 1e9
    wire = d["out_bytes"] + st["overhead"] * d["out_pkts"]
    kernel = {
        q: {k: kq1.get(q, {}).get(k, 0) - kq0.get(q, {}).get(k, 0) for k in ("queue_dropped", "user_dropped")}
        for q in (0, 1)
    }
    return {
        "a2b_wire_mbps": round(wire * 8 / span / 1e6, 1) if span > 0 else None,
        "a2b_peak_100ms_mbps": d["peak_mbps"],
        "a2b_in_pkts": d["in_pkts"],
        "a2b_drop_loss": d["drop_loss"],
        "a2b_drop_buffer": d["drop_buffer"],
        "b2a_drop_loss": st["b2a"]["drop_loss"],
        "held_max": max(d["held_max"], st["b2a"]["held_max"]),
        "late_max_ms": round(max(d["late_max_us"], st["b2a"]["late_max_us"]) / 1e3, 2),
        "late_over_1ms": d["late_over_1ms"] + st["b2a"]["late_over_1ms"],
        "kernel_dropped": sum(v["queue_dropped"] + v["user_dropped"] for v in kernel.values()),
        "drop_ring": d["drop_ring"] + st["b2a"]["drop_ring"],
        "enobufs": st["enobufs"],
    }


def capacity_check(lab: Lab, i: int, bbr: bool, seconds: int = 4) -> dict[str, Any]:
    """Offer the bottleneck more than it can carry (4 TCP streams, BBR, large buffers, no loss) and see whether the
    emulator forwards at its rate, releases packets on time and never lets the kernel's queue overflow (which is
    what happens when it falls behind, e.g. starved of CPU)."""
    lab.flush_metrics(i)
    kq0 = lab.kernel_queue()
    lab.emu_cmd("reset")
    cmd = ["iperf3", "-c", lab.addr("b", i), "-t", str(seconds), "-P", "4", "-J"] + ([] if bbr else ["-C", "bbr"])
    lab.nsexec(lab.ns(f"a{i}"), *cmd, check=False, timeout=seconds + 60)
    st, kq1 = lab.emu_stats(), lab.kernel_queue()
    d = st["a2b"]
    span_in = (d["last_out_ns"] - d["first_in_ns"]) / 1e9
    summary = emu_summary(st, kq0, kq1)
    summary.update(
        offered_wire_mbps=round((d["in_bytes"] + st["overhead"] * d["in_pkts"]) * 8 / span_in / 1e6, 1)
        if span_in > 0
        else None,
        peak_100ms_mbps=d["peak_mbps"],
        emulator_rate_mbps=st["rate_bps"] / 1e6,
    )
    summary["late_over_1ms_pct"] = round(
        100 * summary["late_over_1ms"] / max(1, d["out_pkts"] + st["b2a"]["out_pkts"]), 3
    )
    summary["keeps_up"] = bool(
        summary["kernel_dropped"] == 0
        and summary["drop_ring"] == 0
        and summary["late_over_1ms_pct"] < 1
        and d["peak_mbps"] >= 0.95 * st["rate_bps"] / 1e6
    )
    return summary


def fmt(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def fmt_ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}×" if v >= 10 else f"{v:.1f}×"


def pct(loss: float) -> str:
    return f"{loss * 100:g} %"


def cmd_iperf(args: argparse.Namespace) -> int:
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
        try:
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
            result = summarise_iperf(args, configs, losses, streams_list, runs, role_vars)
            result.update(
                settings=settings,
                emulator={"cpu": lab.emu_cpu, "rps_mask": lab.rps_mask, "sched_fifo_priority": args.emu_rt},
                ansible_apply=apply,
                capacity_check=cap,
                **_run_info(load_before, t0),
            )
        except (KeyboardInterrupt, Interrupted) as exc:
            log(f"interrupted ({exc or 'SIGINT'}): cleaning up")
            return 130
        finally:
            lab.close()
    print_iperf(result)
    write_result(args.out or RESULTS / f"wan-{dt.date.today().isoformat()}.json", result)
    return 0 if all("mbps" in r for r in runs) else 1


def _run_info(load_before, t0: float) -> dict[str, Any]:
    """Load averages around a measurement and its duration, for the results file."""
    return {
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - t0, 1),
    }


def summarise_iperf(args, configs, losses, streams_list, runs, role_vars) -> dict[str, Any]:
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
        "benchmark": "wan",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "host": host_info(),
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


def print_iperf(result: dict[str, Any]) -> None:
    if not result:
        return
    p = result["params"]
    losses, streams = p["losses"], p["streams"]
    head = " | ".join(f"{pct(x)} loss" for x in losses)
    label = " / ".join(f"{s} stream{'s' if s > 1 else ''}" for s in streams)
    print(
        f"\nMbit/s ({label}), medians of {p['runs']} runs, {p['duration_s']} s each, RTT {p['rtt_ms']:g} ms, "
        f"{p['rate_mbit']:g} Mbit/s bottleneck, path MTU {p['path_mtu']}:\n"
    )
    print(f"| config | {head} |")
    print("|---|" + "---:|" * len(losses))
    for c, per in result["medians_mbps"].items():
        cells = [" / ".join(fmt(per[pct(x)][f"P{s}"]) for s in streams) for x in losses]
        print(f"| {c} | " + " | ".join(cells) + " |")
    for name, per in result["ratios"].items():
        cells = [" / ".join(fmt_ratio(per[pct(x)][f"P{s}"]) for s in streams) for x in losses]
        print(f"| {name.replace('/', ' ÷ ')} | " + " | ".join(cells) + " |")
    print()
    for t in result["targets"]:
        v = t["value"]
        shown = "–" if v is None else f"{v:.1f}" if "Mbit" in t["what"] else f"{v:.1f}×"
        print(f"  {t['what']}: {shown} (target {t['target']}): {'met' if t['met'] else 'MISSED'}")
    cap = result.get("capacity_check") or {}
    print(
        f"  emulator: best 100 ms {fmt(cap.get('peak_100ms_mbps'))} Mbit/s of {fmt(cap.get('emulator_rate_mbps'))} "
        f"({'keeps up' if cap.get('keeps_up') else 'did NOT keep up'}); kernel queue drops over all runs: "
        f"{sum(r['emulator']['kernel_dropped'] for r in result['runs'])}; load average before/after "
        f"{result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f}; {result['seconds']:.0f} s"
    )


# ------------------------------------------------------------------------------------ coexistence (wan.py coexist)
# One site (side a) shares the emulated link's bottleneck towards the far site (side b). The tuned host is three
# namespaces that differ only in how BBR is turned on, so that no case has to change a namespace's default
# congestion control between runs (a child namespace can choose cubic only while the host-wide allowed list has
# it): every endpoint is set up once.
COEX_ENDS = {
    "hw": ("a", 1),  # the tuned host, BBR host-wide: net.ipv4.tcp_congestion_control=bbr (in its namespace only)
    "pr": ("a", 2),  # the tuned host, BBR per route: default cubic, the long-haul peer's prefix routed `congctl bbr`
    "cu": ("a", 3),  # the tuned host's buffers without BBR: cubic everywhere
    "n": ("a", 4),  # a stock neighbour at the same site (cubic, stock buffers)
    "l": ("a", 5),  # a local peer at the same site: through the router, not through the emulated link
    "p": ("b", 1),  # the long-haul peer (the prefix the policy declares long-haul), tuned like the sender
    "q": ("b", 2),  # another destination behind the same bottleneck, stock; the policy does not list it
}
COEX_TUNED_HOSTS = {"host-wide": "hw", "per-route": "pr", "cubic": "cu"}
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
    # not in the default set: the two-flow view (the tuned flow and the neighbour only)
    "A+B": ("per-route", ("A", "B"), "the tuned long-haul flow and the stock neighbour only"),
    "A+own-host-wide": ("host-wide", ("A", "own"), "host-wide: the tuned flow and the host's own other flow"),
    "A+own-per-route": ("per-route", ("A", "own"), "per-route: the tuned flow and the host's own other flow"),
}
COEX_DEFAULT_CASES = "B-alone,A-alone,both-cubic,host-wide,per-route"


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
    for role in ("hw", "pr", "cu", "p"):
        for k, v in tuned.items():
            lab.sysctl(ns[role], k, v)
    # stock: what a new namespace copies from the host (tcp_rmem max 32 MiB, tcp_wmem max 4 MiB here), cubic
    lab.set_congestion_control([ns[r] for r in ("pr", "cu", "n", "l", "q")], "cubic")
    for role in ("hw", "p"):
        lab.sysctl(ns[role], "net.ipv4.tcp_congestion_control", "bbr")
    # per route (ip-route(8) `congctl`, Linux 4.0, commit 81164413ad09): connections to the long-haul peer's prefix
    # start with BBR, every other one with the namespace's default (cubic). Without `lock` an application may still
    # choose another one with TCP_CONGESTION; iperf3 does not unless given -C.
    side, i = COEX_ENDS["pr"]
    prefix = coex_addr("p").rsplit(".", 1)[0] + ".0/24"
    run(["ip", "-n", ns["pr"], "route", "replace", prefix, "via", f"10.250.{i}.1", "dev", "wan0", "congctl", "bbr"])
    # local traffic does not cross the emulated link: the router forwards a -> a itself (before the NFQUEUE rules)
    lab.nsexec(lab.ns("r"), lab.ipt, "-I", "FORWARD", "1", "-i", "a+", "-o", "a+", "-j", "ACCEPT")
    # per-flow counters: packets a flow offered to the link (FORWARD, before NFQUEUE) and packets the link let
    # through (mangle POSTROUTING, after the emulator's accept verdict); the difference is what it dropped
    for src in ("hw", "pr", "cu", "n"):
        for dst in ("p", "q"):
            rule = ["-s", coex_addr(src), "-d", coex_addr(dst)]
            lab.nsexec(lab.ns("r"), lab.ipt, "-I", "FORWARD", "2", *rule)
            lab.nsexec(lab.ns("r"), lab.ipt, "-t", "mangle", "-A", "POSTROUTING", *rule)
    settings: dict[str, Any] = {}
    for role in COEX_ENDS:
        values = {k: " ".join(lab.sysctl(ns[role], k).split()) for k in NS_KEYS[:5]}
        values["routes"] = lab.nsexec(ns[role], "ip", "route", "show").stdout.strip().splitlines()
        settings[role] = values
    settings["pr"]["route_get"] = {
        dst: " ".join(lab.nsexec(ns["pr"], "ip", "route", "get", coex_addr(dst)).stdout.split())
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


def coex_parse(stdout: str) -> dict[str, Any]:
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        return {"error": stdout[-500:] or "no output"}
    if "error" in data:
        return {"error": data["error"]}
    end = data["end"]
    return {
        "mbps": round(end["sum_received"]["bits_per_second"] / 1e6, 2),
        "sent_mbps": round(end["sum_sent"]["bits_per_second"] / 1e6, 2),
        "retransmits": end["sum_sent"].get("retransmits"),
        "cc": end.get("sender_tcp_congestion"),
        "sent_mbps_per_s": [round(iv["sum"]["bits_per_second"] / 1e6, 1) for iv in data.get("intervals", [])],
    }


def second_half(per_s: list[float] | None) -> float | None:
    """Mean sending rate over the second half of a run (iperf3's 1 s intervals, sender side: what a flow holds
    once start-up is over; it includes retransmissions)."""
    if not per_s:
        return None
    half = per_s[len(per_s) // 2 :]
    return round(sum(half) / len(half), 2)


def coex_run(
    lab: Lab, case: str, loss: float, r: int, duration: int, local_mbit: float, mtu: int = 1500
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
        res = coex_parse(stdout)
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


def fmt_count(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


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


def cmd_coexist(args: argparse.Namespace) -> int:
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
    try:
        n = len(losses) * len(cases) * args.runs
        log(
            f"lab {lab.token}: router + {len(ends)} endpoints; {n} runs of {args.duration} s (cases {', '.join(cases)}"
            f"; losses {', '.join(pct(x) for x in losses)}), about {(n * (args.duration + 3.5) + 30) / 60:.0f} min"
        )
        lab.create()
        lab.start_emulator(loss=0.0)
        settings = coex_setup(lab, args.rtt_ms, args.rate_mbit)
        for role in ("hw", "pr", "cu", "n"):
            s = settings[role]
            log(
                f"  {role:2s} cc {s['net.ipv4.tcp_congestion_control']}, wmem {s['net.ipv4.tcp_wmem']}, "
                f"rmem {s['net.ipv4.tcp_rmem']}"
            )
        log(f"  pr: ip route get {coex_addr('p')}: {settings['pr']['route_get']['p']}")
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
                    entry = coex_run(lab, case, loss, r, args.duration, args.local_mbit)
                    runs.append(entry)
                    log(coex_line(entry))
        result = summarise_coexist(args, cases, losses, runs)
        result.update(
            settings=settings,
            emulator={"cpu": lab.emu_cpu, "rps_mask": lab.rps_mask, "sched_fifo_priority": args.emu_rt},
            capacity_check=cap,
            **_run_info(load_before, t0),
        )
    except (KeyboardInterrupt, Interrupted) as exc:
        log(f"interrupted ({exc or 'SIGINT'}): cleaning up")
        return 130
    finally:
        lab.close()
    print_coexist(result)
    write_result(args.out or RESULTS / f"wan-coexist-{dt.date.today().isoformat()}.json", result)
    ok = all("mbps" in f for e in runs for f in e["flows"].values())
    return 0 if ok else 1


def emulator_kept_up(emu: dict[str, Any]) -> bool:
    """A run's emulator kept up: the kernel's queue never overflowed and no packet left more than 10 ms late."""
    return emu["kernel_dropped"] == 0 and emu["drop_ring"] == 0 and emu["late_max_ms"] <= 10


def summarise_coexist(args, cases, losses, runs) -> dict[str, Any]:
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
                flows[f]["sent_mbps_2nd_half"] = median([second_half(x.get("sent_mbps_per_s")) for x in ok])
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
        "benchmark": "wan-coexist",
        "command": " ".join(["bench/wan.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "host": host_info(),
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
        },
        "medians": med,
        "b_keeps_vs_alone": keeps,
        "runs": runs,
    }


def print_coexist(result: dict[str, Any]) -> None:
    if not result:
        return
    p = result["params"]
    print(
        f"\nMbit/s per flow, medians of {p['runs']} runs of {p['duration_s']} s started together, RTT "
        f"{p['rtt_ms']:g} ms, {p['rate_mbit']:g} Mbit/s bottleneck with a {p['buffer_ms']:g} ms buffer; cc = what "
        f"iperf3 and ss saw; 2nd half = its sending rate over the second half of the run; drops = the flow's "
        f"packets the link dropped (buffer + random loss):\n"
    )
    print(
        "| loss | case | A: tuned long-haul | B: stock neighbour | own: other traffic | local cc | link total | "
        "B ÷ B alone | buffer drops | loss drops | load 1 min |"
    )
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|")
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
        print(
            f"| {pct(m['loss'])} | {m['case']} | {cell('A')} | {cell('B')} | {cell('own')} | {local} | "
            f"{fmt(m['link_mbps'])} | {'–' if keep is None else f'{keep:.2f}'} | {fmt_count(m['buffer_drops'])} | "
            f"{fmt_count(m['loss_drops'])} | {loads} |"
        )
    bad = [k for k, m in result["medians"].items() if m["emulator_kept_up_runs"] < m["runs"]]
    cap = result.get("capacity_check") or {}
    print(
        f"\n  emulator capacity check: {'keeps up' if cap.get('keeps_up') else 'did NOT keep up'} (best 100 ms "
        f"{fmt(cap.get('peak_100ms_mbps'))} Mbit/s, late > 1 ms {cap.get('late_over_1ms_pct')} %); runs where it "
        f"fell behind (kernel queue drops, or a packet > 10 ms late): {', '.join(bad) if bad else 'none'}"
    )
    print(
        f"  load average before/after {result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f};"
        f" {result['seconds']:.0f} s"
    )


# ---------------------------------------------------------------------------------------------- ansible over WAN
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


def cmd_ansible(args: argparse.Namespace) -> int:
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
        try:
            lab.create()
            lab.start_emulator(loss=args.loss)
            # keys and sshd config for the target, in a directory only this run uses
            bench_dir = tmp / "target"
            bench_dir.mkdir()
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "id_ed25519"), "-C", "gpufleet-wan"])
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(bench_dir / "ssh_host_ed25519_key")])
            shutil.copy(tmp / "id_ed25519.pub", bench_dir / "authorized_keys")
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
            result = summarise_ansible(args, workloads, runs, image)
            result.update(
                **_run_info(load_before, t0),
            )
        except (KeyboardInterrupt, Interrupted) as exc:
            log(f"interrupted ({exc or 'SIGINT'}): cleaning up")
            return 130
        finally:
            lab.close()
    print_ansible(result)
    write_result(args.out or RESULTS / f"wan-ansible-{dt.date.today().isoformat()}.json", result)
    return 0 if runs and all(r["ok"] for r in runs) else 1


def summarise_ansible(args, workloads, runs, image) -> dict[str, Any]:
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
        "benchmark": "wan-ansible",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "host": host_info(),
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


def print_ansible(result: dict[str, Any]) -> None:
    if not result:
        return
    p = result["params"]
    print(
        f"\nOver SSH to one container, loss {pct(p['loss'])}, medians of {p['runs']} cold runs (audit "
        f"sample_seconds {p['sample_seconds']}):\n"
    )
    print("| workload | RTT | ansible config | wall s | TCP conns | SSH exec | SFTP | client turns | packets |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for w, res in result["workloads"].items():
        for m in res["medians"].values():
            label = "shipped ansible.cfg" if m["contender"] == "shipped" else "Ansible defaults"
            print(
                f"| {w} | {m['rtt_ms']:g} ms | {label} | {m['wall_s'] or 0:.2f} | {fmt(m['syns'])} | "
                f"{fmt(m['exec_requests'])} | {fmt(m['sftp_sessions'])} | {fmt(m['turns'])} | {fmt(m['packets'])} |"
            )
    print()
    for t in result["targets"]:
        shown = "–" if t["value"] is None else f"{t['value']:.2f}×"
        print(f"  {t['what']}: {shown} (target {t['target']}): {'met' if t['met'] else 'MISSED'}")
    for w, res in result["workloads"].items():
        net = res["network_seconds"]
        if net.get("shipped") is not None and net.get("defaults") is not None:
            ns = res["network_speedup"]
            print(
                f"  {w}: time the {p['rtt_ms']:g} ms link adds (wall at {p['rtt_ms']:g} ms − wall at 0 ms): shipped "
                f"{net['shipped']:.2f} s, defaults {net['defaults']:.2f} s" + (f" ({ns:.2f}×)" if ns else "")
            )
    for key, r in result.get("audit_over_ping", {}).items():
        if r:
            c, rtt = key.split("@")
            print(f"  audit ÷ ping (one host, {c} config, RTT {rtt} ms): {r:.2f}×")
    print(
        f"  load average before/after {result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f}; "
        f"{result['seconds']:.0f} s"
    )


# ------------------------------------------------------------------------------------------------------ helpers
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


def write_result(path: Path, result: dict[str, Any]) -> None:
    if not result:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"  results: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


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
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("wan.py: needs root (network namespaces, iptables, apt)")
    if args.runs < 1:
        sys.exit("wan.py: --runs must be at least 1")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupted)
    if args.cmd == "coexist":
        return cmd_coexist(args)
    return cmd_iperf(args) if args.cmd == "iperf" else cmd_ansible(args)


if __name__ == "__main__":
    sys.exit(main())
