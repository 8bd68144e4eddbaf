# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Views of a host's GPU topology (the ``topology`` facts of module_utils/topology.py, module gpu_topology): the
matrix as ``nvidia-smi topo -m`` lays it out, its legend, the bindings per GPU, and the Slurm ``gres.conf`` fragment
of a group of hosts. Pure functions of the facts: no host is read here.

Every value comes from a host, so the text views escape control characters (terminal.clean) and the gres.conf
fragment takes from a host only ``Type``, ``File``, ``Cores``, ``Links`` and ``Flags`` of the shapes the module writes
(GRES_KEYS), after the ``NodeName=`` of the inventory and ``Name=gpu``; any other line is dropped with a warning.
"""

from __future__ import annotations

import re
from typing import Any

from .terminal import clean

# The connection categories of `nvidia-smi topo -m`, nearest first, with what each means (its "Legend" block,
# in our words). NV# is an NVLink count (NV18: 18 links to that GPU).
CATEGORIES = (
    ("X", "self"),
    ("NV#", "NVLink: a bonded set of # links"),
    ("PIX", "PCIe, at most one PCIe bridge (the same switch)"),
    ("PXB", "PCIe, several bridges without the host bridge (across switches)"),
    ("PHB", "PCIe through a PCIe host bridge (the same root complex, typically the CPU)"),
    ("NODE", "PCIe and the link between host bridges inside one NUMA node"),
    ("SYS", "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI, xGMI)"),
)
_CSS = {"X": "self", "PIX": "pix", "PXB": "pxb", "PHB": "phb", "NODE": "node", "SYS": "sys"}
SHOWN_NICS = 3  # NICs named after a GPU's nearest in the terminal (--json and the HTML report list them all)
_NVLINK = re.compile(r"^NV\d+$")

# gres.conf(5), https://slurm.schedmd.com/gres.conf.html: NodeName lets one gres.conf serve every node (a node
# takes the lines that name it); Links= requires a line with a single File; Cores= holds Slurm's core indexes
# (Core L# of `lstopo -l`: the first core of the first socket is 0), not the OS's CPU ids, which differ when SMT is
# on - module_utils/topology.py computes them, this module only places the lines.
#
# A host's lines are its own account of itself, and a host can lie: a second NodeName= (or a newline, a '#') would
# point Slurm's configuration of another node at it. So the controller puts NodeName= (the inventory's name, never
# the host's text) and Name=gpu itself, and takes from the host only these keys, once each, with values of these
# shapes; a line with anything else is dropped and the host named in a warning.
GRES_KEYS = {
    "Type": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"),  # module_utils/topology.py gres_type: h100, rtx_6000_ada
    "File": re.compile(r"/dev/nvidia(0|[1-9][0-9]{0,3})"),  # the GPU's device node (the module's only File)
    "Cores": re.compile(r"[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*"),  # a core list: 0-55,112-167
    "Links": re.compile(r"-?[0-9]{1,3}(,-?[0-9]{1,3})*"),  # one int per GPU, -1 for itself: -1,18,18,18
    "Flags": re.compile(
        r"(CountOnly|explicit|one_sharing|all_sharing|nvidia_gpu_env|amd_gpu_env|intel_gpu_env|opencl_env|no_gpu_env)"
        r"(,(CountOnly|explicit|one_sharing|all_sharing|nvidia_gpu_env|amd_gpu_env|intel_gpu_env|opencl_env|"
        r"no_gpu_env))*"
    ),
}
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # fullmatch: "$" would accept a trailing newline


class GresError(ValueError):
    """A host whose name cannot go into a gres.conf as it is."""


def gres_line_error(line: Any) -> str | None:
    """Why a host's gres line cannot go into gres.conf (None: it can): it must be ``Name=gpu`` then ``Key=value``
    fields of GRES_KEYS only, each once, File among them, each value of its key's shape."""
    if not isinstance(line, str):
        return f"not a string ({type(line).__name__})"
    fields = line.split(" ")
    if fields[0] != "Name=gpu":
        return "it does not start with 'Name=gpu'"
    seen = set()
    for field in fields[1:]:
        key, eq, value = field.partition("=")
        if key not in GRES_KEYS:
            return f"key {clean(key)!r} is not one gpufleet takes from a host (allowed: {', '.join(GRES_KEYS)})"
        if not eq or not GRES_KEYS[key].fullmatch(value):
            return f"{key}={clean(value)!r} is not a {key} value"
        if key in seen:
            return f"{key} appears twice"
        seen.add(key)
    if "File" not in seen:
        return "no File= (one line per GPU device)"
    return None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def category_class(value: Any) -> str:
    """The CSS class of a matrix cell: ``nv`` for NVLink, else the category's name in lower case (``other``)."""
    text = str(value)
    if _NVLINK.match(text):
        return "nv"
    return _CSS.get(text, "other")


def _order(topo: dict):
    """Sort key of a matrix name: GPUs by index (GPU10 after GPU2), then the NICs in the order the facts list them
    (the reader's: mlx5_2 before mlx5_10), then anything else by name."""
    nics = [str(n.get("device") or n.get("name")) for n in _list(topo.get("nics")) if isinstance(n, dict)]

    def key(name: str) -> tuple:
        m = re.match(r"^GPU(\d+)$", name)
        if m:
            return (0, int(m.group(1)), "")
        return (1, nics.index(name), "") if name in nics else (2, 0, name)

    return key


def matrix_table(topo: Any) -> dict[str, Any]:
    """The matrix as rows and columns: ``{"columns": [...], "rows": [{"name", "cells": [...], "cpus", "numa"}]}``.
    GPU rows first (by index), then the other devices the facts list; columns in the same order, then any device
    that appears only as a column. ``cpus``/``numa`` are a GPU's CPU and NUMA affinity (empty for a NIC)."""
    topo = _dict(topo)
    matrix = _dict(topo.get("matrix"))
    key = _order(topo)
    names = sorted((str(n) for n in matrix), key=key)
    extra = {str(c) for row in matrix.values() for c in _dict(row)} - set(names)
    columns = names + sorted(extra, key=key)
    gpus = {f"GPU{g.get('index')}": g for g in _list(topo.get("gpus")) if isinstance(g, dict)}
    rows = []
    for name in names:
        row = {str(k): v for k, v in _dict(matrix.get(name)).items()}
        gpu = gpus.get(name, {})
        numa = gpu.get("numa_node")
        rows.append(
            {
                "name": name,
                "cells": [str(row[c]) if c in row and row[c] is not None else "" for c in columns],
                "cpus": str(gpu.get("local_cpus") or ""),
                "numa": "" if numa is None or numa == -1 else str(numa),
            }
        )
    return {"columns": columns, "rows": rows}


def flat_note(topo: Any) -> str:
    """What to say when the PCIe tree is flattened (a VM): the categories come from NUMA alone."""
    topo = _dict(topo)
    if not topo.get("flat"):
        return ""
    reason = str(topo.get("flat_reason") or "no PCIe bridge above the GPUs and NICs")
    if "NUMA" not in reason:
        reason += "; the categories come from the NUMA nodes alone (NODE/SYS)"
    return f"PCIe tree flattened (a virtual machine): {reason}"


def render_matrix(topo: Any) -> str:
    """The matrix as text, laid out as ``nvidia-smi topo -m`` (rows GPUs then NICs, then CPU and NUMA affinity);
    NICs are labelled NIC0, NIC1, ... as nvidia-smi does, render_nics says which is which."""
    table = matrix_table(topo)
    if not table["rows"]:
        return "(no matrix: no GPU found)"
    labels = nic_labels(topo)
    headers = [clean(labels.get(c, c)) for c in table["columns"]] + ["CPU Affinity", "NUMA Affinity"]
    body = [
        [clean(labels.get(r["name"], r["name"]))]
        + [clean(c) for c in r["cells"]]
        + [clean(r["cpus"]), clean(r["numa"])]
        for r in table["rows"]
    ]
    first = max(len(r[0]) for r in body)
    widths = [max([len(h)] + [len(r[i + 1]) for r in body]) for i, h in enumerate(headers)]
    lines = [" " * first + "  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for r in body:
        lines.append(r[0].ljust(first) + "  " + "  ".join(v.ljust(w) for v, w in zip(r[1:], widths)).rstrip())
    return "\n".join(lines)


def render_legend() -> str:
    return "Legend:\n" + "\n".join(f"  {code:<4} = {meaning}" for code, meaning in CATEGORIES)


def bindings_view(topo: Any) -> list[dict[str, str]]:
    """Per GPU: its CPUs (physical cores, their SMT siblings), NUMA node, the numactl and taskset lines, and the NICs
    nearest first (the first is the one to use: NCCL_IB_HCA order, a rank-to-NIC map)."""
    topo = _dict(topo)
    gpus = {g.get("index"): g for g in _list(topo.get("gpus")) if isinstance(g, dict)}
    out = []
    for b in _list(topo.get("bindings")):
        if not isinstance(b, dict):
            continue
        gpu = _dict(gpus.get(b.get("gpu")))
        nics = [str(n) for n in _list(b.get("nics"))]
        nic = b.get("nic") or (nics[0] if nics else "")
        numa = gpu.get("numa_node")
        out.append(
            {
                "gpu": f"GPU{b.get('gpu')}",
                "bus_id": str(gpu.get("bus_id") or ""),
                "numa": "" if numa is None or numa == -1 else str(numa),
                "cpus": str(b.get("cpus") or ""),
                "cores": str(gpu.get("cores") or ""),
                "siblings": str(gpu.get("siblings") or ""),
                "numactl": str(b.get("numactl") or ""),
                "taskset": str(b.get("taskset") or ""),
                "nic": str(nic or ""),
                "others": ", ".join(n for n in nics if n != nic),
            }
        )
    return out


def nic_labels(topo: Any) -> dict[str, str]:
    """Matrix name of each NIC (its RDMA device, else its interface) -> NIC0, NIC1, ... in the facts' order."""
    return {n["label"]: f"NIC{i}" for i, n in enumerate(nics_view(topo))}


def nics_view(topo: Any) -> list[dict[str, str]]:
    """The NICs as the matrix names them (RDMA device, else interface), with interface, kind, speed and NUMA node
    (`nvidia-smi topo -m`'s "NIC Legend")."""
    out = []
    for n in _list(_dict(topo).get("nics")):
        if not isinstance(n, dict):
            continue
        speed = n.get("speed_mbps")
        numa = n.get("numa_node")
        out.append(
            {
                "label": str(n.get("device") or n.get("name") or ""),
                "name": str(n.get("name") or ""),
                "kind": str(n.get("kind") or ""),
                "speed": f"{speed / 1000:g} Gb/s" if isinstance(speed, (int, float)) and speed > 0 else "",
                "numa": "" if numa is None or numa == -1 else str(numa),
                "bus_id": str(n.get("bus_id") or ""),
            }
        )
    return out


def render_nics(topo: Any) -> str:
    """The NIC legend: ``NIC0: mlx5_0 (ibp24s0, infiniband, 400 Gb/s, 0000:18:00.1, NUMA 0)``."""
    rows = nics_view(topo)
    if not rows:
        return "NIC Legend: no NIC found"
    lines = ["NIC Legend:"]
    for i, n in enumerate(rows):
        parts = [n["name"] if n["name"] != n["label"] else "", n["kind"], n["speed"], n["bus_id"]]
        parts.append(f"NUMA {n['numa']}" if n["numa"] else "")
        lines.append(clean(f"  NIC{i}: {n['label']} (" + ", ".join(p for p in parts if p) + ")"))
    return "\n".join(lines)


def render_bindings(topo: Any) -> str:
    rows = bindings_view(topo)
    if not rows:
        return "Bindings: none (no GPU found)"
    lines = ["Bindings (paste into a job script; NIC: nearest first, for NCCL_IB_HCA or a rank-to-NIC map):"]
    for b in rows:
        where = f"NUMA {b['numa']}" if b["numa"] else "NUMA unknown"
        cpus = f"cores {b['cores']}" if b["cores"] else f"CPUs {b['cpus'] or 'unknown'}"
        if b["cores"] and b["siblings"]:
            cpus += f" + SMT siblings {b['siblings']}"
        others = b["others"].split(", ") if b["others"] else []
        then = ", ".join(others[:SHOWN_NICS]) + (
            f", +{len(others) - SHOWN_NICS} more" if len(others) > SHOWN_NICS else ""
        )
        nic = f"NIC {b['nic']}" + (f" (then {then})" if others else "") if b["nic"] else "no NIC"
        lines.append(clean(f"  {b['gpu']} {b['bus_id']}  {where}  {cpus}  {nic}"))
        for cmd in (b["numactl"], b["taskset"]):
            if cmd:
                lines.append("      " + clean(cmd))
    return "\n".join(lines)


def html_view(topo: Any) -> dict[str, Any] | None:
    """What the HTML report shows of a host's topology (None when the report has none): the matrix with a CSS class
    per cell, the legend, the flattened-tree note and the bindings. Strings only; the template escapes them."""
    if not isinstance(topo, dict):
        return None
    table = matrix_table(topo)
    gpus = len([g for g in _list(topo.get("gpus")) if isinstance(g, dict)])
    nics = nics_view(topo)
    return {
        "available": bool(topo.get("available")),
        "summary": f"{gpus} GPU{'' if gpus == 1 else 's'}, {len(nics)} NIC{'' if len(nics) == 1 else 's'}"
        + (", flattened PCIe tree" if topo.get("flat") else ""),
        "error": str(topo.get("error") or ""),
        "flat": flat_note(topo),
        "columns": table["columns"],
        "rows": [
            {**r, "cells": [{"text": c, "css": category_class(c) if c else "none"} for c in r["cells"]]}
            for r in table["rows"]
        ],
        "legend": [
            {"code": code, "meaning": meaning, "css": category_class(code if code != "NV#" else "NV1")}
            for code, meaning in CATEGORIES
        ],
        "nics": nics,
        "bindings": bindings_view(topo),
    }


def render_host(name: str, host: Any) -> str:
    """One host's section: heading, then the matrix, legend and bindings, or why there are none. ``host`` is
    ``{"status", "message", "topology"}`` (the CLI's result per host)."""
    host = _dict(host)
    head = f"== {clean(name)} =="
    if host.get("status", "ok") != "ok":
        return f"{head}\n{clean(host.get('status'))}: {clean(host.get('message') or 'no message')}"
    topo = _dict(host.get("topology"))
    if not topo.get("available"):
        return f"{head}\ntopology unavailable: {clean(topo.get('error') or 'no topology returned')}"
    parts = [head]
    note = flat_note(topo)
    if note:
        parts.append("NOTE: " + clean(note))
    parts += [render_matrix(topo), "", render_legend(), "", render_nics(topo), "", render_bindings(topo)]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------ gres.conf


def is_node_name(name: Any) -> bool:
    """Whether ``name`` can follow ``NodeName=`` in gres.conf as it is (letters, digits, '.', '_', '-')."""
    return bool(_NODE_NAME.fullmatch(str(name)))


def gres_lines(name: str, topo: Any, warnings: list[str] | None = None) -> list[str]:
    """The host's gres.conf lines, each with ``NodeName=<name>`` first (the inventory's name). Raises GresError when
    the name is not a Slurm node name. A line of the host that is not one ``Name=gpu`` line of the keys in GRES_KEYS
    (gres_line_error) is dropped, with a warning naming the host and the line appended to ``warnings``."""
    if not is_node_name(name):
        raise GresError(f"{name!r}: not a node name gres.conf can carry (letters, digits, '.', '_', '-')")
    lines = []
    for line in _list(_dict(topo).get("gres")):
        why = gres_line_error(line)
        if why:
            if warnings is not None:
                warnings.append(f"{name}: gres line {clean(line)!r} dropped: {why}")
            continue
        lines.append(f"NodeName={name} {line}")
    return lines


def gres_fragment(
    hosts: dict[str, Any],
    generated: str = "",
    warnings: list[str] | None = None,
    kept: dict[str, tuple[list[str], str]] | None = None,
) -> str:
    """The gres.conf fragment of ``hosts`` (name -> topology facts), hosts by name, one line per GPU. Hosts without
    GPUs or without topology, and hosts with dropped lines (each in ``warnings``), are named in a comment, not left
    out silently. ``kept``: nodes not read in this run (name -> (their lines in the previous file, why not read)):
    their old lines go in as they were, under a comment that says so."""
    out = [
        "# gres.conf fragment written by gpufleet topology" + (f" ({generated})" if generated else ""),
        "# One line per GPU (Links= needs a single File per line). Cores= are Slurm's core indexes; see gres.conf(5).",
    ]
    kept = {name: entry for name, entry in (kept or {}).items() if name not in hosts}
    for name in sorted(set(hosts) | set(kept)):
        if name in kept:
            old, why = kept[name]
            out.append(f"# {clean(name)}: not read ({clean(why)}): {len(old)} line(s) kept from the previous file")
            out.extend(old)
            continue
        topo = _dict(hosts[name])
        mine: list[str] = []
        lines = gres_lines(name, topo, mine) if topo.get("available") else []
        if mine:
            out.append(f"# {clean(name)}: {len(mine)} gres line(s) dropped (not what gpufleet's module writes)")
            if warnings is not None:
                warnings.extend(mine)
        if lines:
            out.extend(lines)
        elif not mine:
            reason = "no GPU" if topo.get("available") else clean(topo.get("error") or "no topology")
            out.append(f"# {clean(name)}: no lines ({reason})")
    return "\n".join(out) + "\n"
