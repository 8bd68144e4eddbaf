"""`gpufleet catalog` (the rules) and `gpufleet policy` (the policy keys and defaults, from gpufleet.docs; with
--host, one host's effective policy and the layer that set each value, from gpufleet.hostpolicy)."""

from __future__ import annotations

import argparse
import json

from gpufleet import exits, paths
from gpufleet.commands import options
from gpufleet.text import clean, clean_lines


def register(sub: argparse._SubParsersAction) -> None:
    catalog = options.command(
        sub,
        "catalog",
        help="list the rules (or show one)",
        description="List every rule of the audit, or the rules named: id, area, severity, title, why it matters, "
        "its fix and its sources, as text that fits a 100-column terminal (or a Markdown table).",
        examples="""
  gpufleet catalog | less
  gpufleet catalog GPU-PWR-002          # one rule (the id as the reports show it)
  gpufleet catalog --markdown > rules.md
""",
        exit_codes="0 done, 3 usage error (a RULE that is no rule's id), 141 the output's reader went away (SIGPIPE)",
    )
    catalog.add_argument("rules", nargs="*", metavar="RULE", help="show only these rules (ids such as GPU-PWR-002)")
    catalog.add_argument("--markdown", action="store_true", help="a Markdown table (the README's) instead of text")
    catalog.set_defaults(func=run_catalog)

    policy = options.command(
        sub,
        "policy",
        help="list the policy keys with their defaults, or one host's effective policy (--host)",
        description="List the policy keys, their defaults and meaning, as text that fits a 100-column terminal (or "
        "a Markdown table, --markdown). A policy file (--policy) "
        "or the inventory's gpufleet_policy* variables override them. With --host: that host's effective policy, "
        "the one the audit, the watch, the probe and remediate judge it by (the defaults, then gpufleet_policy, "
        "gpufleet_policy_group, gpufleet_policy_host, gpufleet_policy_file, then --policy or "
        "gpufleet_policy_overrides; later wins), each key with the layer that set it. With --policy alone: the "
        "file checked (every problem listed, exit 3) and the policy it makes. Reads the inventory only.",
        examples="""
  gpufleet policy | grep memory
  gpufleet policy --host fra-h100-01 -i my-fleet/inventory --policy my-fleet/policy.yml
  gpufleet policy --host fra-h100-01 -i my-fleet/inventory --json | jq '.keys["power.limit_pct"]'
  gpufleet policy --policy my-fleet/policy.yml   # checks the file, shows what it sets
""",
        exit_codes=options.READ_ONLY_EXIT_CODES,
    )
    policy.add_argument("--host", metavar="NAME", help="one host's effective policy and who set each value")
    options.inventory(policy)
    policy.add_argument("--policy", help="YAML policy file, merged last as `gpufleet audit --policy` merges it")
    policy.add_argument("--json", action="store_true", help="with --host: JSON for scripts (value and layers per key)")
    policy.add_argument("--markdown", action="store_true", help="without --host: a Markdown table (the README's)")
    policy.set_defaults(func=run_policy)


def run_catalog(args: argparse.Namespace) -> int:
    paths.import_collection()
    from gpufleet import docs

    ids = [rule.strip().upper() for rule in args.rules] or None
    unknown = docs.unknown_ids(ids or [])
    if unknown:
        raise exits.UsageError(
            f"no rule {', '.join(clean(i) for i in unknown)} in the catalog (`gpufleet catalog` lists every rule id)"
        )
    print(docs.catalog_markdown(ids) if args.markdown else docs.catalog_text(_width(), ids))
    return exits.EXIT_OK


def run_policy(args: argparse.Namespace) -> int:
    paths.import_collection()
    if args.host is None and args.policy:
        return _show_policy_file(args)
    if args.host is None:
        if args.json:
            raise exits.UsageError("--json goes with --host NAME (one host's effective policy) or --policy FILE")
        from gpufleet import docs

        print(docs.policy_markdown() if args.markdown else docs.policy_text(_width()))
        return exits.EXIT_OK
    if args.markdown:
        raise exits.UsageError("--markdown is the table of every policy key: it does not go with --host (--json does)")
    from gpufleet import hostpolicy

    return _print_layers(args, args.host, hostpolicy.read_layers(args.inventory, args.host, args.policy))


def _show_policy_file(args: argparse.Namespace) -> int:
    """`gpufleet policy --policy FILE` without --host: the file checked (every problem listed, exit 3) and the
    policy it makes over the defaults, each key with who set it."""
    if args.markdown:
        raise exits.UsageError("--markdown is the table of every policy key: it does not go with --policy")
    from gpufleet import preflight

    return _print_layers(args, args.policy, [(f"--policy {args.policy}", preflight.load_policy_file(args.policy))])


def _print_layers(args: argparse.Namespace, name: str, layers: list) -> int:
    """The policy ``layers`` make (merged over the defaults), each key with the layer that set it: as text, or JSON
    with --json."""
    from gpufleet import hostpolicy

    merged, sources = hostpolicy.explain(layers)
    if args.json:
        print(json.dumps(hostpolicy.as_json(name, layers, merged, sources), indent=2, sort_keys=True))
    else:
        print(clean_lines(hostpolicy.as_text(name, layers, merged, sources)))
    return exits.EXIT_OK


def _width() -> int:
    """docs.WIDTH, or the terminal's width when it is narrower (not below 60 columns)."""
    import shutil
    import sys

    from gpufleet import docs

    if not sys.stdout.isatty():
        return docs.WIDTH
    return max(60, min(docs.WIDTH, shutil.get_terminal_size((docs.WIDTH, 24)).columns))
