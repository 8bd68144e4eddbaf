"""links_info, the module network_tuning resolves a host's links with: measured links (a TCP connect timed from the
host to the policy's peers, here a listener on loopback) count like the audit counts them, and a bad policy fails
with the key's path, not a traceback."""

from __future__ import annotations

import socket
import threading

import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

PLAY = """
- name: Links
  hosts: all
  gather_facts: false
  tasks:
    - name: Resolve
      gpufleet.tuning.links_info:
        policy: "{{ policy }}"
        peer_timeout: 2
      check_mode: true
"""


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(2)
    sock.close()


def _run(tmp_path, policy):
    inv = {
        "all": {
            "hosts": {
                "h": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    "policy": policy,
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(PLAY)
    return run_playbook(str(tmp_path / "play.yml"), str(tmp_path / "hosts.yml")).hosts["h"]


def test_measured_and_declared_links(tmp_path, listener):
    policy = {
        "site": "sg",
        "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": ["198.51.100.0/24"]}}}},
        "peers": [{"site": "lo", "host": "127.0.0.1", "port": listener, "bandwidth_gbps": 10}],
        "network": {"long_link_rtt_ms": 0.0},  # every link is long: the measured one too
    }
    res = _run(tmp_path, policy)
    assert res.status == "ok", res.message
    out = res.results["Resolve"]
    assert out["changed"] is False and out["links"]["source"] == "mixed"
    measured = next(p for p in out["long"] if p["site"] == "lo")
    assert measured["source"] == "measured" and measured["bandwidth_gbps"] == 10.0 and measured["prefixes"] == []
    assert [p["site"] for p in out["sized"]] == ["fra", "lo"]
    assert out["prefixes"] == ["198.51.100.0/24"] and out["long_link_rtt_ms"] == 0.0


def test_bad_policy_names_the_key(tmp_path):
    res = _run(tmp_path, {"sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": ["x"]}}}}})
    assert res.status == "failed"
    assert "policy.sites.sg.links.fra.prefixes[0]: 'x' is not a CIDR network" in res.message
