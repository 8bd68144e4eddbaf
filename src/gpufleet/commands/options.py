"""Options shared by several commands, each defined once here."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gpufleet import exits, paths
from gpufleet.preflight import default_inventory
from gpufleet.text import clean


def severities() -> tuple[str, ...]:
    """The report schema's severities, worst first (the one list: report/schema.SEVERITIES)."""
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.schema import SEVERITIES

    return SEVERITIES


class _FailOnChoices:
    """--fail-on's choices: the report schema's severities, then "none". Read from the collection when argparse
    first needs them (checking a value, showing a command's help), so that `gpufleet --version` works before the
    collection is found."""

    def _all(self) -> tuple[str, ...]:
        return (*severities(), "none")

    def __iter__(self):
        return iter(self._all())

    def __contains__(self, value: object) -> bool:
        return value in self._all()


def whole_number(low: int, high: int | None = None, what: str = "", unit: str = ""):
    """An argparse ``type``: the text as a whole number from ``low`` (to ``high``, when given); the errors say
    ``what`` it counts (" of seconds") and the ``unit`` of the bound (" second")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number{what}") from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}{unit}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


# A whole number of seconds, at least 1 (--lock-timeout, --host-timeout).
seconds = whole_number(1, what=" of seconds", unit=" second")
# A whole number of at least 1 (--forks).
positive = whole_number(1)


class Inventories(argparse.Action):
    """-i may be repeated, as with ansible-playbook: the inventories are merged (each is passed on as its own -i).
    The first -i replaces the default instead of adding to it."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = []
        setattr(namespace, self.dest, [*current, values])


def inventory(parser: argparse.ArgumentParser, required: bool = False, verb: str = "change") -> None:
    """-i/--inventory, repeatable (``args.inventory`` is a list). Commands that change hosts (remediate, rollback)
    take no default: a bare command must never tune the machine it runs on. ``verb``: what the command does to the
    hosts of a required inventory ("sample" for the read-only probe: only "change" says it tunes them)."""
    if required:
        why = ", so a bare command never tunes the machine it runs on" if verb == "change" else ""
        parser.add_argument(
            "-i",
            "--inventory",
            action=Inventories,
            required=True,
            metavar="INVENTORY",
            help=f"Ansible inventory of the hosts to {verb}; repeat to merge several, as with ansible-playbook "
            f"(required: there is no default{why})",
        )
    else:
        parser.add_argument(
            "-i",
            "--inventory",
            action=Inventories,
            default=[default_inventory()],
            metavar="INVENTORY",
            help="Ansible inventory; repeat to merge several, as with ansible-playbook (default: "
            + default_inventory()
            + ")",
        )


def shown(inventories: list[str]) -> str:
    """The inventories as a person reads them (progress lines)."""
    return ", ".join(inventories)


def as_options(inventories: list[str]) -> str:
    """The inventories as -i options to copy into a command line (the rollback hint)."""
    import shlex

    return " ".join(f"-i {shlex.quote(i)}" for i in inventories)


def fleet(
    parser: argparse.ArgumentParser, policy: bool = True, inventory_required: bool = False, verb: str = "change"
) -> None:
    """What every command that runs against an inventory takes: -i, -l, --policy (unless ``policy`` is False),
    -v. ``verb``: see inventory()."""
    inventory(parser, required=inventory_required, verb=verb)
    parser.add_argument("-l", "--limit", help="limit to these hosts/groups (Ansible pattern)")
    if policy:
        parser.add_argument("--policy", help="YAML file with policy overrides, merged last")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")


def out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="reports", help="report directory (default: %(default)s)")


def fail_on(parser: argparse.ArgumentParser, afterwards: bool = False, what: str = "") -> None:
    """--fail-on SEVERITY; ``what`` replaces the help's "a finding fails at or above this severity"."""
    parser.add_argument(
        "--fail-on",
        default="none",
        choices=_FailOnChoices(),
        metavar="SEVERITY",
        help="exit 1 when "
        + (
            what
            or ("a finding still fails at or above this severity afterwards" if afterwards else "a finding fails at "
                "or above this severity")
        )
        + ": %(choices)s (default: %(default)s)",
    )


def forks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--forks", type=positive, help="hosts worked on in parallel, at least 1 (default: ansible.cfg)"
    )


def host_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host-timeout",
        type=seconds,
        metavar="SECONDS",
        help="a host that has not answered the audit after this long is reported as 'timeout' "
        "(default: gpufleet_host_timeout, 120)",
    )


def check(parser: argparse.ArgumentParser, would: str) -> None:
    """--check: change nothing; say ``would`` (what would change, what would be restored)."""
    parser.add_argument("--check", action="store_true", help=f"change nothing; say {would}")


def use_color(stream) -> bool:
    """ANSI colours only on a terminal, and never with NO_COLOR set to anything but "" (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def width(stream) -> int | None:
    """The columns the terminal report fits (report/terminal.py): $COLUMNS when it is a positive number, else the
    terminal's own width when ``stream`` is one; None (the full layout, nothing wrapped) for a pipe or a file."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):
        pass
    return None


def output(parser: argparse.ArgumentParser) -> None:
    """--quiet (the totals and the exit code only) or --json (the report, report.json's content, on stdout)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the totals (hosts, findings, checks) and no progress; the exit code says the rest",
    )
    group.add_argument(
        "--json",
        action="store_true",
        help="print the report (report.json's content) on stdout for scripts; progress and file names go to stderr",
    )


def exit_with_reason(report: dict[str, Any], fail_on: str, when: str = "") -> int:
    """The report's exit code (exits.explain), saying on stderr why it is not 0."""
    code, reason = exits.explain(report, fail_on)
    if reason:
        print(clean(f"gpufleet: {reason}" + (f" {when}" if when else "")), file=sys.stderr)  # a report's statuses
    return code


def command(
    sub: argparse._SubParsersAction, name: str, help: str, description: str, examples: str, exit_codes: str = ""
):
    """A sub-command whose --help has a description, examples and its exit codes (the epilog), within 100
    columns (the examples are kept as written)."""
    import textwrap

    codes = textwrap.fill("exit codes: " + (exit_codes or EXIT_CODES), width=100, subsequent_indent="  ")
    return sub.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, width=100),
        epilog="examples:\n" + examples.strip("\n") + "\n\n" + codes,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


EXIT_CODES = (
    "0 clean, 1 findings at or above --fail-on, 2 hosts not audited or failed, 3 usage error, 130 interrupted, "
    "141 the output's reader went away (SIGPIPE)"
)
READ_ONLY_EXIT_CODES = "0 done, 3 usage error, 141 the output's reader went away (SIGPIPE)"
