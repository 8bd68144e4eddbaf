"""The device check's parsing and comparison (scripts/device_check.py), fed recorded public outputs.

- ``nvidia-smi -q -x`` of four real GPUs from four driver generations (tests/fixtures/nvidia-smi-xml/, origins in
  its README): the parser's values are checked against the values read by hand in each file.
- The real ``gpu_info`` module, run as its own process over the simulated libnvidia-ml.so.1 with a state set to
  what the recorded A100 output shows, compared with that output: every strict field matches; a power limit or a
  persistence mode changed in the state is reported as a mismatch of exactly that field.
- ``nvidia-smi topo -m`` of a DGX H100 (tests/fixtures/topology/dgx-h100-topo-m.txt) against the topology reader
  over the simulated HGX H100 sysfs tree: every row matches; a changed cell is a mismatch of that row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import topology
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

REPO = Path(__file__).resolve().parents[2]
XML = REPO / "tests" / "fixtures" / "nvidia-smi-xml"
TOPO = REPO / "tests" / "fixtures" / "topology" / "dgx-h100-topo-m.txt"
MIB = 1024 * 1024


def dc():
    return simulators.load("gpufleet_device_check", REPO / "scripts" / "device_check.py")


def xml(name: str) -> str:
    return (XML / name).read_text()


def only_gpu(parsed: dict) -> dict:
    assert len(parsed["gpus"]) == 1
    return next(iter(parsed["gpus"].values()))


# ---------------------------------------------------------------------------------------------------------------
# nvidia-smi -q -x: values as read by hand in the recorded files


def test_a100_535_values_read_from_the_file():
    parsed = dc().parse_smi_xml(xml("a100-sxm4-v12.xml"))
    assert (parsed["driver_version"], parsed["cuda_version"], parsed["attached_gpus"]) == ("535.54.03", "12.2", 4)
    assert list(parsed["gpus"]) == ["0000:01:00.0"]
    g = only_gpu(parsed)
    assert g["name"] == "NVIDIA A100-SXM4-80GB"
    assert g["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert g["pci_device_id"] == "0x20B210DE"
    assert g["vbios_version"] == "92.00.36.00.02"
    assert g["persistence_mode"] is False and g["compute_mode"] == "default"
    # <total>81920 MiB</total>, <reserved>869 MiB</reserved>, <used>50 MiB</used>: NVML's v1 "used" counts both.
    assert g["memory.total_mib"] == 81920 and g["memory.used_mib"] == 919
    # r535 schema: <gpu_power_readings> with requested (the set limit) and current (enforced) power limits.
    assert (g["power.limit_w"], g["power.enforced_limit_w"], g["power.default_limit_w"]) == (500.0, 500.0, 500.0)
    assert (g["power.min_limit_w"], g["power.max_limit_w"], g["power.usage_w"]) == (100.0, 500.0, 67.03)
    assert (g["temperature.gpu"], g["temperature.shutdown"], g["temperature.slowdown"]) == (27, 92, 89)
    assert g["temperature.gpu_max"] == 85
    assert (g["clocks.graphics"], g["clocks.max_graphics"], g["clocks.app_mem"]) == (1275, 1410, 1593)
    assert (g["pcie.gen_max"], g["pcie.width_max"], g["pcie.replay_count"]) == (4, 16, 0)
    assert g["mig.current"] is True and g["mig.pending"] is True
    assert g["ecc.current"] is True and g["ecc.volatile_uncorrected"] == 0
    # <remapped_rows>N/A</remapped_rows> (MIG on) and N/A retired pages and utilization: no value, not absent.
    assert g["remapped_rows.pending"] is None and g["retired_pages.single_bit"] is None
    assert g["utilization.gpu_pct"] is None
    assert g["fabric.state"] is None
    assert g["clock_event_reasons.active"] == []
    assert "recovery_action" not in g  # this nvidia-smi has no <gpu_recovery_action>


def test_t4_515_older_schema():
    g = only_gpu(dc().parse_smi_xml(xml("tesla-t4.xml")))
    assert g["name"] == "Tesla T4" and g["pci_bus_id"] == "00000000:00:1E.0"
    # r515: <power_readings> with <power_limit> and <enforced_power_limit>.
    assert (g["power.limit_w"], g["power.enforced_limit_w"], g["power.min_limit_w"]) == (70.0, 70.0, 60.0)
    assert g["power.usage_w"] == 26.78
    assert (g["pcie.width_current"], g["pcie.width_max"], g["pcie.gen_max"]) == (8, 16, 3)
    assert (g["retired_pages.single_bit"], g["retired_pages.double_bit"], g["retired_pages.pending"]) == (0, 0, False)
    assert g["mig.current"] is None  # <current_mig>N/A</current_mig>
    assert (g["utilization.gpu_pct"], g["clocks.mem"], g["clocks.max_mem"]) == (0, 5000, 5001)
    assert g["memory.used_mib"] == 1032 + 388
    assert g["clock_event_reasons.active"] == []  # <clocks_throttle_reasons>, all "Not Active"
    assert "fabric.state" not in g  # no <fabric> element before r525


def test_p100_510_pascal_single_double_bit_counters():
    parsed = dc().parse_smi_xml(xml("tesla-p100.xml"))
    assert (parsed["driver_version"], parsed["cuda_version"]) == ("510.47.03", "11.6")
    g = only_gpu(parsed)
    assert g["name"] == "Tesla P100-PCIE-16GB" and g["vbios_version"] == "86.00.52.00.02"
    # Before r525 the ECC counters are per location under single_bit/double_bit, each with a <total>; the aggregate
    # single-bit total of this GPU is 3 (device memory).
    assert (g["ecc.volatile_corrected"], g["ecc.volatile_uncorrected"]) == (0, 0)
    assert (g["ecc.aggregate_corrected"], g["ecc.aggregate_uncorrected"]) == (3, 0)
    assert (g["retired_pages.single_bit"], g["retired_pages.pending"]) == (0, False)
    assert g["temperature.gpu_max"] is None and (g["temperature.shutdown"], g["temperature.slowdown"]) == (85, 82)
    assert g["clock_event_reasons.active"] == ["gpu_idle"]
    assert (g["power.limit_w"], g["power.min_limit_w"], g["clocks.app_graphics"]) == (250.0, 125.0, 1189)
    assert g["memory.used_mib"] == 0 + 103


def test_rtx3080_595_newest_schema():
    g = only_gpu(dc().parse_smi_xml(xml("rtx-3080-v13.xml")))
    assert dc().parse_smi_xml(xml("rtx-3080-v13.xml"))["cuda_version"] == "13.2"
    assert g["power.usage_w"] == 139.62  # <average_power_draw>: no <power_draw> in this schema
    assert g["power.max_limit_w"] == 336.0
    # "Requested functionality has been deprecated" is no value, like N/A.
    assert g["clocks.app_graphics"] is None and g["clocks.default_app_mem"] is None
    assert g["ecc.current"] is None and g["ecc.aggregate_uncorrected"] is None
    assert g["recovery_action"] == "none"  # <gpu_recovery_action>None</gpu_recovery_action>
    assert (g["utilization.gpu_pct"], g["temperature.gpu_max"]) == (65, 93)


def test_active_reasons_and_counters_from_edited_copies():
    text = xml("tesla-t4.xml").replace(
        "<clocks_throttle_reason_sw_power_cap>Not Active", "<clocks_throttle_reason_sw_power_cap>Active"
    ).replace("<clocks_throttle_reason_display_clocks_setting>Not Active",
              "<clocks_throttle_reason_display_clocks_setting>Active")  # fmt: skip
    g = only_gpu(dc().parse_smi_xml(text))
    # gpufleet's names (decoders.CLOCK_EVENT_REASONS): display_clock_setting, not nvidia-smi's display_clocks_setting
    assert g["clock_event_reasons.active"] == ["display_clock_setting", "sw_power_cap"]
    text = xml("a100-sxm4-v12.xml").replace(
        "<volatile>\n                <sram_correctable>0</sram_correctable>",
        "<volatile>\n                <sram_correctable>3</sram_correctable>",
    ).replace("<dram_uncorrectable>0</dram_uncorrectable>\n            </volatile>",
              "<dram_uncorrectable>2</dram_uncorrectable>\n            </volatile>")  # fmt: skip
    g = only_gpu(dc().parse_smi_xml(text))
    assert (g["ecc.volatile_corrected"], g["ecc.volatile_uncorrected"]) == (3, 2)
    assert (g["ecc.aggregate_corrected"], g["ecc.aggregate_uncorrected"]) == (0, 0)


def test_not_nvidia_smi_output_is_refused():
    with pytest.raises(ValueError, match="root element"):
        dc().parse_smi_xml("<other/>")


# ---------------------------------------------------------------------------------------------------------------
# the real gpu_info module over the simulated NVML, against the recorded A100 output

A100_STATE = [
    "driver_version=535.54.03",
    "nvml_version=12.535.54.03",
    "cuda_driver_version=12020",
    "gpu.0.uuid=GPU-513536b6-7d19-9063-b049-1e69664bb298",
    "gpu.0.pci_bus_id=00000000:01:00.0",
    "gpu.0.vbios_version=92.00.36.00.02",
    "gpu.0.persistence_mode=0",
    f"gpu.0.memory_used={(50 + 869) * MIB}",
    "gpu.0.power_usage_mw=67030",
    "gpu.0.power_limit_mw=500000",
    "gpu.0.enforced_power_limit_mw=500000",
    "gpu.0.power_default_limit_mw=500000",
    "gpu.0.power_max_limit_mw=500000",
    "gpu.0.clock_graphics=1275",
    "gpu.0.clock_sm=1275",
    "gpu.0.app_clock_graphics=1275",
    "gpu.0.default_app_clock_graphics=1275",
    "gpu.0.clocks_event_reasons=0x0",
    "gpu.0.temperature=27",
    "gpu.0.pcie_gen_current=4",
    "gpu.0.mig_current=1",
    "gpu.0.mig_pending=1",
]
# What nvidia-smi says N/A in that file (row remapping in MIG mode, utilization): absent in the state, so NVML
# answers NotSupported.
A100_UNSET = ["gpu.0.remapped_corrected", "gpu.0.remapped_uncorrected", "gpu.0.remapped_pending",
              "gpu.0.remapped_failure", "gpu.0.utilization_gpu", "gpu.0.utilization_memory"]  # fmt: skip


def run_gpu_info(sim_lib: Path, profiles, tmp_path: Path, overrides: list[str]) -> dict:
    """Module gpu_info (plugins/modules/gpu_info.py) in its own process, as Ansible starts it, over the
    simulated library; the file root is an empty directory (no host file is read)."""
    state = profiles.build_state("a100", gpus=1, driver="535", overrides=A100_STATE + overrides)
    for key in A100_UNSET:
        state.pop(key, None)
    profiles.write_state(tmp_path / "nvml.state", state)
    (tmp_path / "root").mkdir(exist_ok=True)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"root": str(tmp_path / "root")}}))
    env = {**os.environ, "LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(tmp_path / "nvml.state"),
           "PYTHONPATH": str(REPO / ".collections")}  # fmt: skip
    proc = subprocess.run([sys.executable, str(REPO / "plugins" / "modules" / "gpu_info.py"), str(args)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["nvml"]["available"] is True, facts["nvml"]
    return facts


def rows_by(rows: list[dict]) -> dict:
    return {(r["scope"].split()[-1], r["field"]): r for r in rows}


def test_sim_gpu_info_matches_the_recorded_a100(sim_lib, profiles, tmp_path):
    facts = run_gpu_info(sim_lib, profiles, tmp_path, [])
    rows = dc().compare_gpus(facts, [dc().parse_smi_xml(xml("a100-sxm4-v12.xml"))])
    bad = [r for r in rows if r["status"] == dc().MISMATCH]
    assert bad == []
    by = rows_by(rows)
    # The rows are real comparisons, not skips: each strict field shows the same value on both sides.
    for field, value in (("power.limit_w", "500"), ("temperature.shutdown", "92"), ("vbios_version", "92.00.36.00.02"),
                         ("memory.total_mib", "81920"), ("mig.current", "Enabled"), ("persistence_mode", "Disabled")):
        row = by[("0000:01:00.0", field)]
        assert (row["gpufleet"], row["nvidia_smi"], row["status"]) == (value, value, "match"), row
    assert by[("host", "driver.cuda_driver_version")]["gpufleet"] == "12.2"
    assert by[("0000:01:00.0", "recovery_action")]["status"] == dc().SKIP  # not in this nvidia-smi
    counted = dc().summarize(rows)
    assert counted["match"] >= 45, counted


def test_sim_gpu_info_changed_state_is_reported(sim_lib, profiles, tmp_path):
    facts = run_gpu_info(sim_lib, profiles, tmp_path,
                         ["gpu.0.power_limit_mw=450000", "gpu.0.enforced_power_limit_mw=450000",
                          "gpu.0.persistence_mode=1"])  # fmt: skip
    rows = dc().compare_gpus(facts, [dc().parse_smi_xml(xml("a100-sxm4-v12.xml"))])
    bad = {r["field"]: (r["gpufleet"], r["nvidia_smi"]) for r in rows if r["status"] == dc().MISMATCH}
    assert bad == {"power.limit_w": ("450", "500"), "power.enforced_limit_w": ("450", "500"),
                   "persistence_mode": ("Enabled", "Disabled")}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# comparison rules on gpu_info-shaped facts


def facts_from(parsed: dict, **changes) -> dict:
    """gpu_info-shaped facts holding the parsed values (dotted fields expanded), then ``changes``."""
    gpus = []
    for i, fields in enumerate(parsed["gpus"].values()):
        g: dict = {"index": i, "unsupported": {}}
        for dotted, value in {**fields, **changes}.items():
            node = g
            parts = dotted.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
        gpus.append(g)
    return {"driver": {"version": parsed["driver_version"], "cuda_driver_version": parsed["cuda_version"]},
            "gpus": gpus}  # fmt: skip


def test_live_values_are_bracketed_by_two_readings():
    before = dc().parse_smi_xml(xml("tesla-t4.xml"))
    after = dc().parse_smi_xml(xml("tesla-t4.xml").replace("<gpu_temp>40 C</gpu_temp>", "<gpu_temp>50 C</gpu_temp>"))
    status = {}
    for temp in (45, 52, 60):
        rows = dc().compare_gpus(facts_from(before, **{"temperature.gpu": temp}), [before, after])
        status[temp] = rows_by(rows)[("0000:00:1e.0", "temperature.gpu")]["status"]
    # Between the readings, within 3 C of one, and beyond: live (shown, not a failure).
    assert status == {45: "match", 52: "match", 60: "live"}
    rows = dc().compare_gpus(facts_from(before, **{"ecc.aggregate_corrected": 1}), [before])
    assert rows_by(rows)[("0000:00:1e.0", "ecc.aggregate_corrected")]["status"] == dc().MISMATCH


def test_gpu_missing_on_one_side_is_a_mismatch():
    parsed = dc().parse_smi_xml(xml("tesla-t4.xml"))
    facts = facts_from(parsed)
    facts["gpus"][0]["pci_bus_id"] = "00000000:3B:00.0"
    rows = dc().compare_gpus(facts, [parsed])
    present = [r for r in rows if r["field"] == "present"]
    assert [r["status"] for r in present] == [dc().MISMATCH, dc().MISMATCH]
    assert rows_by(rows)[("host", "gpu_count")]["status"] == dc().MATCH


def test_markdown_table_lists_every_row():
    parsed = dc().parse_smi_xml(xml("a100-sxm4-v12.xml"))
    rows = dc().compare_gpus(facts_from(parsed, **{"power.limit_w": 400.0}), [parsed])
    text = dc().render_markdown(rows, [{"reader": "nvidia-smi -q", "median_s": 0.5, "runs_s": [0.5, 0.6, 0.4]}],
                                [], "t")  # fmt: skip
    assert "| GPU 0 0000:01:00.0 | power.limit_w | 400 | 500 | MISMATCH |" in text
    assert "| nvidia-smi -q | 0.500 | 0.500, 0.600, 0.400 |" in text
    assert text.count("\n| GPU 0") == len([r for r in rows if r["scope"].startswith("GPU")])


# ---------------------------------------------------------------------------------------------------------------
# nvidia-smi topo -m

LEGEND = "\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(12))


def topo_text(edit=None) -> str:
    text = "\n".join(line for line in TOPO.read_text().splitlines() if not line.startswith("#"))
    return (edit(text) if edit else text) + LEGEND


def test_topo_parser_reads_the_dgx_h100_matrix():
    parsed = dc().parse_topo(topo_text())
    assert parsed["columns"][:9] == [f"GPU{i}" for i in range(8)] + ["NIC0"]
    assert parsed["rows"]["GPU1"]["NIC3"] == "PXB" and parsed["rows"]["GPU4"]["GPU0"] == "NV18"
    assert parsed["affinity"]["GPU4"] == {"CPU Affinity": "56-111,168-223", "NUMA Affinity": "1"}
    assert parsed["nic_legend"]["NIC11"] == "mlx5_11"
    # The same output with the tabs lost to spaces, and nvidia-smi's underlined (ANSI) header.
    spaced = dc().parse_topo("\x1b[4m" + topo_text().replace("\t", "    ").replace("\n", "\x1b[0m\n", 1))
    assert spaced["rows"] == parsed["rows"] and spaced["affinity"] == parsed["affinity"]


def hgx_topology(tmp_path):
    tree = simulators.pcitree()
    root = tree.build(tmp_path / "hgx", "hgx_h100")
    gpus = []
    for g in tree.platform("hgx_h100")["gpus"]:
        dom, rest = g["bdf"].split(":", 1)
        gpus.append({"index": g["index"], "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"{int(dom, 16):08X}:"
                     f"{rest.upper()}", "pci_device_id": "0x233010DE", "nvlink": {"up": 18, "total": 18, "down": []},
                     "fabric": {"state": "completed"}, "numa_node": g["node"], "cpu_affinity": None})  # fmt: skip
    return topology.collect(HostFS(str(root)), gpus)


def test_topology_reader_matches_the_published_dgx_h100(tmp_path):
    facts = hgx_topology(tmp_path)
    rows = dc().compare_topology(facts, dc().parse_topo(topo_text()))
    assert [r for r in rows if r["status"] != dc().MATCH] == []
    fields = {r["field"] for r in rows}
    assert {f"row GPU{i}" for i in range(8)} | {"row NIC0 (mlx5_0)"} <= fields
    assert {"topology local_cpus", "topology numa_node"} <= fields


def test_topology_difference_is_a_mismatch_of_that_row(tmp_path):
    facts = hgx_topology(tmp_path)

    def edit(text: str) -> str:
        lines = text.splitlines()
        lines = [line.replace("\tNV18\tNV18", "\tNV12\tNV18", 1) if line.startswith("GPU3\t") else line
                 for line in lines]  # fmt: skip
        return "\n".join(line.replace("56-111,168-223", "0-55", 1) if line.startswith("GPU7\t") else line
                         for line in lines)  # fmt: skip

    rows = dc().compare_topology(facts, dc().parse_topo(topo_text(edit)))
    bad = sorted((r["scope"], r["field"]) for r in rows if r["status"] == dc().MISMATCH)
    assert bad == [("GPU7", "topology local_cpus"), ("topology", "row GPU3")]


def test_numa_affinity_na_and_numbers():
    # A single-GPU VM as nvidia-smi r535+ prints it: an empty cell before GPU NUMA ID.
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t{numa}\t\tN/A\n"
    facts = {"matrix": {"GPU0": {"GPU0": "X"}}, "gpus": [{"index": 0, "local_cpus": "0-15", "numa_node": None}]}
    rows = dc().compare_topology(facts, dc().parse_topo(text.format(numa="N/A")))
    assert {r["field"]: r["status"] for r in rows} == {"row GPU0": "match", "topology local_cpus": "match",
                                                       "topology numa_node": "match"}  # fmt: skip
    # nvidia-smi knows the node where gpufleet does not (issue 25 point 5: numa_node -1 on a one-node host).
    rows = dc().compare_topology(facts, dc().parse_topo(text.format(numa="0")))
    bad = [(r["field"], r["gpufleet"], r["nvidia_smi"]) for r in rows if r["status"] == dc().MISMATCH]
    assert bad == [("topology numa_node", "n/a", "0")]


def test_compare_mode_of_the_script(tmp_path, capsys):
    parsed = dc().parse_smi_xml(xml("tesla-t4.xml"))
    same = tmp_path / "same.json"
    same.write_text(json.dumps(facts_from(parsed)))
    assert dc().main(["--compare", str(same), str(XML / "tesla-t4.xml")]) == 0
    other = tmp_path / "other.json"
    other.write_text(json.dumps(facts_from(parsed, **{"vbios_version": "90.04.84.00.07 | x"})))
    assert dc().main(["--compare", str(other), str(XML / "tesla-t4.xml")]) == 1
    out = capsys.readouterr().out
    assert "| vbios_version | 90.04.84.00.07 \\| X | 90.04.84.00.06 | MISMATCH |" in out
