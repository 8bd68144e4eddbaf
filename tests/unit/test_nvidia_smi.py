from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvidia_smi

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def test_parse_busy_a100s():
    driver, gpus = nvidia_smi.parse((FIX / "a100x2-busy.csv").read_text())
    assert driver == "535.183.01"
    assert [g["index"] for g in gpus] == [0, 1]
    g = gpus[1]
    assert g["name"] == "NVIDIA A100-SXM4-80GB"
    assert g["pci_bus_id"] == "00000000:0F:00.0"
    assert g["memory"] == {"total_mib": 81920, "used_mib": 80301, "free_mib": 1219, "used_pct": 98.0}
    assert g["persistence_mode"] is False
    assert g["utilization"] == {"gpu_pct": 95, "memory_pct": 61}
    assert g["power"]["limit_w"] == 300.0 and g["power"]["default_limit_w"] == 400.0
    assert g["ecc"]["current"] is True and g["ecc"]["aggregate_corrected"] == 41
    assert g["clocks"]["max_sm"] == 1410 and g["clocks"]["mem"] == 1593
    assert g["clock_event_reasons"]["active"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert g["clock_event_reasons"]["throttling"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert g["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert g["compute_mode"] == "default"
    assert g["mig"] == {"current": False, "pending": False}
    assert g["source"] == "nvidia-smi"
    # fields nvidia-smi cannot give are null and say why
    assert g["nvlink"] is None and "nvlink" in g["unsupported"]
    assert g["numa_node"] is None and g["unsupported"]["numa_node"] == "not available from nvidia-smi"


def test_parse_not_supported_fields():
    _, [g] = nvidia_smi.parse((FIX / "l40s-unsupported.csv").read_text())
    assert g["mig"] is None
    assert g["unsupported"]["mig.current"] == "nvidia-smi: [N/A]"
    assert g["persistence_mode"] is True
    assert g["clock_event_reasons"]["active"] == ["gpu_idle"]
    assert g["clock_event_reasons"]["throttling"] == []


def test_parse_rejects_wrong_field_count():
    with pytest.raises(nvidia_smi.NvidiaSmiError, match="has 3 fields, expected 42"):
        nvidia_smi.parse("0, NVIDIA A100, x\n")


def test_parse_unexpected_value_is_reported_not_raised():
    line = (FIX / "l40s-unsupported.csv").read_text().replace(" Enabled,", " Maybe,", 1)
    _, [g] = nvidia_smi.parse(line)
    assert g["persistence_mode"] is None
    assert "unexpected value" in g["unsupported"]["persistence_mode"]


def test_query_args_legacy_names():
    args = nvidia_smi.query_args("/usr/bin/nvidia-smi", legacy=True)
    assert "clocks_throttle_reasons.active" in args[1] and "clocks_event_reasons" not in args[1]
    assert args[2] == "--format=csv,noheader,nounits"
