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


def test_check_diff_shows_each_gpu_setting_now_and_restored_and_changes_nothing(tmp_path, profiles, sim_lib, capsys):
    """Issue 29: GPU entries (power limit, persistence mode) were listed without a diff. `gpufleet rollback --check
    --diff` on a simulated host (fake NVML, record and lock under tmp_path): each GPU setting with its value now and
    the recorded one, the simulated GPUs and the record untouched."""
    import json
    import sys

    import yaml

    state = tmp_path / "nvml.state"
    overrides = ["gpu.*.power_limit_mw=400000", "gpu.*.enforced_power_limit_mw=400000", "gpu.*.persistence_mode=1"]
    profiles.write_state(state, profiles.build_state("a100", gpus=1, overrides=overrides))
    uuid = profiles.read_state(state)["gpu.0.uuid"]
    gpu = {"kind": "gpu", "uuid": uuid, "state_dir": str(tmp_path / "var")}
    entries = [dict(gpu, setting="power_limit_w", value=250), dict(gpu, setting="persistence_mode", value=False)]
    (tmp_path / "rollback").mkdir()
    record = tmp_path / "rollback" / "run-1.json"
    record.write_text(json.dumps({"run_id": "run-1", "created": "2026-12-01T00:00:00Z", "entries": entries}))
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_become": False,
        "gpufleet_allow_local_changes": True,  # a simulated host: its GPUs are the fake NVML's state file
        "gpufleet_environment": {"LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state)},
        "gpufleet_rollback_dir": str(tmp_path / "rollback"),
        "gpufleet_lock_path": str(tmp_path / "run" / "remediation.lock"),
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h": host}}}))
    before = (state.read_bytes(), record.read_bytes())

    code = cli.main(["rollback", "-i", str(tmp_path / "hosts.yml"), "--check", "--diff"])
    out = capsys.readouterr().out.splitlines()
    assert code == exits.EXIT_OK, out
    assert out[0] == "h: run run-1: would restore 2, already as before 0", out
    for setting, now, recorded in (("persistence_mode", "on", "off"), ("power_limit_w", "400", "250")):
        what = f"gpu {uuid} {setting}"
        at = out.index(f"  would restore: {what}")
        assert out[at + 1 : at + 6] == [
            f"    --- {what} (now)",
            f"    +++ {what} (restored)",
            "    @@ -1 +1 @@",
            f"    -{setting}: {now}",
            f"    +{setting}: {recorded}",
        ], out
    assert (state.read_bytes(), record.read_bytes()) == before
