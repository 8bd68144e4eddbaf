"""Exit codes of `gpufleet` and the error that means "usage error".

0 clean, 1 findings at or above --fail-on, 2 hosts unreachable, failed or timed out, 3 usage error (bad inventory,
policy file or report directory), 130 interrupted (SIGINT/SIGTERM: a partial report marked incomplete was written).
A higher code wins: 130 > 3 > 2 > 1. When the reader of stdout goes away (`| head`), gpufleet dies of SIGPIPE
quietly, as coreutils and git do: a shell reports 141 (cli.main).
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_HOSTS = 2
EXIT_USAGE = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


class UsageError(Exception):
    """Bad input found before any host is touched (`gpufleet` prints it and exits 3)."""


def explain(report: dict[str, Any], fail_on: str) -> tuple[int, str | None]:
    """The exit code of a report and why, for a person: ``(EXIT_HOSTS, "exit 2: 1 host not audited (unreachable:
    1)")`` when a host was not audited, else ``(EXIT_FINDINGS, "exit 1: 3 findings at or above high")`` when
    findings fail at or above ``fail_on`` (a severity of the report schema, or ``none``), else ``(EXIT_OK, None)``.
    The collection must be importable (``paths.import_collection``)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet

    # One home for the verdict: playbooks/audit.yml fails the run by the same function (audit_report).
    return fleet.verdict(report, fail_on)
