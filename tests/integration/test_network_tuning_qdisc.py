"""net.core.default_qdisc: network_tuning sets fq only where BBR needs it for pacing (kernels before 4.13, kernel
commit 218af599fa63 "tcp: internal implementation for pacing") or where asked (network_tuning_default_qdisc); the old
role wrote fq on every host. Runs on fixture roots (network_tuning_root): /proc/sys as files, nothing on this
machine changes."""

from __future__ import annotations

from pathlib import Path

import labkit
import pytest

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
PLAY = labkit.play("Tune", roles=("network_tuning",))
PROC = {
    "net/ipv4/tcp_rmem": "4096\t131072\t6291456",
    "net/ipv4/tcp_wmem": "4096\t16384\t4194304",
    "net/ipv4/tcp_congestion_control": "cubic",
    "net/ipv4/tcp_available_congestion_control": "reno cubic bbr",
    "net/ipv4/tcp_mtu_probing": "0",
    "net/ipv4/tcp_slow_start_after_idle": "1",
    "net/core/rmem_max": "212992",
    "net/core/wmem_max": "212992",
    "net/core/default_qdisc": "pfifo_fast",
}
LONG = {"site": "sg", "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1}}}}}


def _root(base: Path, kernel: str) -> Path:
    for key, value in {**PROC, "kernel/osrelease": kernel}.items():
        path = base / "proc/sys" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return base


@pytest.mark.parametrize(
    "kernel, extra, qdisc",
    [
        ("4.9.0-19-amd64", {}, "fq"),  # BBR without internal pacing: fq needed
        ("6.1.0-27-amd64", {}, None),  # paces by itself: the owner's qdisc stays
        ("6.1.0-27-amd64", {"network_tuning_default_qdisc": "fq_codel"}, "fq_codel"),  # asked for
    ],
)
def test_default_qdisc_only_where_needed(tmp_path, kernel, extra, qdisc):
    root = _root(tmp_path / "root", kernel)
    host = labkit.local_host(
        "{{ ansible_playbook_python }}", gpufleet_policy=LONG, network_tuning_root=str(root), **extra
    )
    inventory = labkit.write_inventory(tmp_path, {"h": host})
    res = run_playbook(str(labkit.write_play(tmp_path, PLAY)), str(inventory)).hosts["h"]
    assert res.status == "ok", res.message
    text = (root / "etc/sysctl.d/61-gpufleet-network.conf").read_text()
    assert "net.ipv4.tcp_congestion_control = bbr" in text
    if qdisc is None:
        assert "default_qdisc" not in text
        assert (root / "proc/sys/net/core/default_qdisc").read_text().strip() == "pfifo_fast"
    else:
        assert f"net.core.default_qdisc = {qdisc}\n" in text
        assert (root / "proc/sys/net/core/default_qdisc").read_text().strip() == qdisc
