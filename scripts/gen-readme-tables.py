#!/usr/bin/env python3
"""Rewrite the generated tables of README.md (rule catalog, policy keys) from the code.

    scripts/gen-readme-tables.py          rewrite README.md in place
    scripts/gen-readme-tables.py --check  exit 1 when README.md is out of date (used by the tests)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))
sys.path.insert(0, str(REPO / "src"))

from gpufleet import docs  # noqa: E402

SECTIONS = {"catalog": docs.catalog_markdown, "policy": docs.policy_markdown}


def render(text: str) -> str:
    for name, fn in SECTIONS.items():
        pattern = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- BEGIN {name} --> ... <!-- END {name} --> block")
        text = pattern.sub(lambda m, fn=fn: m.group(1) + fn() + "\n" + m.group(2), text)
    return text


def main() -> int:
    readme = REPO / "README.md"
    current = readme.read_text()
    wanted = render(current)
    if "--check" in sys.argv:
        if wanted != current:
            print("README.md tables are out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    readme.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
