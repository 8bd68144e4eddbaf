"""`gpufleet links` over the lab's emulated long link: two network namespaces, sg (10.250.1.2) and eu (10.251.1.2),
joined through a router namespace where bench/wanemu.c holds each packet 90 ms each way (180 ms RTT) at a 500 Mbit/s
bottleneck (bench/benchlib/lab.py, as bench/wan.py builds it). Each namespace is an inventory host on the local
connection whose modules run inside it (labkit.ns_python), its address on the link its ansible_host.

The link is declared at 2 Gbit/s, four times what the emulated path carries. With stock buffers (4 MiB tcp_wmem max) the
command finds the hosts' buffers the limit (4 streams x 4 MiB / 180 ms < 2 Gbit/s); with tuned buffers (64 MiB,
BBR) in the namespaces it measures more and finds the path the limit: NET-LINK-001 fails. A receiver without iperf3
(hidden in a mount namespace of its own) is a clear error and exit 2. Only the test's own addresses are reached;
sysctls are set inside the namespaces only. About 40 s: 3 s of iperf3 per run after 2 s of slow start left out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import labkit
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from benchlib import lab as wanlab  # noqa: E402

MIB = 1024 * 1024
STOCK = {"net.ipv4.tcp_rmem": f"4096 131072 {6 * MIB}", "net.ipv4.tcp_wmem": f"4096 16384 {4 * MIB}"}
TUNED = {
    "net.ipv4.tcp_rmem": f"4096 131072 {64 * MIB}",
    "net.ipv4.tcp_wmem": f"4096 16384 {64 * MIB}",
    "net.ipv4.tcp_congestion_control": "bbr",
}
RATE_MBIT = 500.0  # the emulated path: a quarter of what the policy declares, well under link_min_pct (50 %)
POLICY = {"site": "sg", "sites": {"sg": {"links": {"eu": {"rtt_ms": 180, "bandwidth_gbps": 2}}}}}
ROOT_KEYS = ("tcp_rmem", "tcp_wmem", "tcp_congestion_control")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, iptables)"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("ip", "iptables", "iperf3", "gcc", "sysctl", "unshare")),
        reason="ip, iptables, iperf3, gcc, sysctl, unshare needed (make deps-test)",
    ),
    pytest.mark.skipif(
        not Path("/usr/include/libnetfilter_queue/libnetfilter_queue.h").exists(),
        reason="libnetfilter-queue-dev needed for bench/wanemu.c (make deps-test)",
    ),
]


@pytest.fixture(scope="module")
def link():
    """The lab's one endpoint pair behind the emulated link (a1 = sg, b1 = eu), the emulator running."""
    wanlab.build_emulator()
    wanlab.WORK.mkdir(parents=True, exist_ok=True)  # the emulator's log
    lab = wanlab.Lab(1, 1500, 90.0, RATE_MBIT, 20.0, rt=0)
    try:
        lab.create()
        lab.start_emulator(loss=0.0)
        yield lab
    finally:
        lab.close()


def _inventory(tmp: Path, lab, receiver_python: Path | None = None) -> Path:
    sg = labkit.local_host(labkit.ns_python(tmp, lab.ns("a1")), ansible_host=lab.addr("a", 1), gpufleet_policy=POLICY)
    eu_python = receiver_python or _ns_python(tmp, lab.ns("b1"), "python-in-eu")
    eu = labkit.local_host(eu_python, ansible_host=lab.addr("b", 1), gpufleet_policy={"site": "eu"})
    return labkit.write_inventory(tmp, {"sg1": sg, "eu1": eu})


def _ns_python(tmp: Path, ns: str, name: str, hide_iperf3: bool = False) -> Path:
    """A Python that runs inside ``ns``; with ``hide_iperf3``, in a mount namespace of its own where iperf3 is
    /dev/null (not executable: the module finds no iperf3), the machine's own mounts untouched."""
    wrapper = tmp / name
    inner = f'exec {sys.executable} "$@"'
    if hide_iperf3:
        inner = f"mount --bind /dev/null {shutil.which('iperf3')} && {inner}"
        wrapper.write_text(f"#!/bin/sh\nexec ip netns exec {ns} unshare -m sh -c '{inner}' sh \"$@\"\n")
    else:
        wrapper.write_text(f"#!/bin/sh\nexec ip netns exec {ns} sh -c '{inner}' sh \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _set(lab, values: dict[str, str]) -> None:
    for side in ("a1", "b1"):
        for key, value in values.items():
            res = subprocess.run(
                ["ip", "netns", "exec", lab.ns(side), "sysctl", "-q", "-w", f"{key}={value}"], capture_output=True
            )
            if res.returncode != 0:
                pytest.skip(f"cannot set {key} in a namespace here: {res.stderr.decode().strip()}")
        subprocess.run(["ip", "-n", lab.ns(side), "tcp_metrics", "flush", "all"], capture_output=True)


def _links(inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    return labkit.gpufleet(
        "links", "-i", str(inventory), "--time", "3", "--omit", "2", "--streams", "4", *extra, timeout=180
    )


def _iperf3_left(lab) -> list[str]:
    left = []
    for side in ("a1", "b1"):
        pids = subprocess.run(["ip", "netns", "pids", lab.ns(side)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "iperf3" in cmd:
                left.append(f"{side} {pid}: {cmd}")
    return left


def test_stock_is_host_limited_tuned_gains_and_finds_the_path(tmp_path, link):
    root_before = {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in ROOT_KEYS}
    inventory = _inventory(tmp_path, link)

    _set(link, STOCK)
    t0 = time.monotonic()
    stock = _links(inventory, "--json")
    print(f"stock run {time.monotonic() - t0:.1f} s")
    assert stock.returncode == 0, stock.stderr
    before = json.loads(stock.stdout)["links"][0]
    _set(link, TUNED)
    tuned = _links(inventory, "--json", "--fail-on", "medium")
    assert tuned.returncode == 1, tuned.stderr  # NET-LINK-001 fails (medium)
    doc = json.loads(tuned.stdout)
    after = doc["links"][0]

    for m in (before, after):
        assert (m["site"], m["peer_site"], m["sender"], m["receiver"]) == ("sg", "eu", "sg1", "eu1")
        assert m["address"] == link.addr("b", 1)  # the receiver's inventory address, nothing else
        assert 170 <= m["rtt_ms"] <= 260, m  # TCP's own RTT over the emulated 180 ms
        assert m["declared_gbps"] == 2.0 and m["streams"] == 4
    assert before["sender_wmem_max"] == 4 * MIB and before["bdp_limit_mbps"] < 200
    assert before["verdict"] == "host-limited (buffers)", before
    assert after["sender_wmem_max"] == 64 * MIB and after["bdp_limit_multi_mbps"] > 1000
    assert after["verdict"] == "path-limited", after
    # what the buffers gained, on the same path
    print({k: (before[k], after[k]) for k in ("single_mbps", "multi_mbps", "rtt_ms", "retransmits")})
    assert after["single_mbps"] > 1.5 * before["single_mbps"], (before, after)
    finding = doc["findings"]["sg1"][0]
    assert finding["rule"] == "NET-LINK-001" and finding["status"] == "fail"

    assert not _iperf3_left(link)
    assert {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in ROOT_KEYS} == root_before


def test_a_host_without_iperf3_is_a_clear_error(tmp_path, link):
    hidden = _ns_python(tmp_path, link.ns("b1"), "python-in-eu-no-iperf3", hide_iperf3=True)
    res = _links(_inventory(tmp_path, link, receiver_python=hidden))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "eu1" in res.stderr and "iperf3 is not installed" in res.stderr, res.stderr
    assert not _iperf3_left(link)
