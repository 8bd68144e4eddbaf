"""`gpufleet topology`: run playbooks/topology.yml (read-only) and print, per host, where each GPU sits (the matrix
of `nvidia-smi topo -m`, from sysfs and NVML) and the bindings to use; `--gres` writes the Slurm gres.conf
fragment of the hosts, `--json` their topology facts.

A host's answer is the result of the topology module (``TOPOLOGY_ACTION``), found by that module, never by the
task's display name.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet import exits, paths, preflight
from gpufleet.commands import options
from gpufleet.runner import run_playbook
from gpufleet.text import clean

PLAYBOOK = "topology.yml"
TOPOLOGY_ACTION = "gpufleet.tuning.gpu_topology"
GRES_SUFFIX = ".gres.conf"  # one file per host in a --gres directory: <dir>/<host>.gres.conf


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "topology",
        help="show where each GPU sits (CPUs, NICs, NVLink peers) and write gres.conf",
        description="Read, on every host, the PCIe tree, NUMA nodes and NVLink state (sysfs and NVML, changing "
        "nothing) and print each host's GPU/NIC matrix in the categories of `nvidia-smi topo -m`, with the bindings "
        "per GPU: its cores, a numactl and a taskset line, and the NIC to use. --gres writes the Slurm gres.conf "
        "lines of the hosts (one file, or one file per host in a directory).",
        examples="""
  gpufleet topology -i inventories/prod -l gpu01
  gpufleet topology -i inventories/prod -l slurm_gpu --gres /etc/slurm/gres.conf.d/gpufleet.conf
  gpufleet topology -i inventories/prod --gres gres/ --json topology.json   # gres/<host>.gres.conf
""",
        exit_codes="0 done, 2 a host was not read (unreachable, failed or no topology), 3 usage error, 130 "
        "interrupted, 141 the output's reader went away (SIGPIPE)",
    )
    options.fleet(parser, policy=False)
    parser.add_argument(
        "--gres",
        metavar="FILE|DIR",
        help="write the gres.conf fragment: to FILE (every host, NodeName= on each line), or to DIR/<host>"
        + GRES_SUFFIX
        + " per host when DIR exists or ends with '/'; the previous lines of a host not read (unreachable, failed, "
        "outside --limit) are kept, never dropped",
    )
    parser.add_argument("--json", metavar="FILE", help="write each host's status and topology facts as JSON")
    parser.set_defaults(func=run)


def collect(result, host_names: list[str]) -> dict[str, dict[str, Any]]:
    """Per host: ``{"status": ok|failed|unreachable|missing, "message", "topology"}`` from the topology module's
    results. A host that answered without ``topology.available`` is ok but has no topology (its error says why)."""
    hosts: dict[str, dict[str, Any]] = {}
    for name in host_names:
        host = result.hosts.get(name)
        res = host.actions.get(TOPOLOGY_ACTION) if host is not None else None
        if host is None or res is None:
            hosts[name] = {"status": "missing", "message": "no answer (run interrupted or host skipped)"}
            continue
        topo = res.get("topology") if isinstance(res.get("topology"), dict) else None
        if host.status != "ok" or topo is None:
            hosts[name] = {
                "status": host.status if host.status != "ok" else "failed",
                "message": host.message or "the topology module returned no topology",
            }
            continue
        hosts[name] = {"status": "ok", "message": None, "topology": topo}
    return hosts


def unread_why(hosts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The hosts of ``collect`` without a topology, each with why in a few words (its status, or the module's
    error when it answered without one)."""
    why = {}
    for name, host in hosts.items():
        if host["status"] != "ok":
            why[name] = host["status"]
        elif not host["topology"].get("available"):
            why[name] = "no topology: " + str(host["topology"].get("error") or "unavailable")[:80]
    return why


def _gres_dir(where: str) -> bool:
    """--gres names a directory (one file per host): it exists or ends with '/'."""
    return where.endswith(("/", "\\")) or Path(where).is_dir()


def _gres_targets(where: str, hosts: dict[str, dict[str, Any]]) -> dict[Path, dict[str, Any]]:
    """Path -> the hosts whose lines go there: one file, or one per host under a directory."""
    path = Path(where)
    if _gres_dir(where):
        return {path / f"{name}{GRES_SUFFIX}": {name: topo} for name, topo in hosts.items()}
    return {path: hosts}


# The operator's own outputs may go to a sticky shared directory (/tmp): nobody else can rename or remove the O_EXCL
# temp file there, and the rename replaces a planted link instead of following it. A directory others can write
# without the sticky bit is still refused (fileio.UnsafeDirectory).
SHARED_OK = True


def previous_gres(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """The GPU lines of the gres file at ``path`` before this run: gpufleet's own (``NodeName=<node> Name=gpu ...``
    of the shape view.gres_line_error accepts), by node, and the other lines that are not comments (whose node
    cannot be told). No file: nothing."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as view

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}, []
    nodes: dict[str, list[str]] = {}
    other = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        node, _, rest = line.partition(" ")
        name = node[len("NodeName=") :] if node.startswith("NodeName=") else ""
        if view.is_node_name(name) and view.gres_line_error(rest) is None:
            nodes.setdefault(name, []).append(line)
        else:
            other.append(line)
    return nodes, other


def write_gres(
    where: str,
    hosts: dict[str, dict[str, Any]],
    warnings: list[str] | None = None,
    unread: dict[str, str] | None = None,
    notes: list[str] | None = None,
) -> list[Path]:
    """Write the fragment(s) atomically (a reader sees the old file or the new one). Every file's text is built
    before the first is written: a host whose name cannot go into gres.conf stops the write (GresError); a host's
    line that is not what gpufleet's module writes is dropped and named in ``warnings``.

    A file never loses the GPU lines of a node this run did not read: ``unread`` (name -> why) are the run's hosts
    without topology, and a node of the previous file outside the run was not read either. Their previous lines
    are kept as they were, each such node named in ``notes``; in a directory, an unread host's file is left alone.
    A previous file with lines whose node cannot be told (not gpufleet's shape) is not rewritten while a host is
    unread (GresError): dropping them could drop that host's GPUs."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as view

    unread = {name: why for name, why in (unread or {}).items() if name not in hosts}
    notes = notes if notes is not None else []
    if _gres_dir(where):  # an unread host's own file stays as it was; other hosts' files are not its business
        for name in sorted(unread):
            notes.append(f"{name}: not read ({unread[name]}): {Path(where) / (name + GRES_SUFFIX)} left as it was")
        unread = {}
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    texts = {}
    for path, group in _gres_targets(where, hosts).items():
        old, other = previous_gres(path)
        if other and unread:
            raise view.GresError(
                f"{path} has {len(other)} line(s) not in gpufleet's NodeName= form (first: {other[0]!r}) and "
                f"{len(unread)} host(s) were not read ({', '.join(sorted(unread))}): rewriting it could drop their "
                "GPUs; move the file away or read every host"
            )
        kept = {}
        for name in sorted((set(old) | set(unread)) - set(group)):
            why = unread.get(name, "not in this run")
            kept[name] = (old.get(name, []), why)
            notes.append(f"{name}: not read ({why}): {len(kept[name][0])} previous line(s) kept in {path}")
        texts[path] = view.gres_fragment(group, stamp, warnings, kept)
    for path, text in texts.items():
        write_atomic(str(path.resolve()), text, allow_shared=SHARED_OK)
    return sorted(texts)


def run(args: argparse.Namespace) -> int:
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as view

    host_names = preflight.inventory_hosts(args.inventory, args.limit, {}, None)
    print(f"gpufleet: reading the topology of {len(host_names)} host(s)", file=sys.stderr)
    result = run_playbook(PLAYBOOK, args.inventory, limit=args.limit, quiet=not args.verbose)
    hosts = collect(result, host_names)
    for i, name in enumerate(sorted(hosts)):
        print(("\n" if i else "") + view.render_host(name, hosts[name]))
    read = {n: h["topology"] for n, h in hosts.items() if h["status"] == "ok" and h["topology"].get("available")}
    code = exits.EXIT_OK
    if args.json:
        try:
            text = json.dumps(hosts, indent=2, sort_keys=True) + "\n"
            write_atomic(str(Path(args.json).resolve()), text, allow_shared=SHARED_OK)
            print(f"gpufleet: wrote {args.json}", file=sys.stderr)
        except OSError as exc:  # fileio.UnsafeDirectory among them: a directory another user can write
            print(f"gpufleet: --json {args.json}: {exc}", file=sys.stderr)
            code = exits.EXIT_USAGE
    if args.gres:
        warnings: list[str] = []
        notes: list[str] = []
        try:
            for path in write_gres(args.gres, read, warnings, unread_why(hosts), notes):
                print(f"gpufleet: wrote {path}", file=sys.stderr)
            for note in notes:
                print(clean(f"gpufleet: --gres: {note}"), file=sys.stderr)
        except view.GresError as exc:
            print(clean(f"gpufleet: --gres {args.gres}: {exc}; nothing written"), file=sys.stderr)
            code = exits.EXIT_HOSTS
        except OSError as exc:
            print(f"gpufleet: --gres {args.gres}: {exc}", file=sys.stderr)
            code = exits.EXIT_USAGE
        for warning in warnings:
            print(f"gpufleet: warning: {warning}", file=sys.stderr)
        if warnings and code == exits.EXIT_OK:
            code = exits.EXIT_HOSTS
    if result.interrupted:
        print(f"gpufleet: interrupted by {result.interrupted}", file=sys.stderr)
        return exits.EXIT_INTERRUPTED
    unread = sorted(n for n, h in hosts.items() if h["status"] != "ok" or not h["topology"].get("available"))
    if unread:
        print(clean(f"gpufleet: exit 2: no topology from {len(unread)} host(s): {', '.join(unread)}"), file=sys.stderr)
        return exits.EXIT_HOSTS
    return code
