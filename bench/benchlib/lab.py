"""The lab: network namespaces joined by veth pairs through one router namespace, whose FORWARD chain hands each
direction to NFQUEUE, where bench/wanemu.c (built into build/bench/) emulates the long link: its delay, random
loss and a bottleneck with a drop-tail buffer. Also what the lab needs on the machine (Debian packages, the
emulator's binary) and the one host-wide setting it may touch for a moment (tcp_allowed_congestion_control)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .base import BENCH, REPO, WORK, Interrupted, log, run

EMU_SRC = BENCH / "wanemu.c"
EMU_BIN = REPO / "build" / "bench" / "wanemu"
PREFIX = "gpufleet-wan-"
CUBIC_ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
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

# what the namespaces' TCP looks like: recorded per endpoint in the results
NS_KEYS = (
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.core.rmem_max",
    "net.core.wmem_max",
)


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
        self.rt = rt
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

    def emulator_info(self) -> dict[str, Any]:
        """How the emulator ran (for the results file): its CPU, the other CPUs' RPS mask, its SCHED_FIFO priority."""
        return {"cpu": self.emu_cpu, "rps_mask": self.rps_mask, "sched_fifo_priority": self.rt}

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

    @contextlib.contextmanager
    def running(self) -> Iterator[SimpleNamespace]:
        """The measurement's body: on Ctrl-C, SIGTERM or SIGHUP (Interrupted) it says so and the session's
        `interrupted` is set; whatever happens, the lab is closed (processes, container, namespaces, host-wide
        setting). Other errors propagate after the clean-up."""
        session = SimpleNamespace(interrupted=False)
        try:
            yield session
        except (KeyboardInterrupt, Interrupted) as exc:
            log(f"interrupted ({exc or 'SIGINT'}): cleaning up")
            session.interrupted = True
        finally:
            self.close()

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


# ------------------------------------------------------------------------------------- the emulator's counters
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


def emulator_kept_up(emu: dict[str, Any]) -> bool:
    """A run's emulator kept up: the kernel's queue never overflowed and no packet left more than 10 ms late."""
    return emu["kernel_dropped"] == 0 and emu["drop_ring"] == 0 and emu["late_max_ms"] <= 10
