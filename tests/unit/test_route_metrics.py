"""module_utils/routes.py: a route's metrics go back to ``ip route`` as ip printed them - locked ones with their lock
flag, rtt/rttvar/rto_min as times - so route_congctl's replace and rollback's restore keep them (issue 28, point 4).

The fixtures are what iproute2 6.1 prints for the route added with
``ip route add 198.51.100.0/24 via 10.9.0.1 dev mg0 proto static mtu lock 1400 rtt 30ms rttvar lock 12ms rto_min 2s
advmss lock 1300 congctl lock cubic quickack 1 features ecn``: ip/iproute.c print_rta_metrics prints every metric
in JSON with print_uint (rtt divided by 8 and rttvar by 4 into milliseconds, rto_min in milliseconds), the ecn
feature as null, and the "lock" word only outside the JSON context, so the locks come from the text output."""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.module_utils.routes import (
    parse_metric_locks,
    route_argv,
    show_exact,
)

PREFIX = "198.51.100.0/24"
JSON = (
    '[{"dst":"198.51.100.0/24","gateway":"10.9.0.1","dev":"mg0","protocol":"static","flags":[],"metrics":[{"mtu":1400,'
    '"rtt":30,"rttvar":12,"advmss":1300,"ecn":null,"rto_min":2000,"quickack":1,"congestion":"cubic"}]}]\n'
)
TEXT = (
    "198.51.100.0/24 via 10.9.0.1 dev mg0 proto static mtu lock 1400 rtt 30ms rttvar lock 12ms advmss lock 1300 "
    "features ecn rto_min lock 2s quickack 1 congctl lock cubic \n"
)


class Ip:
    """What ``ip`` prints: JSON for ``-j``, text otherwise; the argument lists it was run with."""

    def __init__(self, json_out=JSON, text_out=TEXT, text_rc=0):
        self.json_out, self.text_out, self.text_rc, self.argvs = json_out, text_out, text_rc, []

    def __call__(self, argv):
        self.argvs.append(argv)
        return (0, self.json_out, "") if "-j" in argv else (self.text_rc, self.text_out, "")


def test_locks_are_read_from_the_text_output_per_route():
    assert parse_metric_locks(TEXT) == [["advmss", "congestion", "mtu", "rto_min", "rttvar"]]
    two = (
        "198.51.100.0/24 via 10.9.0.1 dev mg0 metric 50 mtu lock 1400 \n"
        "198.51.100.0/24 metric 100 \n"
        "\tnexthop via 10.9.1.1 dev mg1 weight 1 \n\tnexthop via 10.9.2.1 dev mg2 weight 1 \n"
    )
    assert parse_metric_locks(two) == [["mtu"], []]


def test_replace_keeps_locked_mtu_and_time_metrics_with_units():
    ip = Ip()
    shown, why = show_exact(ip, PREFIX, "ip", locks=True)
    assert why is None and ip.argvs[1] == ["ip", "-4", "route", "show", "exact", PREFIX]
    assert route_argv("replace", PREFIX, shown[0], "bbr") == [
        "route", "replace", PREFIX, "via", "10.9.0.1", "dev", "mg0", "proto", "static",
        "mtu", "lock", "1400", "advmss", "lock", "1300",
        "rtt", "30ms", "rttvar", "lock", "12ms", "rto_min", "2000ms",  # rto_min is always locked; `lock` is refused
        "quickack", "1", "features", "ecn",
        "congctl", "lock", "bbr",
    ]  # fmt: skip


def test_restore_replays_the_routes_own_congctl_with_its_lock():
    shown, _why = show_exact(Ip(), PREFIX, "ip", locks=True)
    argv = route_argv("replace", PREFIX, shown[0], "cubic")
    assert argv[argv.index("congctl") :] == ["congctl", "lock", "cubic"]
    assert argv[argv.index("mtu") : argv.index("mtu") + 3] == ["mtu", "lock", "1400"]


def test_without_readable_locks_the_metrics_still_go_back_unlocked():
    shown, why = show_exact(Ip(text_rc=1, text_out=""), PREFIX, "ip", locks=True)
    assert why is None and "locks" not in shown[0]
    argv = route_argv("replace", PREFIX, shown[0])
    assert argv[argv.index("mtu") : argv.index("mtu") + 2] == ["mtu", "1400"] and "30ms" in argv and "lock" not in argv


def test_show_exact_reads_locks_only_when_asked():
    ip = Ip()
    shown, _why = show_exact(ip, PREFIX, "ip")
    assert len(ip.argvs) == 1 and "locks" not in shown[0]
