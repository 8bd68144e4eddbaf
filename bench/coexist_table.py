#!/usr/bin/env python3
"""Markdown tables from `bench/wan.py coexist` results (bench/results/wan-coexist-*.json), as docs/benchmarks.md shows
them: per case and loss rate, each flow's median goodput, congestion control (iperf3's and ss's view) and share
of its payload the link dropped; the median sending rate over each run's second half (start-up over); the
bottleneck's buffer drops; the stock neighbour's goodput against its own alone; the load averages.

    .venv/bin/python bench/coexist_table.py bench/results/wan-coexist-2026-12-01.json [...]

Everything is recomputed from the runs in the file (older files lack the second-half medians): the table is
benchlib.coexist.readme_table, printed with the benchmarks' one table printer (benchlib.tables).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchlib.coexist import readme_table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results files of `bench/wan.py coexist` (bench/results/)")
    args = parser.parse_args(argv)
    for path in args.results:
        try:
            result = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"{path}: not a readable results file of `bench/wan.py coexist` ({exc})")
        if not isinstance(result, dict) or result.get("benchmark") != "wan-coexist":
            parser.error(f"{path}: not a results file of `bench/wan.py coexist` (its benchmark is not wan-coexist)")
        print(f"### {path}\n")
        print(readme_table(result))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
