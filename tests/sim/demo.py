#!/usr/bin/env python3
"""Build the simulated demo fleet that `make demo` audits (inventories/demo).

Every host is a directory under build/demo/<host>/ holding:
  nvml.state   its GPUs (for the simulated libnvidia-ml.so.1, tests/sim/nvml)
  root/        the /proc, /sys, /etc and /var/log files host and NIC facts are read from (tests/sim/host), with the
               PCIe tree `gpufleet topology` reads (tests/sim/host/pcitree.py server(): each GPU behind two PCIe
               switch levels, each NIC on a root port, two sockets)
  ethtool/     recorded ethtool outputs per NIC (read by tests/fixtures/ethtool/fake-ethtool)

A busy host runs one training process per GPU (NVML's process list, gpu.N.processes; /proc/<pid>/stat, its threads'
stat and status under root/: bound to the GPU's NUMA node with numactl, as the topology's bindings say), and every
host has /proc/stat and /proc/uptime, so that `gpufleet probe` (the inventory's gpufleet_probe_proc_root: this tree,
which does not change over the sample, so the probe gives its CPU figures since boot) shows the GPU jobs.

Nothing outside build/demo is written: the audit is read-only and points at these files through inventory
variables (gpufleet_environment, gpufleet_audit_root, gpufleet_ethtool_path).

EXPECTED lists the exact rule ids each host must fail; tests/integration/test_demo.py asserts them. EXPECTED_AFTER
lists what is still failing after `gpufleet remediate`; tests/integration/test_demo_podman.py runs the same fleet in
podman containers (inventories/demo-podman, tests/sim/demo_podman.yml: what `make demo` does) and asserts both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ETHTOOL_FIXTURE = REPO / "tests" / "fixtures" / "ethtool" / "mlx5_core" / "ens1f0np0"


sys.path.insert(0, str(REPO / "tests"))
import simulators  # noqa: E402  (tests/simulators.py: the simulators loaded once, under the names the tests share)

profiles = simulators.profiles()
mkroot = simulators.mkroot()
netroot = simulators.netroot()
pcitree = simulators.pcitree()

# Long-haul TCP as the network_tuning role leaves it: BBR, buffers for 2 x BDP, MTU probing, no idle restart.
TUNED_TCP = {
    "rmem": [4096, 131072, 268435456],
    "wmem": [4096, 16384, 268435456],
    "congestion_control": "bbr",
    "available_congestion_control": ["reno", "cubic", "bbr"],
    "allowed_congestion_control": ["reno", "cubic", "bbr"],
    "mtu_probing": 1,
    "slow_start_after_idle": 0,
    "rmem_max": 268435456,
    "wmem_max": 268435456,
    "default_qdisc": "fq",
}
# Linux defaults, as on a freshly installed server.
STOCK_TCP = {"available_congestion_control": ["reno", "cubic", "bbr"]}


def busy(gpus: int, util: int = 95) -> list[str]:
    """GPUs under load: utilization up, PCIe link at full speed (busy GPUs do not train down), no idle reason."""
    return [f"gpu.*.utilization_gpu={util}", "gpu.*.utilization_memory=60", "gpu.*.clocks_event_reasons=0x0"]


def full_memory(profile: str, pct: float) -> list[str]:
    total = int(profiles.PROFILES[profile]["memory_total"])
    return [f"gpu.*.memory_used={int(total * pct / 100)}"]


# host -> settings. group: inventory group (= site); gpu: (profile, count, driver, overrides); host: mkroot
# overrides; tcp: TUNED_TCP or STOCK_TCP; rings_tuned: NIC rings at their maximum; toolkits: CUDA versions.
HOSTS = {
    # The classic case: A100s at 98 % memory while the host swaps, persistence mode off.
    "sg-a100-01": {
        "group": "ap_southeast",
        "gpu": ("a100", 8, "550", busy(8) + full_memory("a100", 98.0) + ["gpu.*.persistence_mode=0"]),
        "host": {
            "swap_total_mib": 16384,
            "swap_used_mib": 12288,
            "pswpin": 48213771,
            "pswpout": 73102245,
            "psi_memory_some_avg10": 38.5,
            "psi_memory_full_avg10": 21.0,
            "swappiness": 60,
        },
    },
    # A host left on TuneD's powersave profile: the powersave governor with the "power" energy-performance
    # preference (intel_pstate keeps the clocks low; the balanced default would only be a low warning).
    "sg-h100-02": {
        "group": "ap_southeast",
        "gpu": ("h100", 8, "550", busy(8)),
        "host": {"governor": "powersave", "epp": "power"},
    },
    # Fresh install on an overseas link: stock TCP. Its NIC keeps the driver's default rings, which is no finding
    # without ring drops (NET-RING-001 judges the drop counters, not the ratio to the maximum).
    "sg-l40s-03": {
        "group": "ap_southeast",
        "gpu": ("l40s", 4, "570", []),
        "host": {},
        "tcp": STOCK_TCP,
        "rings_tuned": False,
    },
    # An H100 whose GPU 3 trained down to x8 and stays there under load.
    "fra-h100-01": {
        "group": "eu_west",
        "gpu": ("h100", 8, "550", busy(8) + ["gpu.3.pcie_width_current=8"]),
        "host": {},
    },
    # Driver 535 (CUDA 12.2) with a CUDA 13.0 toolkit installed: 13.x needs driver 580 or newer (a 12.4 toolkit would
    # only be a minor-version gap, a low warning: CUDA minor-version compatibility).
    "fra-a100-02": {"group": "eu_west", "gpu": ("a100", 8, "535", []), "host": {}, "toolkits": ["12.2.2", "13.0.1"]},
    # Power limit capped at 250 W.
    "iad-h100-01": {
        "group": "us_east",
        "gpu": ("h100", 8, "550", ["gpu.*.power_limit_mw=250000", "gpu.*.enforced_power_limit_mw=250000"]),
        "host": {},
    },
    # ECC being turned off, waiting for a reboot.
    "iad-a100-02": {"group": "us_east", "gpu": ("a100", 4, "550", ["gpu.*.ecc_pending=0"]), "host": {}},
    # Nothing wrong.
    "iad-h100-03": {"group": "us_east", "gpu": ("h100", 8, "570", busy(8, 80)), "host": {}},
}

EXPECTED = {
    "sg-a100-01": ["GPU-MEM-001", "GPU-PWR-001", "HOST-MEM-001", "HOST-MEM-002"],
    "sg-h100-02": ["HOST-CPU-001"],
    "sg-l40s-03": ["NET-TCP-001", "NET-TCP-002", "NET-TCP-003", "NET-TCP-004"],
    "fra-h100-01": ["GPU-PCI-001"],
    "fra-a100-02": ["SW-CUDA-001"],
    "iad-h100-01": ["GPU-PWR-002"],
    "iad-a100-02": ["GPU-ECC-002"],
    "iad-h100-03": [],
}

# What `gpufleet remediate` (playbooks/remediate.yml) leaves failing on each host, and why.
EXPECTED_AFTER = {
    # GPU memory use and swapping have no automatic fix: they need a person (the job, the host's RAM).
    "sg-a100-01": ["GPU-MEM-001", "HOST-MEM-001"],
    "sg-h100-02": [],
    "sg-l40s-03": [],
    # A link trained down to x8 needs a person (reseat, riser, BIOS).
    "fra-h100-01": ["GPU-PCI-001"],
    # Driver upgrades are the nvidia_driver role's, which remediate.yml does not run (a driver change needs a reboot).
    "fra-a100-02": ["SW-CUDA-001"],
    "iad-h100-01": [],
    "iad-a100-02": [],
    "iad-h100-03": [],
}

NICS = [("ens1f0np0", 0, "0000:05:00.0"), ("ens2f0np0", 1, "0000:85:00.0")]


def _ethtool_dir(dest: Path, tuned_rings: bool) -> None:
    for name, _node, bus in NICS:
        nic = dest / name
        shutil.copytree(ETHTOOL_FIXTURE, nic)
        for path in nic.iterdir():
            text = path.read_text().replace("ens1f0np0", name).replace("0000:05:00.0", bus)
            if tuned_rings and path.name == "show-ring":
                text = re.sub(
                    r"(Current hardware settings:\nRX:\s+)1024(.*\n(?:.*\n)*?TX:\s+)1024", r"\g<1>8192\g<2>8192", text
                )
            if tuned_rings and path.name == "show-ring.json":
                text = text.replace('"rx": 1024', '"rx": 8192').replace('"tx": 1024', '"tx": 8192')
            path.write_text(text)


def _driver_files(root: Path, driver_version: str, toolkits: list[str]) -> None:
    proc = root / "proc/driver/nvidia"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver_version}  Release Build  (dvs-builder@U16-I3)\n"
        "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
    )
    for version in toolkits:
        base = root / "usr/local" / f"cuda-{version.rsplit('.', 1)[0]}"
        base.mkdir(parents=True, exist_ok=True)
        (base / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": version}}, indent=3))
    if toolkits:
        link = root / "usr/local/cuda"
        link.symlink_to(f"cuda-{toolkits[-1].rsplit('.', 1)[0]}")


def _pci_tree(root: Path, state: dict[str, str], profile: str, count: int) -> None:
    """The host's PCIe tree (pcitree.server) at the GPUs' NVML bus ids, and the NICs netroot wrote moved into it:
    /sys/class/net/<name> becomes the link into the NIC's PCI function that Linux has, its device and driver links
    point at that function."""
    buses = [f"0000:{state[f'gpu.{g}.pci_bus_id'].split(':', 1)[1].lower()}" for g in range(count)]
    pcitree.build(root, pcitree.server(profile, buses, NICS))
    for name, _node, bdf in NICS:
        function = (root / "sys/bus/pci/devices" / bdf).resolve()
        netdir = root / "sys/class/net" / name
        old = (netdir / "device").resolve()
        (function / "net").mkdir(exist_ok=True)
        shutil.move(str(netdir), str(function / "net" / name))
        os.symlink(os.path.relpath(function / "net" / name, netdir.parent), netdir)
        (function / "net" / name / "device").unlink()
        os.symlink(f"../../../{bdf}", function / "net" / name / "device")
        driver = os.readlink(old / "driver").rsplit("/", 1)[1]
        os.symlink(os.path.relpath(root / "sys/bus/pci/drivers" / driver, function), function / "driver")
        shutil.rmtree(old)
        if not any(old.parent.iterdir()):
            old.parent.rmdir()  # netroot's pci0000:00, now empty


UPTIME_S = 3 * 86400 + 4711  # the hosts booted three days ago
JOB_AGE_S = 7200  # the GPU jobs started two hours ago
JOB_THREADS = 12  # per process: the main thread, data-loader workers, NCCL's
HZ = 100  # USER_HZ: the clock ticks of /proc/stat and /proc/<pid>/stat on Linux


def _proc_stat(busy: bool) -> str:
    """/proc/stat of a host that has run for UPTIME_S: its CPUs about a quarter busy under GPU jobs, else nearly idle
    (proc_stat(5): user nice system idle iowait irq softirq steal guest guest_nice, in USER_HZ ticks)."""
    total = UPTIME_S * HZ
    lines, sums = [], [0] * 10
    cpus = len(mkroot.cpu_layout(mkroot.settings({})))
    for cpu in range(cpus):
        pct = (20 + (cpu * 7) % 11) if busy else (1 + cpu % 3)
        user = total * pct // 100 * 4 // 5
        system = total * pct // 100 - user
        values = [user, 0, system, total - user - system, 0, 0, 0, 0, 0, 0]
        sums = [a + b for a, b in zip(sums, values, strict=True)]
        lines.append(f"cpu{cpu} " + " ".join(map(str, values)))
    return "\n".join(["cpu  " + " ".join(map(str, sums)), *lines, f"btime {1796000000 - UPTIME_S}", ""])


def _pid_stat(pid: int, comm: str, ticks: int, threads: int, processor: int) -> str:
    """One /proc/<pid>/stat line (proc_pid_stat(5), 52 fields): utime (14) and stime (15), num_threads (20),
    starttime (22), processor (39)."""
    fields = ["0"] * 50  # fields 3..52
    fields[0] = "S"
    fields[1] = fields[2] = fields[3] = str(pid)  # ppid, pgrp, session
    fields[11], fields[12] = str(ticks * 9 // 10), str(ticks - ticks * 9 // 10)
    fields[15], fields[17] = "20", str(threads)  # priority, num_threads
    fields[19] = str((UPTIME_S - JOB_AGE_S) * HZ)
    fields[36] = str(processor)
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


def _processes(root: Path, state: dict[str, str], count: int, busy: bool) -> None:
    """/proc/stat, /proc/uptime and, on a busy host, one training process per GPU (in NVML and in /proc)."""
    proc = root / "proc"
    (proc / "stat").write_text(_proc_stat(busy))
    (proc / "uptime").write_text(f"{UPTIME_S}.00 {UPTIME_S * 180}.00\n")
    if not busy:
        return
    for g in range(count):
        pid = 41000 + g
        cpus = mkroot.parse_cpulist(state[f"gpu.{g}.cpu_affinity"])
        used = int(state[f"gpu.{g}.memory_used"]) - 512 * 1024 * 1024
        state[f"gpu.{g}.processes"] = f"{pid}:{max(used, 0)}"
        job = 6 * JOB_AGE_S * HZ  # about six CPUs' worth: the loader workers keep the GPU fed
        base = proc / str(pid)
        for t in range(JOB_THREADS):
            tid = pid + t
            share = job // 2 if t == 0 else job // (2 * (JOB_THREADS - 1))
            task = base / "task" / str(tid)
            task.mkdir(parents=True)
            ran_on = cpus[(g * 13 + t * 5) % len(cpus)]
            (task / "stat").write_text(_pid_stat(tid, "python3", share, JOB_THREADS, ran_on))
        (base / "stat").write_text(_pid_stat(pid, "python3", job, JOB_THREADS, cpus[g * 13 % len(cpus)]))
        (base / "comm").write_text("python3\n")
        (base / "status").write_text(
            f"Name:\tpython3\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{pid}\n"
            f"Threads:\t{JOB_THREADS}\nCpus_allowed_list:\t{state[f'gpu.{g}.cpu_affinity']}\n"
        )


def build(out: Path) -> dict[str, Path]:
    out = out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    built = {}
    for name, spec in HOSTS.items():
        host_dir = out / name
        host_dir.mkdir()
        profile, count, driver, overrides = spec["gpu"]
        state = profiles.build_state(profile, gpus=count, driver=driver, overrides=overrides, seed=name)
        if any(o.startswith("gpu.*.utilization_gpu") for o in overrides):
            for g in range(count):  # a busy GPU's link runs at full generation
                state[f"gpu.{g}.pcie_gen_current"] = state[f"gpu.{g}.pcie_gen_max"]
        root = mkroot.build_root(host_dir / "root", {"hostname": name, **spec["host"]})
        _processes(root, state, count, any(o.startswith("gpu.*.utilization_gpu") for o in overrides))
        profiles.write_state(host_dir / "nvml.state", state)
        netroot.build_netroot(
            root,
            nics=[
                {"name": n, "driver": "mlx5_core", "mtu": 9000, "speed": 200000, "numa_node": node}
                for n, node, _bus in NICS
            ],
            tcp=spec.get("tcp", TUNED_TCP),
        )
        _pci_tree(root, state, profile, count)
        _driver_files(root, state["driver_version"], spec.get("toolkits", ["12.4.1"]))
        _ethtool_dir(host_dir / "ethtool", spec.get("rings_tuned", True))
        built[name] = host_dir
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "build" / "demo"), help="where to build (default: %(default)s)")
    parser.add_argument("--expected", action="store_true", help="print the expected failing rule ids as JSON")
    args = parser.parse_args(argv)
    if args.expected:
        print(json.dumps(EXPECTED, indent=2))
        return 0
    built = build(Path(args.out))
    print(f"demo fleet: {len(built)} simulated hosts in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
