"""sysfs_settings' diff in check mode: a glob that matches many files (every CPU's governor) is one line per value
with the count, not one line per file (224 lines on a 224-CPU host); a single file keeps its own path; the
config_file's diff names the file as on the host. The host's state is a temp root; AnsibleModule is stood in for by
its parameters and check_mode only (what the class reads)."""

from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.gpufleet.tuning.plugins.module_utils.sysfs_settings import SysfsSettings

GOV = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def _root(tmp_path, governors):
    for i, gov in enumerate(governors):
        path = tmp_path / f"sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor"
        path.parent.mkdir(parents=True)
        path.write_text(gov + "\n")
    thp = tmp_path / THP.lstrip("/")
    thp.parent.mkdir(parents=True)
    thp.write_text("always [madvise] never\n")
    return tmp_path


def _check(root, settings, config_file=None):
    module = SimpleNamespace(params={"root": str(root), "config_file": config_file}, check_mode=True)
    run = SysfsSettings(module, settings)
    run.plan()
    run.apply()
    return run.result()


def test_a_globs_files_are_one_line_per_value_with_their_count(tmp_path):
    root = _root(tmp_path, ["powersave"] * 6 + ["schedutil"] * 2)
    res = _check(root, {GOV: "performance", THP: "never"})
    assert res["changed"]
    assert res["diff"]["before"] == (f"{GOV}: powersave (6 files)\n{GOV}: schedutil (2 files)\n{THP}: madvise\n")
    assert res["diff"]["after"] == f"{GOV}: performance (8 files)\n{THP}: never\n"
    # Check mode wrote nothing.
    assert (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text() == "powersave\n"


def test_one_matching_file_keeps_its_path_and_the_record_names_the_host_path(tmp_path):
    root = _root(tmp_path, ["powersave", "performance"])
    res = _check(root, {GOV: "performance"}, config_file="/etc/gpufleet/sysfs.json")
    values, config = res["diff"]
    assert values["before"] == "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: powersave\n"
    assert values["after"] == "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: performance\n"
    assert config["before_header"] == config["after_header"] == "/etc/gpufleet/sysfs.json"
    assert '"performance"' in config["after"] and not (root / "etc/gpufleet/sysfs.json").exists()
