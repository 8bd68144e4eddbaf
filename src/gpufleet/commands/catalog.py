"""`gpufleet catalog` (the rules) and `gpufleet policy` (the policy keys and defaults), from gpufleet.docs."""

from __future__ import annotations

import argparse

from gpufleet import exits, paths
from gpufleet.commands import options


def register(sub: argparse._SubParsersAction) -> None:
    catalog = options.command(
        sub,
        "catalog",
        help="list the rules",
        description="List every rule of the audit: id, area, severity, title, why it matters, its fix and its "
        "sources, as text that fits a 100-column terminal (or a Markdown table).",
        examples="""
  gpufleet catalog | less
  gpufleet catalog --markdown > rules.md
""",
        exit_codes=options.READ_ONLY_EXIT_CODES,
    )
    catalog.add_argument("--markdown", action="store_true", help="a Markdown table (the README's) instead of text")
    catalog.set_defaults(func=run_catalog)

    policy = options.command(
        sub,
        "policy",
        help="list the policy keys with their defaults (Markdown)",
        description="List the policy keys, their defaults and meaning, as a Markdown table. A policy file (--policy) "
        "or the inventory's gpufleet_policy* variables override them.",
        examples="""
  gpufleet policy | grep memory
""",
        exit_codes=options.READ_ONLY_EXIT_CODES,
    )
    policy.set_defaults(func=run_policy)


def run_catalog(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    print(docs.catalog_markdown() if args.markdown else docs.catalog_text(_width()))
    return exits.EXIT_OK


def run_policy(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    print(docs.policy_markdown())
    return exits.EXIT_OK


def _width() -> int:
    """docs.WIDTH, or the terminal's width when it is narrower (not below 60 columns)."""
    import shutil
    import sys

    from gpufleet import docs

    if not sys.stdout.isatty():
        return docs.WIDTH
    return max(60, min(docs.WIDTH, shutil.get_terminal_size((docs.WIDTH, 24)).columns))
