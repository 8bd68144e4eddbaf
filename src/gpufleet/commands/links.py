"""`gpufleet links`: measure each declared long-haul link (policy ``sites.SITE.links.PEER``) between one host of each
site with iperf3 (playbooks/links.yml, one site pair at a time), and show the measured throughput against the
declared bandwidth and against what the hosts' buffers allow over the measured RTT (the bandwidth-delay limit), with a
verdict: host-limited (buffers, or congestion control) or path-limited (NET-LINK-001).

Only hosts of the inventory are reached, at their inventory address (``gpufleet_link_address``, else
``ansible_host``, else the name). The sender of a pair is the first host (inventory order) of the site that declares
the link (the first of the two in sorted order when both do), the receiver the first host of the peer site.

A host's answer is the result of the link_measure module (``MEASURE_ACTION``), found by that module, never by the
task's display name.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from gpufleet import exits, paths, preflight
from gpufleet.commands import options
from gpufleet.runner import RunResult, run_playbook
from gpufleet.text import clean

PLAYBOOK = "links.yml"
MEASURE_ACTION = "gpufleet.tuning.link_measure"
SCHEMA = "gpufleet.links/v1"
ADDRESS_VARS = ("gpufleet_link_address", "ansible_host")
MAX_SECONDS = 60
MAX_STREAMS = 64


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "links",
        help="measure each declared long-haul link with iperf3: measured vs declared vs what the buffers allow",
        description="For each site pair the policy declares (sites.SITE.links.PEER), pick one host of each site "
        "from the inventory, start an iperf3 server on one (bounded in time, stopped by its PID), run the client on "
        "the other with one stream and with the policy's stream count (network.link_streams), one pair at a time, "
        "and show the measured throughput and TCP round-trip time against the declared bandwidth and against the "
        "bandwidth-delay limit of the hosts' current buffers (sender tcp_wmem, receiver tcp_rmem maxima: bandwidth "
        "<= window / RTT), with a verdict: host-limited (buffers or congestion control: remediate fixes it) or "
        "path-limited (NET-LINK-001: the path or the provider). iperf3 must be installed on the hosts measured. "
        "Changes no setting.",
        examples="""
  gpufleet links -i inventories/prod                       # every declared site pair, 10 s per run
  gpufleet links -i inventories/prod -l 'site_sg:site_eu' --time 5 --streams 8
  gpufleet links -i inventories/prod --json > before.json  # then remediate, measure again, compare
""",
        exit_codes="0 measured (no finding at or above --fail-on), 1 NET-LINK-001 fails at or above --fail-on, "
        "2 a host could not measure (unreachable, iperf3 missing, iperf3 failed), 3 usage error (no declared pair "
        "among the hosts), 130 interrupted, 141 the output's reader went away (SIGPIPE)",
    )
    options.fleet(parser, inventory_required=True, verb="measure")
    parser.add_argument(
        "--time",
        type=options.whole_number(1, MAX_SECONDS, " of seconds"),
        default=10,
        metavar="S",
        help=f"seconds each iperf3 run measures, 1 to {MAX_SECONDS} (default: %(default)s)",
    )
    parser.add_argument(
        "--omit",
        type=options.whole_number(0, 10, " of seconds"),
        default=2,
        metavar="S",
        help="seconds of TCP slow start left out of each run, 0 to 10 (default: %(default)s)",
    )
    parser.add_argument(
        "--streams",
        type=options.whole_number(1, MAX_STREAMS),
        metavar="N",
        help=f"parallel streams of the second run, 1 to {MAX_STREAMS} (default: the policy's network.link_streams)",
    )
    parser.add_argument(
        "--port",
        type=options.whole_number(1024, 65535),
        default=5201,
        help="TCP port of the iperf3 server (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the measurements and findings as JSON")
    options.fail_on(parser)
    parser.set_defaults(func=run)


# ----------------------------------------------------------------------------------------------- the pairs


def host_policies(inventory: list[str], limit: str | None, overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """host -> {"policy": its merged, validated policy (the inventory's layers, then --policy), "address": its
    inventory address}, in inventory order."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as policy_mod
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    layers = preflight.inventory_layers()
    out = {}
    for name, values in preflight.host_variables(inventory, limit, [*layers, *ADDRESS_VARS]).items():
        stack = [values.get(layer) or {} for layer in layers] + [overrides or {}]
        merged = policy_mod.merge_layers(stack, names=[*layers, preflight.CLI_LAYER])
        address = next((str(values[v]) for v in ADDRESS_VARS if values.get(v)), name)
        out[name] = {"policy": policy_mod.validate(merged, known_rules=rules.BY_ID), "address": address}
    return out


def plan(hosts: dict[str, dict[str, Any]], streams: int | None = None) -> list[dict[str, Any]]:
    """The site pairs to measure, each once: {site, peer_site, sender, receiver, address, declared_gbps, streams,
    policy} (``error`` instead of a receiver when no host of the peer site is in the inventory)."""
    by_site: dict[str, list[str]] = {}
    for name, host in hosts.items():
        site = host["policy"].get("site")
        if site:
            by_site.setdefault(site, []).append(name)
    pairs, seen = [], set()
    for site in sorted(by_site):
        sender = by_site[site][0]
        pol = hosts[sender]["policy"]
        declared = ((pol.get("sites") or {}).get(site) or {}).get("links") or {}
        for peer in sorted(declared):
            if peer == site or frozenset((site, peer)) in seen:
                continue
            seen.add(frozenset((site, peer)))
            entry = {
                "site": site,
                "peer_site": peer,
                "sender": sender,
                "declared_gbps": float(declared[peer]["bandwidth_gbps"]),
                "declared_rtt_ms": float(declared[peer]["rtt_ms"]),
                "streams": int(streams or pol["network"]["link_streams"]),
                "policy": pol,
            }
            if peer in by_site:
                receiver = by_site[peer][0]
                entry.update(receiver=receiver, address=hosts[receiver]["address"])
            else:
                entry.update(receiver=None, address=None, error=f"no host of site {peer} in the inventory")
            pairs.append(entry)
    return pairs


# ----------------------------------------------------------------------------------------------- one pair


def measure(pair: dict[str, Any], args: argparse.Namespace) -> tuple[dict[str, Any], list[str], str | None]:
    """Run links.yml for one pair: (the measurement for rules/measured.assess, the hosts' problems, the signal that
    interrupted the run or None)."""
    extravars = {
        "gpufleet_links_server": pair["receiver"],
        "gpufleet_links_client": pair["sender"],
        "gpufleet_links_port": args.port,
        "gpufleet_links_seconds": args.time,
        "gpufleet_links_omit": args.omit,
        "gpufleet_links_streams": sorted({1, pair["streams"]}),
    }
    limit = f"{pair['receiver']}:{pair['sender']}"
    result = run_playbook(PLAYBOOK, args.inventory, limit=limit, extravars=extravars, quiet=not args.verbose)
    return (*from_results(pair, result), result.interrupted)


def from_results(pair: dict[str, Any], result: RunResult) -> tuple[dict[str, Any], list[str]]:
    """The measurement of ``pair`` from the run's results (by module), and a line per host that failed."""
    problems = []
    for name in (pair["receiver"], pair["sender"]):
        host = result.hosts.get(name)
        if host is None:
            problems.append(f"{name}: no result")
        elif host.status != "ok":
            problems.append(f"{name}: {host.status}: {host.message}")
    server = result.hosts.get(pair["receiver"])
    client = result.hosts.get(pair["sender"])
    sent = (client.actions.get(MEASURE_ACTION) if client else None) or {}
    receiver_tcp = _server_tcp(server)
    runs = sent.get("runs") or []
    single = next((r for r in runs if r.get("requested_streams") == 1), {})
    multi = next((r for r in runs if r.get("requested_streams") == pair["streams"]), {})
    errors = [f"{r.get('requested_streams')} stream(s): {r['error']}" for r in runs if r.get("error")]
    for r in runs:
        if r.get("error"):
            problems.append(f"{pair['sender']}: iperf3 to {pair['address']}: {r['error']}")
    rtts = [r.get("min_rtt_ms") for r in runs if r.get("min_rtt_ms")]
    sender_tcp = sent.get("tcp") or {}
    out = {k: v for k, v in pair.items() if k != "policy"}
    out.update(
        rtt_ms=min(rtts) if rtts else None,
        single_mbps=single.get("mbps"),
        multi_mbps=multi.get("mbps"),
        retransmits={str(r.get("requested_streams")): r.get("retransmits") for r in runs if not r.get("error")},
        congestion_control=single.get("congestion_control") or sender_tcp.get("congestion_control"),
        sender_wmem_max=(sender_tcp.get("wmem") or [None] * 3)[2],
        receiver_rmem_max=(receiver_tcp.get("rmem") or [None] * 3)[2],
        sender_tcp=sender_tcp or None,
        receiver_tcp=receiver_tcp or None,
    )
    if not runs:
        out["error"] = "; ".join(problems) or "no measurement"
    elif errors:
        out["error"] = "; ".join(errors)
    return out, problems


def _server_tcp(server) -> dict[str, Any]:
    """The receiving host's TCP settings, from its server task's result (the stop task's is the same host's)."""
    if server is None:
        return {}
    for res in server.results.values():
        if isinstance(res, dict) and res.get("state") == "server" and res.get("tcp"):
            return res["tcp"]
    return (server.actions.get(MEASURE_ACTION) or {}).get("tcp") or {}


# ----------------------------------------------------------------------------------------------- output


def _num(value: Any, unit: str = "") -> str:
    return "?" if value is None else f"{value:.0f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def print_link(m: dict[str, Any], out=None) -> None:
    """One pair, as a person reads it. Host data goes through text.clean."""
    out = out or sys.stdout

    def say(line: str) -> None:
        print(clean(line), file=out)

    say(f"{m['site']} -> {m['peer_site']}: {m['sender']} -> {m.get('receiver') or '?'} at {m.get('address') or '?'}")
    say(
        f"  declared {m['declared_gbps']:g} Gbit/s; RTT {_num(m.get('rtt_ms'), ' ms')} (TCP, declared "
        f"{m['declared_rtt_ms']:g} ms); sender {m.get('congestion_control') or '?'}, window "
        f"{_num(m.get('window_bytes'))} bytes (sender tcp_wmem {_num(m.get('sender_wmem_max'))}, receiver tcp_rmem "
        f"{_num(m.get('receiver_rmem_max'))})"
    )
    say(
        f"  measured     1 stream {_num(m.get('single_mbps'), ' Mbit/s')}, {m['streams']} streams "
        f"{_num(m.get('multi_mbps'), ' Mbit/s')}"
    )
    say(
        f"  BDP limit    1 stream {_num(m.get('bdp_limit_mbps'), ' Mbit/s')}, {m['streams']} streams "
        f"{_num(m.get('bdp_limit_multi_mbps'), ' Mbit/s')}"
    )
    say(f"  verdict      {m['verdict']}: {m['why']}")


def run(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
    from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import measured
    from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import severity_rank

    overrides = preflight.load_policy_file(args.policy)
    preflight.inventory_hosts(args.inventory, args.limit, overrides, args.policy)
    hosts = host_policies(args.inventory, args.limit, overrides)
    pairs = plan(hosts, args.streams)
    if not pairs:
        raise exits.UsageError(
            "no declared long-haul link among the hosts: set each host's site and declare its links "
            "(policy sites.SITE.links.PEER: {rtt_ms, bandwidth_gbps})"
        )
    code = exits.EXIT_OK
    results, findings = [], {}
    for pair in pairs:
        if pair.get("receiver"):
            if not args.json:
                print(
                    clean(
                        f"measuring {pair['site']} -> {pair['peer_site']} ({pair['sender']} -> {pair['receiver']})..."
                    ),
                    file=sys.stderr,
                )
            m, problems, interrupted = measure(pair, args)
            if interrupted:
                print("gpufleet: interrupted", file=sys.stderr)
                return exits.EXIT_INTERRUPTED
        else:
            m, problems = {k: v for k, v in pair.items() if k != "policy"}, []
        for line in problems:
            print(clean(f"gpufleet: {line}"), file=sys.stderr)
        if problems or m.get("error"):
            code = max(code, exits.EXIT_HOSTS)
        judged = measured.assess(m, pair["policy"])
        results.append(judged)
        facts = {"link_measurements": [m]}
        finding = rules.evaluate(facts, pair["policy"], rules=measured.RULES)[0]
        findings.setdefault(pair["sender"], []).append(finding)
    threshold = None if args.fail_on == "none" else severity_rank(args.fail_on)
    failing = [f for fs in findings.values() for f in fs if f["status"] == "fail"]
    if threshold is not None and any(severity_rank(f["severity"]) <= threshold for f in failing):
        code = max(code, exits.EXIT_FINDINGS)
    if args.json:
        doc = {
            "schema": SCHEMA,
            "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "options": {"time": args.time, "omit": args.omit, "port": args.port},
            "links": results,
            "findings": findings,
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        for m in results:
            print_link(m)
        for host, fs in sorted(findings.items()):
            for f in fs:
                print(
                    clean(
                        f"{host}: {str(f['status']).upper():4} {f['rule']} ({f['severity']}) {f['title']}: "
                        f"{f.get('message')}"
                    )
                )
    return code
