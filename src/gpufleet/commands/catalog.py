"""`gpufleet catalog` (the rules) and `gpufleet policy` (the policy keys and defaults), from gpufleet.docs."""

from __future__ import annotations

import argparse

from gpufleet import exits, paths


def register(sub: argparse._SubParsersAction) -> None:
    catalog = sub.add_parser("catalog", help="list the rules")
    catalog.add_argument("--markdown", action="store_true")
    catalog.set_defaults(func=run_catalog)

    policy = sub.add_parser("policy", help="list the policy keys with their defaults (Markdown)")
    policy.set_defaults(func=run_policy)


def run_catalog(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    print(docs.catalog_markdown() if args.markdown else docs.catalog_text())
    return exits.EXIT_OK


def run_policy(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    print(docs.policy_markdown())
    return exits.EXIT_OK
