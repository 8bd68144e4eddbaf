"""playbooks/remediate.yml then playbooks/rollback.yml on a simulated host (fake GPUs, fixture host root, paths
under a temp dir): remediation fixes and records prior values; rollback restores GPU state, sysctl runtime
values and files exactly; a second rollback changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import labkit
import pytest
import yaml

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim" / "host"))
import mkroot  # noqa: E402

pytestmark = pytest.mark.integration


def _snapshot(root: Path, state: Path) -> dict:
    files = {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    files["nvml"] = state.read_bytes()
    return files


def test_remediate_then_rollback(tmp_path, profiles, sim_lib):
    state = tmp_path / "nvml.state"
    profiles.write_state(
        state,
        profiles.build_state(
            "a100",
            gpus=2,
            driver="550",
            overrides=[
                "gpu.*.persistence_mode=0",
                "gpu.*.power_limit_mw=250000",
                "gpu.*.enforced_power_limit_mw=250000",
            ],
        ),
    )
    root = mkroot.build_root(tmp_path / "root", {"swappiness": 60, "numa_balancing": 1, "governor": "powersave"})
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_become": False,
        "gpufleet_allow_local_changes": True,  # a simulated host on this machine (files under tmp_path)
        "gpufleet_environment": {"LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state)},
        "host_tuning_root": str(root),
        "host_tuning_host_mem_004_enabled": False,
        "network_tuning_enabled": False,
        "gpu_runtime_config_file": str(tmp_path / "etc/gpu-runtime.json"),
        "gpu_runtime_apply_script": str(tmp_path / "libexec/gpufleet-gpu-apply"),
        "gpu_runtime_unit_dir": str(tmp_path / "units"),
        "gpu_runtime_state_dir": str(tmp_path / "var"),
        "gpufleet_rollback_dir": str(tmp_path / "rollback"),
        "gpufleet_lock_path": str(tmp_path / "run" / "remediation.lock"),
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h": host}}}))
    before = _snapshot(root, state)
    extra = {"gpufleet_run_id": "run-1"}
    res = run_playbook(str(REPO / "playbooks" / "remediate.yml"), str(tmp_path / "hosts.yml"), extravars=extra)
    assert res.hosts["h"].status == "ok", res.hosts["h"].message
    after = profiles.read_state(state)
    assert after["gpu.0.persistence_mode"] == "1" and after["gpu.0.power_limit_mw"] == "400000"
    assert (root / "proc/sys/vm/swappiness").read_text().strip() == "10"
    record = json.loads((tmp_path / "rollback/run-1.json").read_text())
    kinds = {(e["kind"], e.get("setting") or e.get("key") or Path(e.get("path", "")).name) for e in record["entries"]}
    assert ("gpu", "power_limit_w") in kinds and ("sysctl", "vm.swappiness") in kinds
    assert ("file", "60-gpufleet.conf") in kinds and ("file", "gpu-runtime.json") in kinds
    assert (tmp_path / "etc/gpu-runtime.json").exists()

    # Issue 29: `gpufleet rollback --check --diff` lists, per host, each file and setting it would restore with its
    # diff, and changes nothing; a host never remediated (no record) has nothing to restore: exit 0.
    fresh = {**host, "gpufleet_rollback_dir": str(tmp_path / "fresh-rollback")}
    (tmp_path / "both.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h": host, "fresh": fresh}}}))
    remediated = _snapshot(root, state)
    proc = labkit.gpufleet("rollback", "-i", str(tmp_path / "both.yml"), "--check", "--diff", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "fresh: nothing to restore (no remediation run is recorded on this host)"
    assert out[1].startswith("h: run run-1: would restore ") and "  would restore: sysctl vm.swappiness" in out
    swappiness = out.index("  would restore: sysctl vm.swappiness")
    assert out[swappiness + 1 : swappiness + 6] == [
        "    --- sysctl vm.swappiness (now)",
        "    +++ sysctl vm.swappiness (restored)",
        "    @@ -1 +1 @@",
        "    -10",
        "    +60",
    ]
    assert any(line.startswith("  would restore: file ") and line.endswith("gpu-runtime.json") for line in out)
    assert _snapshot(root, state) == remediated and not (tmp_path / "fresh-rollback").exists()

    res = run_playbook(str(REPO / "playbooks" / "rollback.yml"), str(tmp_path / "hosts.yml"))
    assert res.hosts["h"].status == "ok", res.hosts["h"].message
    out = res.hosts["h"].results["Restore the values recorded before the run"]
    assert out["changed"] is True and out["run_id"] == "run-1"
    now = _snapshot(root, state)
    changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    assert changed == [], changed
    # Files the run created outside the root are gone again (the boot unit would otherwise re-apply the settings).
    assert not (tmp_path / "etc/gpu-runtime.json").exists()
    assert not (tmp_path / "libexec/gpufleet-gpu-apply").exists()

    again = run_playbook(str(REPO / "playbooks" / "rollback.yml"), str(tmp_path / "hosts.yml"))
    assert again.hosts["h"].results["Restore the values recorded before the run"]["changed"] is False
