"""Issue 25 §5, the NVML reader's half: NVLink facts as NVML and DCGM define them, through the project's pynvml over
the simulated libnvidia-ml.so.1 (in this process: load_pynvml binds the simulated library by path).

* The link count is NVML's link-count field (NVML_FI_DEV_NVLINK_LINK_COUNT, as DCGM reads it), not a probe of links
  0..N; only where the field is not supported are links probed, and the facts say so.
* NVLink error counters NVML does not return (NotSupported, NoPermission) stay None with the reason; so does their
  increase - never a zero that reads as "no NVLink errors".
* Recovery-action codes are exactly those nvml.h defines; any other value is "unknown (N)".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim" / "nvml"))
import find_header  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def read(sim_lib, profiles, tmp_path, monkeypatch):
    """read(profile, gpus, overrides, sample_seconds=0) -> the GPUs as nvml.collect gives them."""
    nv = nvml.load_pynvml(str(sim_lib))

    def run(profile, gpus, overrides, sample_seconds=0):
        state = tmp_path / "nvml.state"
        profiles.write_state(state, profiles.build_state(profile, gpus=gpus, driver="570", overrides=overrides))
        monkeypatch.setenv("FAKE_NVML_STATE", str(state))
        _driver, out = nvml.collect(nv, HostFS(str(tmp_path)), sample_seconds=sample_seconds)
        return out

    return run


def test_link_count_is_the_field_not_a_probe(read):
    """An A100 has 12 NVLinks (the field says so). A driver that still answers a state for links past them (here:
    inactive) does not make them links of this GPU: probing 0..17 would report six links down."""
    [gpu] = read(
        "a100", 1, ["gpu.0.nvlink_count=18", "gpu.0.nvlink_down=12,13,14,15,16,17", "gpu.0.nvlink_count_field=12"]
    )
    assert gpu["nvlink"]["count_source"] == "field"
    assert (gpu["nvlink"]["total"], gpu["nvlink"]["up"], gpu["nvlink"]["down"]) == (12, 12, [])
    assert "nvlink.link_count" not in gpu["unsupported"]


@pytest.mark.parametrize("reason", ["NotSupported", "NoPermission"])
def test_links_are_probed_only_where_the_field_is_not_supported(read, reason):
    [gpu] = read("h100", 1, [f"gpu.0.nvlink_count_field={reason}", "gpu.0.nvlink_down=5"])
    assert gpu["nvlink"]["count_source"] == "probe"
    assert gpu["unsupported"]["nvlink.link_count"] == reason  # says why the links were probed
    assert (gpu["nvlink"]["total"], gpu["nvlink"]["down"]) == (18, [5])


def test_a_gpu_without_nvlink_by_the_field(read):
    [gpu] = read("l40s", 1, [])
    assert gpu["nvlink"] is None and gpu["unsupported"]["nvlink"] == "NotSupported"


@pytest.mark.parametrize("reason", ["NotSupported", "NoPermission"])
def test_nvlink_counters_nvml_does_not_return_are_unknown(read, reason):
    [gpu] = read("h100", 1, [f"gpu.0.error.nvmlDeviceGetNvLinkErrorCounter={reason}"], sample_seconds=0.05)
    errors, increase = gpu["nvlink"]["errors"], gpu["nvlink"]["errors_increase"]
    assert set(errors) == {"replay", "recovery", "crc_flit", "crc_data"}
    assert all(value is None for value in errors.values()), errors
    assert all(value is None for value in increase.values()), increase
    for name in errors:
        assert gpu["unsupported"]["nvlink.errors." + name] == reason
    assert gpu["nvlink"]["up"] == 18  # the links themselves are still read


def _header_recovery_actions() -> dict[int, str]:
    text = (find_header.find() / "nvml.h").read_text()
    body = re.search(r"typedef\s+enum\s+\w*\s*\{([^}]*)\}\s*nvmlDeviceGpuRecoveryAction_t", text)
    assert body, "nvmlDeviceGpuRecoveryAction_t not found in nvml.h"
    return {
        int(value): name.lower()
        for name, value in re.findall(r"NVML_GPU_RECOVERY_ACTION_(\w+)\s*=\s*(\d+)", body.group(1))
    }


def test_recovery_actions_are_those_nvml_h_defines():
    header = _header_recovery_actions()
    # Our names are the header's, lower case: NVML_GPU_RECOVERY_ACTION_DRAIN_P2P -> "drain_p2p".
    assert header and nvml.RECOVERY_ACTIONS == header


def test_a_recovery_action_nvml_h_does_not_define_is_unknown(read):
    undefined = max(_header_recovery_actions()) + 2
    [gpu] = read("h100", 1, [f"gpu.0.recovery_action={undefined}"])
    assert gpu["recovery_action"] == f"unknown ({undefined})"
