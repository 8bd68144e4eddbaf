"""Role gpu_runtime against a simulated host (paths under a temp dir; this host runs no systemd, so the unit
step is skipped here and exercised in the systemd container scenario): fixes, idempotence, and a simulated
reboot after which the boot-time script puts the settings back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import labkit
import pytest

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "roles" / "gpu_runtime" / "files" / "gpufleet-gpu-apply"
pytestmark = pytest.mark.integration

PLAY = labkit.play("GPU runtime", roles=("gpu_runtime",), environment=labkit.SIM_NVML)


@pytest.fixture
def host(tmp_path, profiles, sim_lib):
    if Path("/run/systemd/system").exists():
        pytest.skip("this host runs systemd: the role would enable a unit on it")
    state = tmp_path / "nvml.state"
    profiles.write_state(
        state, profiles.build_state("h100", gpus=2, driver="550", overrides=["gpu.*.persistence_mode=0"])
    )
    _gpu_host(
        tmp_path,
        PLAY,
        sim_lib,
        state,
        gpu_runtime_power_limit="90%",
        gpu_runtime_config_file=str(tmp_path / "etc/gpu-runtime.json"),
        gpu_runtime_apply_script=str(tmp_path / "libexec/gpufleet-gpu-apply"),
        gpu_runtime_unit_dir=str(tmp_path / "units"),
        gpu_runtime_state_dir=str(tmp_path / "var"),
    )
    return tmp_path, state


def _gpu_host(tmp: Path, play: str, sim_lib: Path, state: Path, **hostvars) -> None:
    """Inventory and ``play`` for one local host ``gpu1`` whose GPUs are the simulated ones of ``state``."""
    labkit.write_inventory(tmp, {"gpu1": labkit.sim_gpu_host(sim_lib, state, **hostvars)})
    labkit.write_play(tmp, play)


def _run(tmp: Path):
    result, changed = labkit.run(tmp / "play.yml", tmp / "hosts.yml")
    return result.hosts["gpu1"], labkit.changed_tasks(changed)


def test_fix_idempotence_and_reboot(host, profiles, sim_lib):
    tmp, state_path = host
    gpu1, changed = _run(tmp)
    assert gpu1.status == "ok", gpu1.message
    assert changed == [
        "Create the directory of the boot-time apply script",
        "Install the boot-time apply script",
        "Persistence mode (GPU-PWR-001)",
        "Power limit (GPU-PWR-002)",
    ]
    state = profiles.read_state(state_path)
    assert [state[f"gpu.{i}.persistence_mode"] for i in range(2)] == ["1", "1"]
    assert [state[f"gpu.{i}.power_limit_mw"] for i in range(2)] == ["630000", "630000"]
    config = json.loads((tmp / "etc/gpu-runtime.json").read_text())
    assert config["gpus"][state["gpu.0.uuid"]] == {"persistence_mode": True, "power_limit_w": 630}

    gpu1, changed = _run(tmp)
    assert gpu1.status == "ok" and changed == []

    # "Reboot": the driver comes back with its defaults; the boot script restores the policy.
    profiles.write_state(
        state_path, profiles.build_state("h100", gpus=2, driver="550", overrides=["gpu.*.persistence_mode=0"])
    )
    env = {**os.environ, "LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state_path)}
    proc = subprocess.run(
        [sys.executable, str(tmp / "libexec/gpufleet-gpu-apply"), "--config", str(tmp / "etc/gpu-runtime.json")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    state = profiles.read_state(state_path)
    assert [state[f"gpu.{i}.persistence_mode"] for i in range(2)] == ["1", "1"]
    assert [state[f"gpu.{i}.power_limit_mw"] for i in range(2)] == ["630000", "630000"]


def test_apply_script_reports_failures(tmp_path, profiles, sim_lib):
    state = tmp_path / "nvml.state"
    profiles.write_state(
        state,
        profiles.build_state(
            "h100", gpus=1, driver="550", overrides=["error.nvmlDeviceSetPowerManagementLimit=NoPermission"]
        ),
    )
    uuid = profiles.read_state(state)["gpu.0.uuid"]
    config = tmp_path / "c.json"
    config.write_text(
        json.dumps(
            {
                "gpus": {
                    uuid: {"persistence_mode": True, "power_limit_w": 600},
                    "GPU-00000000-0000-0000-0000-000000000000": {"persistence_mode": True},
                }
            }
        )
    )
    env = {**os.environ, "LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state)}
    proc = subprocess.run(
        [sys.executable, str(APPLY), "--config", str(config)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "power_limit_w failed" in proc.stderr and "not found" in proc.stderr
    assert f"{uuid}: persistence_mode applied" in proc.stdout  # the other settings still went through


# ---------------------------------------------------------------- issue 12: the target comes from the policy


def _policy_host(tmp_path, profiles, sim_lib, overrides, **hostvars):
    """One A100 host (400 W default, 100-400 W) with its simulated state; role variables and policy layers given."""
    state = tmp_path / "nvml.state"
    profiles.write_state(state, profiles.build_state("a100", gpus=2, driver="550", overrides=overrides))
    _gpu_host(
        tmp_path,
        labkit.play("GPU runtime", roles=("gpu_runtime",), environment=labkit.SIM_NVML, tasks=FACT_TASKS),
        sim_lib,
        state,
        gpu_runtime_persist_at_boot=False,
        gpu_runtime_state_dir=str(tmp_path / "var"),
        **hostvars,
    )
    return state


# Records the fact the lead's remediation report reads.
FACT_TASKS = """
- name: Policy overrides
  ansible.builtin.debug:
    var: gpu_runtime_policy_overrides
- name: Audit
  gpufleet.tuning.audit:
    policy: "{{ [gpufleet_policy | default({}), gpufleet_policy_group | default({}),
                 gpufleet_policy_host | default({})] | ansible.builtin.combine(recursive=true) }}"
    gather: [gpu]
    sample_seconds: 0
"""


def _finding(host, rule):
    return next(f for f in host.results["Audit"]["findings"] if f["rule"] == rule)


def _limits(profiles, state):
    values = profiles.read_state(state)
    return [values[f"gpu.{i}.power_limit_mw"] for i in range(2)]


def test_declared_cap_is_set_exactly(tmp_path, profiles, sim_lib):
    # The group's policy declares a 300 W cap on 400 W-default GPUs: the role sets 300 W, not the default.
    state = _policy_host(tmp_path, profiles, sim_lib, [], gpufleet_policy_group={"power": {"limit_w": 300}})
    gpu1, changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert "Power limit (GPU-PWR-002)" in changed
    assert _limits(profiles, state) == ["300000", "300000"]
    assert gpu1.results["Policy overrides"]["gpu_runtime_policy_overrides"] == []
    assert _finding(gpu1, "GPU-PWR-002")["status"] == "pass"  # the re-audit judges what the role set
    gpu1, changed = _run(tmp_path)
    assert gpu1.status == "ok" and changed == []


def test_hand_set_cap_declared_in_policy_is_left_alone(tmp_path, profiles, sim_lib):
    # An owner capped the GPUs at 300 W by hand and declared it: nothing changes (today the role restores 400 W).
    state = _policy_host(
        tmp_path, profiles, sim_lib, ["gpu.*.power_limit_mw=300000"], gpufleet_policy_host={"power": {"limit_w": 300}}
    )
    gpu1, changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert "Power limit (GPU-PWR-002)" not in changed
    # Issue 29: GPU-PWR-002 passes (the targets judge it with the audit's check), so the task does not even run.
    assert "Power limit (GPU-PWR-002)" not in gpu1.results
    assert _limits(profiles, state) == ["300000", "300000"]
    assert _finding(gpu1, "GPU-PWR-002")["status"] == "pass"


def test_declared_percent_cap_clamped_to_the_gpu_range(tmp_path, profiles, sim_lib):
    # 20 % of 400 W is 80 W, below the A100's 100 W minimum: the rule expects 100 W and the role sets it.
    state = _policy_host(tmp_path, profiles, sim_lib, [], gpufleet_policy={"power": {"limit_pct": 20}})
    gpu1, _changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert _limits(profiles, state) == ["100000", "100000"]
    assert _finding(gpu1, "GPU-PWR-002")["status"] == "pass"


def test_no_declared_cap_restores_the_default_and_keeps_higher_limits(tmp_path, profiles, sim_lib):
    # GPU 0 capped at 300 W with no cap declared: still a finding, the role restores the 400 W default.
    state = _policy_host(tmp_path, profiles, sim_lib, ["gpu.0.power_limit_mw=300000"])
    gpu1, changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert _limits(profiles, state) == ["400000", "400000"]
    assert _finding(gpu1, "GPU-PWR-002")["status"] == "pass"
    # A floor of 50 % is a minimum: a GPU at 300 W (75 %) is not lowered to 200 W.
    state = _policy_host(
        tmp_path,
        profiles,
        sim_lib,
        ["gpu.0.power_limit_mw=300000"],
        gpufleet_policy={"power": {"min_power_limit_pct": 50}},
    )
    gpu1, changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert changed == [] and _limits(profiles, state) == ["300000", "400000"]


def test_user_value_wins_is_reported_and_never_exceeds_a_declared_cap(tmp_path, profiles, sim_lib):
    state = _policy_host(tmp_path, profiles, sim_lib, [], gpu_runtime_power_limit="350")
    gpu1, _changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert _limits(profiles, state) == ["350000", "350000"]
    assert gpu1.results["Policy overrides"]["gpu_runtime_policy_overrides"] == [
        {
            "variable": "gpu_runtime_power_limit",
            "value": "350",
            "policy_key": "power.min_power_limit_pct",
            "policy_value": 100.0,
        }
    ]
    # Above the host's declared 300 W cap: refused for this host, before any GPU is touched.
    state = _policy_host(
        tmp_path, profiles, sim_lib, [], gpu_runtime_power_limit="max", gpufleet_policy_host={"power": {"limit_w": 300}}
    )
    gpu1, _changed = _run(tmp_path)
    assert gpu1.status == "failed"
    assert "above the declared cap of 300 W" in gpu1.message and "GPU 0" in gpu1.message, gpu1.message
    assert _limits(profiles, state) == ["400000", "400000"]


# ---------------------------------------------------------------- issue 14: the reboot contract on every run

REBOOT_FACT = """
- name: Reboot fact
  ansible.builtin.debug:
    var: gpu_runtime_reboot_required
"""


@pytest.mark.parametrize(
    "hostvars, expected",
    [
        ({"gpu_runtime_enabled": False}, False),  # before: not set at all when the role is disabled
        ({"gpu_runtime_ecc_mode": True}, True),  # the A100 sim has ECC off: on is pending until a reboot
    ],
)
def test_reboot_required_is_set_on_every_run(tmp_path, profiles, sim_lib, hostvars, expected):
    _policy_host(tmp_path, profiles, sim_lib, ["gpu.*.ecc_current=0", "gpu.*.ecc_pending=0"], **hostvars)
    labkit.write_play(
        tmp_path, labkit.play("GPU runtime", roles=("gpu_runtime",), environment=labkit.SIM_NVML, tasks=REBOOT_FACT)
    )
    gpu1, _changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert gpu1.results["Reboot fact"]["gpu_runtime_reboot_required"] is expected


# ---------------------------------------------------------------- issue 27: the targets the playbook computed

TARGETS_FIRST = [
    {
        "name": "Targets (as playbooks/remediate.yml computes them, once per host)",
        "gpufleet.tuning.remediation_targets": {"roles": ["gpu_runtime"]},
        "register": "gpufleet_targets",
    }
]


def test_the_role_sets_the_targets_the_playbook_computed(tmp_path, profiles, sim_lib):
    """Run from remediate.yml, the role reads gpufleet_targets (GPU-PWR-002's target next to its check) and does
    not compute them again; a role variable in the policy's place is listed with the key it replaces."""
    state = _policy_host(
        tmp_path,
        profiles,
        sim_lib,
        [],
        gpu_runtime_power_limit="250",
        gpufleet_policy_group={"power": {"limit_w": 300}},
    )
    labkit.write_play(
        tmp_path,
        labkit.play(
            "GPU runtime",
            roles=("gpu_runtime",),
            environment=labkit.SIM_NVML,
            pre_tasks=TARGETS_FIRST,
            tasks=FACT_TASKS,
        ),
    )
    gpu1, changed = _run(tmp_path)
    assert gpu1.status == "ok", gpu1.message
    assert gpu1.results["Targets (as playbooks/remediate.yml computes them, once per host)"]["roles"] == {
        "gpu_runtime": {
            "persistence_mode": True,
            "power_limit": "250",
            "power_limit_cap": "300",
            "power_limit_clamp": False,
            "power_limit_at_least": False,
            "ecc_mode": True,
        }
    }
    # The role's own module run is skipped (a skipped task has no ok result).
    assert "Compute this role's targets from the host's effective policy (the one the audit uses)" not in gpu1.results
    assert "Power limit (GPU-PWR-002)" in changed
    assert _limits(profiles, state) == ["250000", "250000"]
    assert gpu1.results["Policy overrides"]["gpu_runtime_policy_overrides"] == [
        {"variable": "gpu_runtime_power_limit", "value": "250", "policy_key": "power.limit_w", "policy_value": 300}
    ]
    assert _finding(gpu1, "GPU-PWR-002")["status"] == "fail"  # below the declared cap: the user's decision, reported
