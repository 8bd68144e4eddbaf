"""module_utils/link_measure.py, the two ends of a measured link: iperf3's JSON (recorded from iperf3 3.12: a
two-stream run over loopback, and a refused connection), the TCP settings and listening sockets read under a
fixture root, the bounded command lines, and the guard that lets `stop` signal only our own iperf3 server."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.gpufleet.tuning.plugins.module_utils import link_measure
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "iperf3"


def test_a_run_gives_goodput_retransmits_congestion_control_and_the_tcp_rtt():
    text = (FIXTURES / "client-2-streams.json").read_text()
    run = link_measure.parse(text)
    senders = [s["sender"] for s in json.loads(text)["end"]["streams"]]
    assert run["streams"] == 2
    assert run["mbps"] > 1000 and run["sent_mbps"] >= run["mbps"] * 0.9
    assert run["congestion_control"] == "bbr"
    assert run["min_rtt_ms"] == min(s["min_rtt"] for s in senders) / 1000  # TCP_INFO's, in us: 50 us on loopback
    assert isinstance(run["retransmits"], int)


def test_iperf3s_own_error_and_output_that_is_not_json():
    assert link_measure.parse((FIXTURES / "client-refused.json").read_text()) == {
        "error": "unable to connect to server: Connection refused"
    }
    assert link_measure.parse("", "timeout: failed to run command 'iperf3'") == {
        "error": "timeout: failed to run command 'iperf3'"
    }
    assert link_measure.parse("")["error"]


def _root(tmp_path: Path, files: dict[str, str]) -> HostFS:
    for name, text in files.items():
        path = tmp_path / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return HostFS(str(tmp_path))


def test_tcp_settings_of_the_namespace(tmp_path):
    fs = _root(
        tmp_path,
        {
            "/proc/sys/net/ipv4/tcp_rmem": "4096\t131072\t6291456\n",
            "/proc/sys/net/ipv4/tcp_wmem": "4096\t16384\t4194304\n",
            "/proc/sys/net/ipv4/tcp_congestion_control": "cubic\n",
        },
    )
    assert link_measure.tcp_settings(fs) == {
        "rmem": [4096, 131072, 6291456],
        "wmem": [4096, 16384, 4194304],
        "congestion_control": "cubic",
    }
    assert link_measure.tcp_settings(HostFS(str(tmp_path / "none"))) == {
        "rmem": None,
        "wmem": None,
        "congestion_control": None,
    }


HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def test_a_port_listens_only_in_state_listen(tmp_path):
    fs = _root(
        tmp_path,
        {
            # 5201 (0x1451) listening on 0.0.0.0; 5202 (0x1452) only an established connection
            "/proc/net/tcp": HEAD
            + "   0: 00000000:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
            + "   1: 0100007F:1452 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 2\n",
            "/proc/net/tcp6": HEAD,
        },
    )
    assert link_measure.listening(5201, fs)
    assert not link_measure.listening(5202, fs)
    assert not link_measure.listening(5203, fs)


def test_both_command_lines_are_bounded_by_timeout():
    server = link_measure.server_argv("/usr/bin/timeout", "/usr/bin/iperf3", 5201, 60)
    assert server[:4] == ["/usr/bin/timeout", "-k", "2", "60"] and server[4:] == ["/usr/bin/iperf3", "-s", "-p", "5201"]
    client = link_measure.client_argv("/usr/bin/timeout", "/usr/bin/iperf3", "198.51.100.7", 5201, 5, 2, 4)
    assert client[:4] == ["/usr/bin/timeout", "-k", "5", "27"]
    assert client[client.index("-c") + 1] == "198.51.100.7" and client[client.index("-P") + 1] == "4"
    assert "-J" in client


def test_stop_signals_only_our_iperf3_server():
    assert not link_measure.ours(os.getpid(), 5201)  # pytest: not an iperf3 server
    assert not link_measure.ours(2**22 + 7, 5201)  # no such process
