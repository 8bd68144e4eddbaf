"""`gpufleet`: audit a fleet of NVIDIA GPU servers through the gpufleet.tuning collection.

Exit codes: 0 clean, 1 findings at or above --fail-on, 2 hosts unreachable, failed or timed out, 3 usage error (bad
arguments, inventory, policy file, report or report directory), 130 interrupted (SIGINT/SIGTERM: a partial report
marked incomplete was written). A higher code wins: 130 > 3 > 2 > 1. Output piped into a reader that stops early
(`gpufleet catalog | head -1`) ends quietly, killed by SIGPIPE as coreutils and git are (a shell reports 141).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from gpufleet import __version__, exits, paths, text
from gpufleet.commands import COMMANDS

__all__ = ["POLICY_LAYERS", "Parser", "build_parser", "main"]  # noqa: F822 (POLICY_LAYERS: __getattr__ below)


def __getattr__(name: str):
    # POLICY_LAYERS: the inventory's policy layers (gpufleet.preflight, derived from the collection's policy.LAYERS on
    # first use).
    if name == "POLICY_LAYERS":
        from gpufleet import preflight

        return preflight.POLICY_LAYERS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on a bad argument, the code gpufleet keeps for hosts not audited: a usage error exits 3.
    Sub-command parsers are of this class too (argparse makes them of the parent's class)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(exits.EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (commands/: one module each)."""
    parser = Parser(prog="gpufleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _died_of_sigpipe() -> int:
    """The reader of our stdout went away (`| head`). Do what coreutils and git do: say nothing and die of SIGPIPE
    (Python ignores SIGPIPE, so a write raised BrokenPipeError instead). stdout is pointed at /dev/null first, so
    that the interpreter's last flush of the unwritten rest cannot complain (the recipe of Python's `signal`
    documentation, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 128 + signal.SIGPIPE  # not reached where SIGPIPE exists; the shell's code for it otherwise


def _shown(exc: Exception) -> str:
    """An error's text for the terminal, each of its lines cleaned (text.clean_lines): a usage error can quote an
    inventory's or a report's values. Without the collection (the error may be that it is missing) nothing was
    read from a host yet, and the text is shown as it is."""
    try:
        return text.clean_lines(exc)
    except paths.CollectionNotFound:
        return str(exc)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe can be told apart from an error
        return code
    except BrokenPipeError:
        return _died_of_sigpipe()
    except (exits.UsageError, paths.CollectionNotFound, FileNotFoundError) as exc:
        print(f"gpufleet: {_shown(exc)}", file=sys.stderr)
        return exits.EXIT_USAGE
    except KeyboardInterrupt:  # outside a playbook run (those stop gracefully and write a partial report)
        print("gpufleet: interrupted", file=sys.stderr)
        return exits.EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
