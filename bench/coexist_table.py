#!/usr/bin/env python3
"""Markdown tables from `bench/wan.py coexist` results (bench/results/wan-coexist-*.json), as bench/README.md shows
them: per case and loss rate, each flow's median goodput, congestion control (iperf3's and ss's view) and share
of its payload the link dropped; the median sending rate over each run's second half (start-up over); the
bottleneck's buffer drops; the stock neighbour's goodput against its own alone; the load averages.

    .venv/bin/python bench/coexist_table.py bench/results/wan-coexist-2026-12-01.json [...]

Everything is recomputed from the runs in the file (older files lack the second-half medians).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wan import fmt, median, pct, second_half  # noqa: E402

FLOWS = ("A", "B", "own")


def table(result: dict[str, Any]) -> str:
    runs = result["runs"]
    keys: list[tuple[float, str]] = []
    for e in runs:
        if (e["loss"], e["case"]) not in keys:
            keys.append((e["loss"], e["case"]))
    alone = {
        loss: median([e["flows"]["B"]["mbps"] for e in runs if (e["loss"], e["case"]) == (loss, "B-alone")])
        for loss in {e["loss"] for e in runs}
    }
    rows = [
        "| loss | case | A: tuned long-haul | B: stock neighbour | own: other traffic over the link | local | "
        "link total | B ÷ B alone | 2nd half A / B / own | buffer drops | load 1 min |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for loss, case in keys:
        sel = [e for e in runs if (e["loss"], e["case"]) == (loss, case)]
        cells, halves = {}, {}
        for f in (*FLOWS, "local"):
            ok = [e["flows"][f] for e in sel if f in e["flows"] and "mbps" in e["flows"][f]]
            if not ok:
                cells[f], halves[f] = "–", "–"
                continue
            cc = "/".join(sorted({x["cc"] for x in ok if x.get("cc")} | {c for x in ok for c in x.get("ss_cc", [])}))
            mbps = median([x["mbps"] for x in ok])
            drop = median([x.get("link_drop_pct") for x in ok])
            cells[f] = f"{fmt(mbps)} {cc}" + ("" if drop is None else f" ({drop:.1f} %)")
            halves[f] = fmt(median([second_half(x.get("sent_mbps_per_s")) for x in ok]))
        total = median([sum(e["flows"][f].get("mbps", 0) for f in FLOWS if f in e["flows"]) for e in sel])
        b = median([e["flows"]["B"]["mbps"] for e in sel if "B" in e["flows"] and "mbps" in e["flows"]["B"]])
        keep = f"{b / alone[loss]:.2f}" if case != "B-alone" and b is not None and alone.get(loss) else "–"
        drops = median([e["emulator"]["a2b_drop_buffer"] for e in sel])
        loads = [e["load_end"][0] for e in sel]
        rows.append(
            f"| {pct(loss)} | {case} | {cells['A']} | {cells['B']} | {cells['own']} | {cells['local']} | "
            f"{fmt(total)} | {keep} | {' / '.join(halves[f] for f in FLOWS)} | {drops:,.0f} | "
            f"{min(loads):.1f}–{max(loads):.1f} |"
        )
    late = [
        f"{e['case']}@{pct(e['loss'])} run {e['run']} ({e['emulator']['late_max_ms']} ms)"
        for e in runs
        if e["emulator"]["kernel_dropped"] or e["emulator"]["drop_ring"] or e["emulator"]["late_max_ms"] > 10
    ]
    p = result["params"]
    return "\n".join(
        [
            f"`{result['command']}`, commit {result['commit']}, {result['date']}, {p['runs']} runs of "
            f"{p['duration_s']} s, {result['seconds'] / 60:.1f} min, load average before/after "
            f"{result['load_average_before'][0]:.1f}/{result['load_average_after'][0]:.1f}",
            "",
            *rows,
            "",
            "emulator capacity check: " + ("keeps up" if result["capacity_check"]["keeps_up"] else "did NOT keep up"),
            "kernel queue drops over all runs: " + str(sum(e["emulator"]["kernel_dropped"] for e in runs)),
            "runs with a packet released > 10 ms late: " + (", ".join(late) or "none"),
        ]
    )


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit(__doc__)
    for path in argv:
        print(f"### {path}\n")
        print(table(json.loads(Path(path).read_text())))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
