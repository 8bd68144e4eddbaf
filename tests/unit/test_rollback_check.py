"""`gpufleet rollback --check [--diff]` says, per host, each file and setting it would restore, with its diff, and
a host never remediated has nothing to restore (exit 0, as `--help` says) (issue 29 point 2). The hosts' results
are runner.HostResults in the shape the rollback module returns; the module end to end is in
tests/integration/test_remediate_rollback.py."""

from __future__ import annotations

import io

from gpufleet import cli, exits
from gpufleet.commands import rollback
from gpufleet.runner import HostResult


def _hosts() -> dict[str, HostResult]:
    done = {
        "run_id": "run-1",
        "restored": ["sysctl vm.swappiness", "gpu GPU-1 power_limit_w"],
        "unchanged": ["file /etc/x"],
        "diff": [
            {"before_header": "sysctl vm.swappiness", "after_header": "sysctl vm.swappiness", "before": "10\n",
             "after": "60\n"},
        ],
        "nothing_to_restore": False,
    }  # fmt: skip
    never = {"run_id": None, "restored": [], "unchanged": [], "nothing_to_restore": True}
    return {
        "gpu01": HostResult("gpu01", actions={rollback.ROLLBACK_ACTION: done}),
        "gpu02": HostResult("gpu02", actions={rollback.ROLLBACK_ACTION: never}),
    }


def test_check_lists_each_entry_and_a_never_remediated_host_has_nothing_to_restore():
    out = io.StringIO()
    code, unrecorded = rollback.print_hosts(_hosts(), None, out=out, check=True)
    assert (code, unrecorded) == (exits.EXIT_OK, [])
    assert out.getvalue().splitlines() == [
        "gpu01: run run-1: would restore 2, already as before 1",
        "  would restore: sysctl vm.swappiness",
        "  would restore: gpu GPU-1 power_limit_w",
        "gpu02: nothing to restore (no remediation run is recorded on this host)",
    ]


def test_diff_follows_each_entry_the_module_gave_one_for():
    out = io.StringIO()
    rollback.print_hosts(_hosts(), None, out=out, check=True, diff=True)
    assert out.getvalue().splitlines()[1:8] == [
        "  would restore: sysctl vm.swappiness",
        "    --- sysctl vm.swappiness (now)",
        "    +++ sysctl vm.swappiness (restored)",
        "    @@ -1 +1 @@",
        "    -10",
        "    +60",
        "  would restore: gpu GPU-1 power_limit_w",
    ]


def test_without_check_it_says_restored_and_takes_diff():
    args = cli.build_parser().parse_args(["rollback", "-i", "inv.yml", "--check", "--diff"])
    assert args.check and args.diff
    out = io.StringIO()
    rollback.print_hosts(_hosts(), None, out=out)
    assert out.getvalue().splitlines()[:2] == ["gpu01: run run-1: restored 2, already as before 1",
                                               "  restored: sysctl vm.swappiness"]  # fmt: skip
