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


# ---------------------------------------------------------------- issue 13 §3: one GPU in trouble loses only itself


def test_gpu_requires_reset_marks_that_gpu_lost():
    _, gpus = nvidia_smi.parse((FIX / "h100x4-reset-required.csv").read_text())
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert [g["lost"] for g in gpus] == [False, False, True, False]
    g = gpus[2]
    assert g["utilization"] is None and g["temperature"]["gpu"] is None
    assert g["unsupported"]["temperature.gpu"] == "nvidia-smi: [GPU requires reset]"
    assert g["uuid"] == "GPU-c0d1e2f3-a4b5-4c6d-8e7f-9a0b1c2d3e4f"  # identity still readable
    assert gpus[3]["utilization"] == {"gpu_pct": 98, "memory_pct": 57}


def test_handle_error_line_loses_only_that_gpu():
    driver, gpus = nvidia_smi.parse((FIX / "h100x4-handle-error.csv").read_text())
    assert driver == "550.90.07"
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert gpus[2] == {
        "index": 2,
        "pci_bus_id": "00000000:3A:00.0",
        "lost": True,
        "error": "nvidia-smi: Unknown Error",
        "unsupported": {},
        "source": "nvidia-smi",
    }
    assert [g["lost"] for g in gpus] == [False, False, True, False]
    assert gpus[3]["power"]["usage_w"] == 612.48


@pytest.mark.parametrize(
    "line, index, bus, error",
    [
        # Older drivers: the bus id only; nvidia-smi numbers GPUs in bus order, so this is GPU 2 of the four.
        ("Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error", 2, "00000000:3A:00.0",
         "Unknown Error"),
        ("Unable to determine the device handle for gpu 0000:3a:00.0: GPU is lost.  Reboot the system to recover "
         "this GPU", 2, "00000000:3A:00.0", "GPU is lost.  Reboot the system to recover this GPU"),
        ("Unable to determine the device handle for GPU 2: Unknown Error", 2, None, "Unknown Error"),
    ],
)  # fmt: skip
def test_handle_error_forms(line, index, bus, error):
    rows = (FIX / "h100x4-handle-error.csv").read_text().splitlines()
    rows[2] = line
    _, gpus = nvidia_smi.parse("\n".join(rows))
    lost = [g for g in gpus if g["lost"]]
    assert [(g["index"], g["pci_bus_id"], g["error"]) for g in lost] == [(index, bus, "nvidia-smi: " + error)]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]


def test_only_errors_still_fail_clearly():
    with pytest.raises(nvidia_smi.NvidiaSmiError, match="has 1 fields"):
        nvidia_smi.parse("No devices were found\n")


class _Module:
    def __init__(self, rc, out, err=""):
        self.result = (rc, out, err)

    def run_command(self, args):
        return self.result


def test_collect_reads_the_other_gpus_when_nvidia_smi_exits_non_zero():
    text = (FIX / "h100x4-handle-error.csv").read_text()
    rows = [x for x in text.splitlines() if not x.startswith("Unable")]
    err = "Unable to determine the device handle for GPU2: 0000:3A:00.0: Unknown Error\n"
    driver, gpus = nvidia_smi.collect(_Module(15, "\n".join(rows) + "\n", err), "/usr/bin/nvidia-smi")
    assert driver == "550.90.07" and [g["lost"] for g in gpus] == [False, False, True, False]
    with pytest.raises(nvidia_smi.NvidiaSmiError, match="couldn't communicate"):
        nvidia_smi.collect(_Module(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
                           "/usr/bin/nvidia-smi")  # fmt: skip


class _Queries:
    """nvidia-smi answering each query option with its own text (what the command prints, not our code)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def run_command(self, args):
        self.calls.append(args)
        option = args[1].split("=", 1)[0]
        return self.answers.get(option, (2, 'Field "x" is not a valid field to query.', ""))


def test_essential_fields_for_an_old_binding():
    """Row remapping and MIG mode as nvidia-smi prints them (Yes/No, Enabled/Disabled, [N/A] where a GPU has
    none); a GPU whose row is incomplete is left out, never guessed."""
    module = _Queries(
        {
            "--query-remapped-rows": (
                0,
                "00000000:18:00.0, 0, 0, No, No\n00000000:2A:00.0, 2, 1, Yes, No\n"
                "0000:3a:00.0, [N/A], [N/A], [N/A], [N/A]\n",
                "",
            ),
            "--query-gpu": (0, "00000000:18:00.0, Disabled, Enabled\n00000000:2A:00.0, Enabled, Enabled\n", ""),
        }
    )
    got = nvidia_smi.essential_fields(module, "/usr/bin/nvidia-smi", ["remapped_rows", "mig"])
    fabric = _Queries(
        {
            "--query-gpu": (
                0,
                "00000000:18:00.0, Completed, Success\n00000000:2A:00.0, In Progress, N/A\n"
                "00000000:3A:00.0, N/A, N/A\n",
                "",
            )
        }
    )
    assert nvidia_smi.essential_fields(fabric, "/usr/bin/nvidia-smi", ["fabric"]) == {
        "00000000:18:00.0": {
            "fabric": {"state": "completed", "status": "Success", "health_mask": None, "health_problems": []}
        },
        "00000000:2A:00.0": {
            "fabric": {"state": "in_progress", "status": None, "health_mask": None, "health_problems": []}
        },
        "00000000:3A:00.0": {"fabric": nvidia_smi.NO_FABRIC},
    }
    assert got == {
        "00000000:18:00.0": {
            "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
            "mig": {"current": False, "pending": True},
        },
        "00000000:2A:00.0": {
            "remapped_rows": {"corrected": 2, "uncorrected": 1, "pending": True, "failure": False},
            "mig": {"current": True, "pending": True},
        },
    }
    assert module.calls[0][1].startswith("--query-remapped-rows=gpu_bus_id,remapped_rows.correctable")
    # A driver whose nvidia-smi lacks the query: nothing, no error.
    assert nvidia_smi.essential_fields(_Queries({}), "/usr/bin/nvidia-smi", ["remapped_rows"]) == {}


def test_nvlink_status():
    """`nvidia-smi nvlink --status` as drivers print it: a speed is up, <inactive> (or 0 GB/s) down; a GPU header
    with no link lines has no NVLink."""
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaa)\n"
        "\t Link 0: 26.562 GB/s\n"
        "\t Link 1: <inactive>\n"
        "\t Link 2: 0.000 GB/s\n"
        "GPU 1: NVIDIA L40S (UUID: GPU-bbb)\n"
    )
    assert nvidia_smi.parse_nvlink_status(text) == {"GPU-aaa": {"up": 1, "total": 3, "down": [1, 2]}}
    assert nvidia_smi.nvlink_status(_Module(9, "NVIDIA-SMI has failed"), "/usr/bin/nvidia-smi") == {}
