"""Exit codes of `gpufleet` and the error that means "usage error".

0 clean, 1 findings at or above --fail-on, 2 hosts unreachable, failed or timed out, 3 usage error (bad inventory,
policy file or report directory), 130 interrupted (SIGINT/SIGTERM: a partial report marked incomplete was written).
A higher code wins: 130 > 3 > 2 > 1.
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


def for_report(report: dict[str, Any], fail_on: str) -> int:
    """EXIT_HOSTS when a host was not audited, else EXIT_FINDINGS when a finding fails at or above ``fail_on`` (a
    severity of the report schema, or ``none``), else EXIT_OK. The collection must be importable
    (``paths.import_collection``)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

    hosts = report["summary"]["hosts"]
    if any(hosts.get(status) for status in schema.DOWN_STATUSES):
        return EXIT_HOSTS
    if fail_on != "none":
        worst = schema.severity_rank(fail_on)
        for h in report["hosts"].values():
            for f in h["findings"]:
                if f["status"] == "fail" and schema.severity_rank(f["severity"]) <= worst:
                    return EXIT_FINDINGS
    return EXIT_OK
