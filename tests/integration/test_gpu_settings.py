"""gpu_settings through real Ansible and the simulated NVML: changes, idempotence, check mode, diff, validation
before any write, NoPermission and NotSupported handling, GPU selection."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import labkit
import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
TASK = "Set GPU settings"

TASKS = """
- name: Set GPU settings
  gpufleet.tuning.gpu_settings:
    gpus: "{{ s.gpus | default(['all']) }}"
    persistence_mode: "{{ s.persistence_mode | default(omit) }}"
    power_limit: "{{ s.power_limit | default(omit) }}"
    compute_mode: "{{ s.compute_mode | default(omit) }}"
    application_clocks: "{{ s.application_clocks | default(omit) }}"
    locked_clocks: "{{ s.locked_clocks | default(omit) }}"
    ecc_mode: "{{ s.ecc_mode | default(omit) }}"
    mig_mode: "{{ s.mig_mode | default(omit) }}"
    strict: "{{ s.strict | default(false) }}"
    state_dir: "{{ state_dir }}"
  check_mode: "{{ check | default(false) }}"
  diff: true
"""
PLAY = labkit.play(
    "gpu_settings",
    tasks=TASKS,
    environment=labkit.SIM_NVML,
)

FIX_ALL = {
    "persistence_mode": True,
    "power_limit": "default",
    "compute_mode": "exclusive_process",
    "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1755},
    "locked_clocks": {"min_mhz": 1410, "max_mhz": 1410},
    "ecc_mode": False,
}

SCENARIOS = {
    # host: (profile, gpus, overrides, settings)
    "fix_h100": ("h100", 4, ["gpu.*.persistence_mode=0", "gpu.*.power_limit_mw=250000"], FIX_ALL),
    "percent_a100": ("a100", 2, [], {"power_limit": "90%"}),
    "out_of_range": ("h100", 2, ["gpu.*.persistence_mode=0"], {"persistence_mode": True, "power_limit": "1000"}),
    "bad_clock_pair": ("h100", 1, [], {"application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1757}}),
    "no_permission": (
        "h100",
        2,
        ["error.nvmlDeviceSetPowerManagementLimit=NoPermission", "gpu.*.power_limit_mw=300000"],
        {"power_limit": "max"},
    ),
    "not_supported_one": (
        "a100",
        2,
        ["gpu.1.error.nvmlDeviceSetComputeMode=NotSupported"],
        {"compute_mode": "prohibited"},
    ),
    "mig_on_l40s": ("l40s", 2, [], {"mig_mode": True}),
    "mig_on_l40s_strict": ("l40s", 2, [], {"mig_mode": True, "strict": True}),
    "by_uuid": ("h100", 4, ["gpu.*.persistence_mode=0"], {"persistence_mode": True, "gpus": ["UUID2"]}),
    "bad_index": ("h100", 2, [], {"persistence_mode": True, "gpus": ["9"]}),
    "bad_selector": ("h100", 2, [], {"persistence_mode": True, "gpus": ["0;reboot"]}),
    "bad_power": ("h100", 2, [], {"power_limit": "150%"}),
}


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, profiles, sim_lib):
    tmp = tmp_path_factory.mktemp("gpu_settings")
    hosts, states = {}, {}
    for name, (profile, gpus, overrides, settings) in SCENARIOS.items():
        state = profiles.build_state(profile, gpus=gpus, driver="550", overrides=overrides)
        path = tmp / f"{name}.state"
        profiles.write_state(path, state)
        settings = dict(settings)
        if settings.get("gpus") == ["UUID2"]:
            settings["gpus"] = [state["gpu.2.uuid"]]
        states[name] = path
        hosts[name] = labkit.sim_gpu_host(sim_lib, path, s=settings, state_dir=str(tmp / f"{name}.d"))
    labkit.write_inventory(tmp, hosts)
    labkit.write_play(tmp, PLAY)

    def run(check=False, limit=None):
        extra = {"check": True} if check else {}
        return run_playbook(str(tmp / "play.yml"), str(tmp / "hosts.yml"), extravars=extra, limit=limit).hosts

    before = {name: _hash(p) for name, p in states.items()}
    checked = run(check=True)
    after_check = {name: _hash(p) for name, p in states.items()}
    first = run()
    second = run()
    return {
        "tmp": tmp,
        "states": states,
        "before": before,
        "after_check": after_check,
        "check": checked,
        "first": first,
        "second": second,
        "profiles": profiles,
    }


def _res(run, name):
    host = run[name]
    assert host.status == "ok", host.message
    return host.results[TASK]


def test_check_mode_changes_nothing_and_predicts_converge(fleet):
    assert fleet["before"] == fleet["after_check"]
    check = _res(fleet["check"], "fix_h100")
    first = _res(fleet["first"], "fix_h100")
    assert check["changed"] is True
    assert [g["changed"] for g in check["gpus"]] == [g["changed"] for g in first["gpus"]]
    assert check["diff"] == first["diff"]
    assert (
        "GPU 0 power_limit_w: 250\n" in check["diff"]["before"]
        and "GPU 0 power_limit_w: 700\n" in check["diff"]["after"]
    )
    assert "GPU 0 persistence_mode: False" in check["diff"]["before"]
    assert "GPU 0 persistence_mode: True" in check["diff"]["after"]


def test_converge_sets_everything_then_is_idempotent(fleet):
    first = _res(fleet["first"], "fix_h100")
    assert first["changed"] is True and first["reboot_required"] is True
    assert first["gpus"][0]["changed"] == sorted(
        ["application_clocks", "compute_mode", "ecc_mode", "locked_clocks", "persistence_mode", "power_limit_w"]
    )
    state = fleet["profiles"].read_state(fleet["states"]["fix_h100"])
    for i in range(4):
        assert state[f"gpu.{i}.persistence_mode"] == "1"
        assert state[f"gpu.{i}.power_limit_mw"] == "700000"
        assert state[f"gpu.{i}.compute_mode"] == "3"
        assert (state[f"gpu.{i}.app_clock_mem"], state[f"gpu.{i}.app_clock_graphics"]) == ("2619", "1755")
        assert (state[f"gpu.{i}.locked_clock_min"], state[f"gpu.{i}.locked_clock_max"]) == ("1410", "1410")
        assert (state[f"gpu.{i}.ecc_current"], state[f"gpu.{i}.ecc_pending"]) == ("1", "0")
    record = json.loads((fleet["tmp"] / "fix_h100.d" / "locked_clocks.json").read_text())
    assert record[state["gpu.0.uuid"]] == {"min_mhz": 1410, "max_mhz": 1410}
    second = _res(fleet["second"], "fix_h100")
    assert second["changed"] is False and second["reboot_required"] is True  # ECC still pending a reboot
    assert all(g["changed"] == [] for g in second["gpus"])


def test_percent_of_default(fleet):
    res = _res(fleet["first"], "percent_a100")
    assert res["gpus"][0]["after"]["power_limit_w"] == 360
    assert fleet["profiles"].read_state(fleet["states"]["percent_a100"])["gpu.1.power_limit_mw"] == "360000"
    assert _res(fleet["second"], "percent_a100")["changed"] is False


@pytest.mark.parametrize(
    "name, message",
    [
        ("out_of_range", "power_limit: 1000 W is outside GPU 0's allowed range 200-700 W"),
        ("bad_clock_pair", "application_clocks.graphics_mhz: 1757 is not supported by GPU 0 at memory 2619 MHz"),
        ("no_permission", "GPU 0: setting power_limit_w needs root (become: true)"),
        ("mig_on_l40s_strict", "strict: GPU 0 does not support mig_mode (NotSupported)"),
        ("bad_index", "gpus: index 9 does not exist (this host has 2 GPU(s): 0-1)"),
        ("bad_selector", "gpus: '0;reboot' is not 'all', a GPU index or a GPU UUID"),
        ("bad_power", "power_limit: 150% must be above 0 and at most 100"),
    ],
)
def test_bad_requests_fail_clearly_and_write_nothing(fleet, name, message):
    labkit.assert_clear_error(fleet["first"][name], message)
    if name != "no_permission":
        assert _hash(fleet["states"][name]) == fleet["before"][name], "state changed although the request failed"


def test_not_supported_on_one_gpu_is_reported_not_fatal(fleet):
    res = _res(fleet["first"], "not_supported_one")
    gpus = {g["index"]: g for g in res["gpus"]}
    assert gpus[0]["changed"] == ["compute_mode"] and gpus[1]["unsupported"] == {"compute_mode": "NotSupported"}
    state = fleet["profiles"].read_state(fleet["states"]["not_supported_one"])
    assert state["gpu.0.compute_mode"] == "2" and state["gpu.1.compute_mode"] == "0"


def test_mig_not_supported_without_strict(fleet):
    res = _res(fleet["first"], "mig_on_l40s")
    assert res["changed"] is False
    assert all(g["unsupported"] == {"mig_mode": "NotSupported"} for g in res["gpus"])


def test_select_by_uuid(fleet):
    res = _res(fleet["first"], "by_uuid")
    assert [g["index"] for g in res["gpus"]] == [2]
    state = fleet["profiles"].read_state(fleet["states"]["by_uuid"])
    assert [state[f"gpu.{i}.persistence_mode"] for i in range(4)] == ["0", "0", "1", "0"]


# ---------------------------------------------------------------- issue 14: config_file, the GPU boot configuration


@pytest.fixture
def one_host(tmp_path, profiles, sim_lib):
    """run(args, check=False, state_path=None, module=gpu_settings) -> the run (one H100 pair, persistence off).

    ``args`` a list: one task per item, named "Set GPU settings <n>"."""
    state = tmp_path / "nvml.state"
    profiles.write_state(
        state, profiles.build_state("h100", gpus=2, driver="550", overrides=["gpu.*.persistence_mode=0"])
    )

    def run(args, check=False, state_path=None, module="gpu_settings"):
        play = yaml.safe_load(PLAY)  # the same play, with these arguments
        task = play[0]["tasks"][0]
        del task["gpufleet.tuning.gpu_settings"]
        tasks = []
        for n, one in enumerate(args if isinstance(args, list) else [args], start=1):
            if module == "gpu_settings":
                one = {"state_dir": str(tmp_path / "var"), **one}
            name = f"{TASK} {n}" if isinstance(args, list) else TASK
            tasks.append({**task, "name": name, "gpufleet.tuning." + module: one})
        play[0]["tasks"] = tasks
        labkit.write_play(tmp_path, yaml.safe_dump(play))
        labkit.write_inventory(tmp_path, {"gpu1": labkit.sim_gpu_host(sim_lib, state_path or state)})
        return run_playbook(str(tmp_path / "play.yml"), str(tmp_path / "hosts.yml"), extravars={"check": check})

    uuids = [profiles.read_state(state)[f"gpu.{i}.uuid"] for i in range(2)]
    return run, state, uuids


def test_config_file_check_mode_then_write_then_nothing(one_host, tmp_path, profiles):
    run, state, uuids = one_host
    config = tmp_path / "etc" / "gpu-runtime.json"
    args = {"persistence_mode": True, "power_limit": "90%", "config_file": str(config)}

    checked = run(args, check=True).hosts["gpu1"]
    assert checked.status == "ok", checked.message
    res = checked.results[TASK]
    assert res["changed"] is True and res["config_changed"] is True
    assert not config.exists() and not (tmp_path / "var").exists()
    assert profiles.read_state(state)["gpu.0.persistence_mode"] == "0"

    first = run(args).hosts["gpu1"].results[TASK]
    assert first["changed"] is True and first["config_changed"] is True
    assert first["diff"] == res["diff"]  # check mode predicted the run, file included
    gpus_diff, file_diff = first["diff"]
    assert "GPU 0 persistence_mode: True\n" in gpus_diff["after"]
    assert file_diff["before_header"] == str(config) and file_diff["before"] == ""
    assert file_diff["after"] == "".join(f"{u} persistence_mode: true\n{u} power_limit_w: 630\n" for u in sorted(uuids))
    # The format gpufleet-gpu-apply reads (unchanged from the gpu_boot_config filter's output).
    assert (
        config.read_text()
        == json.dumps(
            {"gpus": {u: {"persistence_mode": True, "power_limit_w": 630} for u in sorted(uuids)}},
            indent=4,
            sort_keys=True,
        )
        + "\n"
    )
    assert oct(config.stat().st_mode & 0o777) == "0o644"

    mtime = config.stat().st_mtime_ns
    second = run(args).hosts["gpu1"].results[TASK]
    assert second["changed"] is False and second["config_changed"] is False
    assert config.stat().st_mtime_ns == mtime


def test_config_file_check_mode_predicts_each_task(one_host, tmp_path):
    """Two tasks add their settings to one file (as the gpu_runtime role's do): in check mode the first task writes
    nothing, yet the second task's change and diff are the ones the real run shows (Molecule's promise)."""
    run, _state, _uuids = one_host
    config = str(tmp_path / "gpu-runtime.json")
    tasks = [{"persistence_mode": True, "config_file": config}, {"power_limit": "90%", "config_file": config}]
    checked = run(tasks, check=True).hosts["gpu1"]
    real = run(tasks).hosts["gpu1"]
    for name in (f"{TASK} 1", f"{TASK} 2"):
        assert checked.results[name]["changed"] is real.results[name]["changed"] is True
        assert checked.results[name]["diff"] == real.results[name]["diff"], name
    again = run(tasks).hosts["gpu1"]
    assert [again.results[f"{TASK} {n}"]["changed"] for n in (1, 2)] == [False, False]


def test_config_file_merges_and_changes_alone(one_host, tmp_path, profiles):
    """Other GPUs and keys are kept; ECC is not recorded; a file that differs is a change even when the GPUs are
    right; removing a lock removes it from the file."""
    run, state, uuids = one_host
    config = tmp_path / "gpu-runtime.json"
    other = "GPU-00000000-0000-0000-0000-000000000000"
    config.write_text(json.dumps({"gpus": {other: {"power_limit_w": 300}, uuids[0]: {"compute_mode": "default"}}}))

    res = run({"persistence_mode": True, "ecc_mode": True, "config_file": str(config)}).hosts["gpu1"].results[TASK]
    assert res["changed"] is True
    assert json.loads(config.read_text())["gpus"] == {
        other: {"power_limit_w": 300},
        uuids[0]: {"compute_mode": "default", "persistence_mode": True},
        uuids[1]: {"persistence_mode": True},
    }

    # The GPUs hold the settings already; only the (lost) file differs: a change, and only the file changes.
    config.unlink()
    res = run({"persistence_mode": True, "config_file": str(config)}).hosts["gpu1"].results[TASK]
    assert res["changed"] is True and res["config_changed"] is True
    assert all(g["changed"] == [] for g in res["gpus"])
    assert set(json.loads(config.read_text())["gpus"]) == set(uuids)

    lock = {"min_mhz": 1410, "max_mhz": 1410}
    run({"locked_clocks": lock, "gpus": ["0"], "config_file": str(config)})
    assert json.loads(config.read_text())["gpus"][uuids[0]]["locked_clocks"] == lock
    run({"locked_clocks": "none", "gpus": ["0"], "config_file": str(config)})
    assert json.loads(config.read_text())["gpus"][uuids[0]] == {"persistence_mode": True}


def test_config_file_not_json_fails_before_any_gpu_change(one_host, tmp_path, profiles):
    run, state, _uuids = one_host
    config = tmp_path / "gpu-runtime.json"
    config.write_text("{not json")
    before = _hash(state)
    host = run({"persistence_mode": True, "config_file": str(config)}).hosts["gpu1"]
    assert host.status == "failed"
    assert f"config_file: {config} is not valid JSON" in host.message and "Traceback" not in host.message
    assert _hash(state) == before and config.read_text() == "{not json"


def test_config_file_records_its_prior_content_for_rollback(one_host, tmp_path):
    run, _state, _uuids = one_host
    config = tmp_path / "gpu-runtime.json"
    args = {
        "persistence_mode": True,
        "config_file": str(config),
        "rollback_run_id": "r1",
        "rollback_dir": str(tmp_path / "rb"),
    }
    assert run(args).hosts["gpu1"].status == "ok"
    record = json.loads((tmp_path / "rb" / "r1.json").read_text())
    assert {"kind": "file", "path": str(config), "content": None} in record["entries"]
    assert {e["setting"] for e in record["entries"] if e["kind"] == "gpu"} == {"persistence_mode"}


def test_rollback_of_gpu_entries_without_nvml_fails_clearly(one_host, tmp_path):
    """rollback restores GPU entries in one NVML session (nvml_session): NVML that cannot start is a clear error
    (before: a traceback from nvmlInit)."""
    run, _state, uuids = one_host
    rb = tmp_path / "rb"
    rb.mkdir()
    entry = {
        "kind": "gpu",
        "uuid": uuids[0],
        "setting": "persistence_mode",
        "value": False,
        "state_dir": str(tmp_path / "var"),
    }
    (rb / "r1.json").write_text(json.dumps({"run_id": "r1", "entries": [entry]}))
    host = run({"run_id": "r1", "rollback_dir": str(rb)}, state_path=tmp_path / "no-such.state", module="rollback")
    host = host.hosts["gpu1"]
    assert host.status == "failed"
    assert "restoring GPU settings failed: NVML could not be initialised: DriverNotLoaded" in host.message, host.message
