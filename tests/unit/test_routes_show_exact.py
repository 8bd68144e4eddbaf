"""module_utils/routes.py: the one reader of ``ip -j route show exact PREFIX`` (show_exact, on ip_json) that
route_congctl, rollback and the audit's read_route_congctl share - what it runs, what it returns for several routes,
none, and output it cannot read (one error shape: (None, why), never an exception)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils.routes import (
    ip_json,
    read_route_congctl,
    show_exact,
)

# As `ip -j route show exact 198.51.100.0/24` prints two routes to one prefix (iproute2 6.x): the main table's
# lowest metric first.
TWO = (
    '[{"dst":"198.51.100.0/24","gateway":"10.9.0.1","dev":"mg0","protocol":"static","metric":50,"flags":[],'
    '"metrics":[{"mtu":1400,"congestion":"bbr"}]},'
    '{"dst":"198.51.100.0/24","gateway":"10.9.1.1","dev":"mg1","metric":100,"flags":[]}]\n'
)


class Ip:
    """What ``ip`` prints (the state the reader reads), and the argument lists it was run with."""

    def __init__(self, rc=0, out="", err=""):
        self.result, self.argvs = (rc, out, err), []

    def __call__(self, argv):
        self.argvs.append(argv)
        return self.result


def test_several_routes_come_back_in_ips_order_and_the_congctl_is_the_first_ones():
    ip = Ip(out=TWO)
    shown, why = show_exact(ip, "198.51.100.0/24", "/usr/sbin/ip")
    assert why is None
    assert [(r["gateway"], r["dev"], r["metric"]) for r in shown] == [("10.9.0.1", "mg0", 50), ("10.9.1.1", "mg1", 100)]
    assert ip.argvs == [["/usr/sbin/ip", "-j", "-4", "route", "show", "exact", "198.51.100.0/24"]]
    assert read_route_congctl(Ip(out=TWO), ["198.51.100.0/24"]) == {"198.51.100.0/24": "bbr"}


def test_ipv6_prefix_is_read_with_family_6():
    ip = Ip(out="[]")
    assert show_exact(ip, "2001:db8:100::/48") == ([], None)
    assert ip.argvs == [["ip", "-j", "-6", "route", "show", "exact", "2001:db8:100::/48"]]


@pytest.mark.parametrize("out", ["", "[]", "[]\n"], ids=["nothing", "empty-list", "empty-list-newline"])
def test_no_route_of_its_own_is_an_empty_list_not_an_error(out):
    assert show_exact(Ip(out=out), "198.51.100.0/24") == ([], None)
    assert read_route_congctl(Ip(out=out), ["198.51.100.0/24"]) == {"198.51.100.0/24": None}


@pytest.mark.parametrize(
    "out",
    ['[{"dst":"198.51.100.0/24"', "Error: any valid prefix is expected", '{"dst":"198.51.100.0/24"}', '["x"]', "7"],
    ids=["truncated", "text", "object", "not-routes", "number"],
)
def test_output_that_is_not_a_list_of_routes_is_an_error_naming_the_command(out):
    shown, why = show_exact(Ip(out=out), "198.51.100.0/24")
    assert shown is None
    assert why.startswith("unreadable output of ip -j -4 route show exact 198.51.100.0/24: "), why
    # The audit reads it as "no per-route congestion control known", never a traceback.
    assert read_route_congctl(Ip(out=out), ["198.51.100.0/24"]) == {"198.51.100.0/24": None}


def test_ip_failing_is_an_error_with_its_message_or_its_status():
    assert show_exact(Ip(rc=2, err="Error: inet prefix is expected.\n"), "bad") == (
        None,
        "Error: inet prefix is expected.",
    )
    assert show_exact(Ip(rc=1, out="only stdout\n"), "198.51.100.0/24") == (None, "only stdout")
    assert show_exact(Ip(rc=127), "198.51.100.0/24") == (
        None,
        "ip -j -4 route show exact 198.51.100.0/24: exit status 127",
    )


def test_ip_json_runs_other_route_reads_with_the_same_shape():
    ip = Ip(out='[{"dst":"198.51.100.0","gateway":"10.9.0.1","dev":"mg0","uid":0,"flags":[],"cache":[]}]')
    shown, why = ip_json(ip, ["-4", "route", "get", "198.51.100.0"], "/sbin/ip")
    assert why is None and shown[0]["dev"] == "mg0"
    assert ip.argvs == [["/sbin/ip", "-j", "-4", "route", "get", "198.51.100.0"]]
