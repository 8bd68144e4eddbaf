import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders as d
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    "mask, names",
    [
        (0x0, []),
        (0x1, ["gpu_idle"]),
        (0x4, ["sw_power_cap"]),
        (0x44, ["sw_power_cap", "hw_thermal_slowdown"]),
        (0x1FF, [n for _, n in d.CLOCK_EVENT_REASONS]),
        (0x200, ["unknown_0x200"]),
        (0x8000000000000008, ["hw_slowdown", "unknown_0x8000000000000000"]),
    ],
)
def test_clock_event_reasons(mask, names):
    assert d.decode_clock_event_reasons(mask) == names


def test_throttling_subset_excludes_idle_and_app_clocks():
    names = d.decode_clock_event_reasons(0x1 | 0x2 | 0x20 | 0x80)
    assert d.throttling_reasons(names) == ["sw_thermal_slowdown", "hw_power_brake_slowdown"]


def test_clock_event_reasons_rejects_negative():
    with pytest.raises(ValueError, match="must be >= 0"):
        d.decode_clock_event_reasons(-1)


@pytest.mark.parametrize(
    "value, text",
    [(12020, "12.2"), (12040, "12.4"), (12080, "12.8"), (13000, "13.0"), (11080, "11.8"), (12060, "12.6")],
)
def test_cuda_version(value, text):
    assert d.cuda_version_string(value) == text


def test_cuda_version_rejects_zero():
    with pytest.raises(ValueError):
        d.cuda_version_string(0)


@pytest.mark.parametrize(
    "text, cpus",
    [
        ("0-3", [0, 1, 2, 3]),
        ("0,2,4", [0, 2, 4]),
        ("0-55,112-167", list(range(0, 56)) + list(range(112, 168))),
        ("0-8:4", [0, 4, 8]),
        ("", []),
        (" 7 \n", [7]),
    ],
)
def test_parse_cpulist(text, cpus):
    assert d.parse_cpulist(text) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "1-", "0-4:0", "1;2"])
def test_parse_cpulist_rejects(bad):
    with pytest.raises(ValueError, match="cpulist"):
        d.parse_cpulist(bad)


@given(st.sets(st.integers(min_value=0, max_value=4095)))
def test_cpulist_round_trip(cpus):
    assert d.parse_cpulist(d.cpus_to_cpulist(cpus)) == sorted(cpus)


def test_mask_words_to_cpus():
    # word 0: CPUs 0 and 63; word 1: CPU 64; word 3: CPU 192+1
    assert d.mask_words_to_cpus([1 | (1 << 63), 1, 0, 2]) == [0, 63, 64, 193]


@pytest.mark.parametrize(
    "cur, mx, down",
    [((4, 16), (4, 16), False), ((1, 16), (4, 16), True), ((5, 8), (5, 16), True), ((None, 16), (4, 16), None)],
)
def test_pcie_downtrained(cur, mx, down):
    assert d.pcie_downtrained(cur[0], cur[1], mx[0], mx[1]) is down


def test_pcie_link():
    assert d.pcie_link(5, 16) == "Gen5 x16"
    assert d.pcie_link(None, 16) is None


@pytest.mark.parametrize(
    "text, version",
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
            "550.90.07",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n",
            "570.86.15",
        ),
        ("535.183.01\n", "535.183.01"),
        ("", None),
        ("garbage\n", None),
    ],
)
def test_kernel_module_version(text, version):
    assert d.parse_kernel_module_version(text) == version


def test_names():
    assert d.architecture_name(9) == "hopper"
    assert d.architecture_name(99) == "unknown_99"
    assert d.compute_mode_name(3) == "exclusive_process"
    assert d.driver_branch("550.90.07") == 550
    assert d.driver_branch("garbage") is None
