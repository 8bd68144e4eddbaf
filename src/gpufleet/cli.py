"""`gpufleet`: audit a fleet of NVIDIA GPU servers through the gpufleet.tuning collection.

Exit codes of `gpufleet audit`: 0 clean, 1 findings at or above --fail-on, 2 hosts unreachable, failed or timed
out, 3 usage error (bad inventory, policy file or report directory), 130 interrupted (SIGINT/SIGTERM: a partial
report marked incomplete was written). A higher code wins: 130 > 3 > 2 > 1.
"""

from __future__ import annotations

import argparse
import sys

from gpufleet import __version__, exits, paths
from gpufleet.commands import COMMANDS
from gpufleet.preflight import POLICY_LAYERS

__all__ = ["POLICY_LAYERS", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (commands/: one module each)."""
    parser = argparse.ArgumentParser(
        prog="gpufleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (exits.UsageError, paths.CollectionNotFound, FileNotFoundError) as exc:
        print(f"gpufleet: {exc}", file=sys.stderr)
        return exits.EXIT_USAGE
    except KeyboardInterrupt:  # outside a playbook run (those stop gracefully and write a partial report)
        print("gpufleet: interrupted", file=sys.stderr)
        return exits.EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
