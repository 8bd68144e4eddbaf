"""Options shared by several commands, each defined once here."""

from __future__ import annotations

import argparse

from gpufleet import paths
from gpufleet.preflight import default_inventory


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


def seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 second, got {value}")
    return value


def inventory(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """-i/--inventory. Commands that change hosts (remediate, rollback) take no default: a bare command must never
    tune the machine it runs on."""
    if required:
        parser.add_argument(
            "-i",
            "--inventory",
            required=True,
            help="Ansible inventory of the hosts to change (required: there is no default, so a bare command never "
            "tunes the machine it runs on)",
        )
    else:
        parser.add_argument(
            "-i", "--inventory", default=default_inventory(), help="Ansible inventory (default: %(default)s)"
        )


def fleet(parser: argparse.ArgumentParser, policy: bool = True, inventory_required: bool = False) -> None:
    """What every command that runs against an inventory takes: -i, -l, --policy (unless ``policy`` is False),
    -v."""
    inventory(parser, required=inventory_required)
    parser.add_argument("-l", "--limit", help="limit to these hosts/groups (Ansible pattern)")
    if policy:
        parser.add_argument("--policy", help="YAML file with policy overrides, merged last")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")


def out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="reports", help="report directory (default: %(default)s)")


def fail_on(parser: argparse.ArgumentParser, afterwards: bool = False) -> None:
    parser.add_argument(
        "--fail-on",
        default="none",
        choices=_FailOnChoices(),
        metavar="SEVERITY",
        help="exit 1 when a finding "
        + ("still fails at or above this severity afterwards" if afterwards else "fails at or above this severity")
        + ": %(choices)s (default: %(default)s)",
    )


def forks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--forks", type=int, help="hosts worked on in parallel (default: ansible.cfg)")


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
