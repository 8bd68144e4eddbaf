"""module_utils/links.py: declared and measured links (resolve) and the TCP-connect RTT measurement (measure_rtt)."""

import socket

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils.links import _median, measure_rtt, resolve
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import validate

SITES = {"sg": {"links": {"fra": {"rtt_ms": 160, "bandwidth_gbps": 1}, "iad": {"rtt_ms": 220, "bandwidth_gbps": 1}}}}


def test_declared_links_for_the_hosts_site():
    links = resolve(validate({"site": "sg", "sites": SITES}))
    assert links["source"] == "declared" and links["site"] == "sg"
    assert [(p["site"], p["rtt_ms"], p["source"]) for p in links["peers"]] == [
        ("fra", 160.0, "declared"),
        ("iad", 220.0, "declared"),
    ]


def test_no_site_no_links():
    assert resolve(validate({"sites": SITES})) == {"source": "none", "site": None, "peers": [], "errors": []}


def test_measured_replaces_declared_and_errors_are_kept():
    policy = validate(
        {
            "site": "sg",
            "sites": SITES,
            "peers": [
                {"site": "fra", "host": "192.0.2.1", "port": 22, "bandwidth_gbps": 10},
                {"site": "lon", "host": "192.0.2.2"},
            ],
        }
    )
    asked = []

    def measure(peers):
        asked.extend(peers)
        return [{"rtt_ms": 171.234, "error": None}, {"rtt_ms": None, "error": "connection refused"}]

    links = resolve(policy, measure)
    assert asked == [{"name": "fra", "host": "192.0.2.1", "port": 22}, {"name": "lon", "host": "192.0.2.2", "port": 22}]
    assert links["source"] == "mixed"
    fra = [p for p in links["peers"] if p["site"] == "fra"][0]
    assert fra == {"site": "fra", "rtt_ms": 171.23, "bandwidth_gbps": 10.0, "source": "measured", "host": "192.0.2.1"}
    assert links["errors"] == [{"site": "lon", "host": "192.0.2.2", "error": "connection refused"}]


def test_measured_only():
    policy = validate({"peers": [{"site": "fra", "host": "192.0.2.1"}]})
    links = resolve(policy, lambda peers: [{"rtt_ms": 80.0, "error": None}])
    assert links["source"] == "measured"
    assert links["peers"][0]["bandwidth_gbps"] == policy["network"]["default_bandwidth_gbps"]


# --- measure_rtt ---------------------------------------------------------------------------------


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


def _closed_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_measure_rtt_open_closed_and_unresolvable(listener):
    closed = _closed_port()
    got = measure_rtt(
        [
            {"name": "open", "host": "127.0.0.1", "port": listener},
            {"name": "closed", "host": "127.0.0.1", "port": closed},
            {"name": "nowhere", "host": "no-such-host.invalid"},
        ],
        timeout=2.0,
        attempts=3,
    )
    assert [g["name"] for g in got] == ["open", "closed", "nowhere"]
    assert isinstance(got[0]["rtt_ms"], float) and 0 <= got[0]["rtt_ms"] < 1000 and got[0]["error"] is None
    assert got[1]["rtt_ms"] is None and "refused" in got[1]["error"].lower()
    assert got[1]["port"] == closed
    assert got[2]["rtt_ms"] is None and got[2]["error"].startswith("cannot resolve no-such-host.invalid")
    assert got[2]["port"] == 22


def test_measure_rtt_is_the_median():
    assert _median([5.0, 1.0, 3.0]) == 3.0
    assert _median([4.0, 1.0]) == 2.5
    assert measure_rtt([]) == []
