"""module_utils/rdma.py, the RDMA port reader: the recorded /sys/class/infiniband trees of tests/fixtures/rdma (an H100
node's eight NDR ports and RoCE bond from gpud, procfs's Omni-Path / ConnectX-3 / ConnectX-4), the counters read
twice in one window, saturation by the kernel's counter widths, a missing tree, RoCE over bond0, and hostile files.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import rdma
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from report_fixtures import load
from test_report_html import parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rdma"
IB = "sys/class/infiniband"


class Clock:
    """A monotonic clock that moves only when the reader sleeps (and by ``step`` per reading of it)."""

    def __init__(self, step=0.0):
        self.now, self.step, self.slept = 100.0, step, []

    def __call__(self):
        self.now += self.step
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def _copy(tmp_path, name="gpud-h100"):
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root


def _ports(result):
    return {p["name"]: p for p in result["ports"]}


def test_recorded_h100_node():
    result = rdma.collect(HostFS(str(FIXTURES / "gpud-h100")), sample_seconds=0)
    ports = _ports(result)
    assert result["available"] and result["reason"] is None and result["interval_s"] is None
    assert sorted(ports) == [f"mlx5_{i}/1" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0/1"]
    ib = ports["mlx5_0/1"]
    assert (ib["state"], ib["state_code"], ib["phys_state"], ib["phys_state_code"]) == ("ACTIVE", 4, "LinkUp", 5)
    assert (ib["rate"], ib["rate_gbps"], ib["width"], ib["speed"]) == ("400 Gb/sec (4X NDR)", 400.0, "4X", "NDR")
    assert (ib["link_layer"], ib["hca_type"], ib["fw_ver"]) == ("InfiniBand", "MT4129", "28.41.1000")
    bond = ports["mlx5_bond_0/1"]
    assert (bond["link_layer"], bond["rate_gbps"], bond["width"]) == ("Ethernet", 200.0, "2X")
    assert bond["hca_type"] == "MT41692"
    # as recorded: link_downed at its 8-bit maximum, excessive_buffer_overrun_errors at its 4-bit maximum
    assert ports["mlx5_1/1"]["counters"]["link_downed"] == 255
    assert ports["mlx5_1/1"]["saturated"] == ["excessive_buffer_overrun_errors", "link_downed"]
    assert ports["mlx5_0/1"]["saturated"] == ["excessive_buffer_overrun_errors"]
    assert ports["mlx5_0/1"]["counters"]["port_rcv_errors"] == 14 and ports["mlx5_0/1"]["deltas"] is None
    assert ports["mlx5_0/1"]["hw_counters"] == {"roce_adp_retrans": 3}  # only non-zero driver counters


def test_recorded_procfs_tree():
    ports = _ports(rdma.collect(HostFS(str(FIXTURES / "procfs")), sample_seconds=0))
    assert sorted(ports) == ["hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]
    assert [ports[n]["rate_gbps"] for n in sorted(ports)] == [100.0, 40.0, 40.0, 25.0]
    assert (ports["mlx5_0/1"]["width"], ports["mlx5_0/1"]["speed"]) == ("1X", "EDR")
    # as published, this phys_state is "4: ACTIVE": reported as it is
    assert (ports["mlx5_0/1"]["phys_state_code"], ports["mlx5_0/1"]["phys_state"]) == (4, "ACTIVE")
    assert ports["hfi1_0/1"]["hca_type"] is None and ports["hfi1_0/1"]["board_id"].startswith("HPE 100Gb 1-port")


def test_counters_read_twice_in_one_window(tmp_path):
    root = _copy(tmp_path)
    clock = Clock()
    fs = HostFS(str(root))
    first = rdma.start(fs, clock=clock)
    base = root / IB / "mlx5_4/ports/1"
    (base / "counters/symbol_error").write_text("40\n")  # grows by 40 in the window
    (base / "counters/link_downed").write_text("1\n")  # grows by 1
    (base / "hw_counters/out_of_buffer").write_text("17\n")
    clock.now += 0.3  # what the other readers took meanwhile
    result = rdma.finish(fs, first, sample_seconds=1.0, sleep=clock.sleep, clock=clock)
    assert clock.slept == [pytest.approx(0.7)]  # only what was left of the window
    assert result["interval_s"] == pytest.approx(1.0)
    ports = _ports(result)
    assert ports["mlx5_4/1"]["deltas"] == {"symbol_error": 40, "link_downed": 1}
    assert ports["mlx5_4/1"]["hw_deltas"] == {"out_of_buffer": 17}
    assert ports["mlx5_0/1"]["deltas"] == {}  # read twice, nothing grew


def test_a_counter_cleared_in_the_window_is_a_reset_not_growth(tmp_path):
    root = _copy(tmp_path)
    clock = Clock()
    fs = HostFS(str(root))
    first = rdma.start(fs, clock=clock)
    (root / IB / "mlx5_1/ports/1/counters/link_downed").write_text("0\n")  # perfquery -R
    ports = _ports(rdma.finish(fs, first, sample_seconds=1.0, sleep=clock.sleep, clock=clock))
    assert ports["mlx5_1/1"]["reset"] == ["link_downed"] and "link_downed" not in ports["mlx5_1/1"]["deltas"]
    assert ports["mlx5_1/1"]["saturated"] == ["excessive_buffer_overrun_errors"]  # no longer at its maximum


@pytest.mark.parametrize(
    ("name", "value", "full"),
    [
        ("symbol_error", 65535, True),
        ("symbol_error", 65534, False),
        ("link_error_recovery", 255, True),
        ("local_link_integrity_errors", 15, True),
        ("local_link_integrity_errors", 14, False),
        ("port_rcv_errors", 65535, True),
        ("port_xmit_data", 0xFFFFFFFF, True),  # a 32-bit data counter of an old HCA
        ("port_xmit_data", 0x1_0000_0000, False),  # 64-bit (PortCountersExtended)
        ("link_downed", None, False),
    ],
)
def test_saturation_follows_the_kernels_counter_widths(name, value, full):
    assert rdma.saturated(name, value) is full


def test_no_infiniband_class_means_no_rdma_devices(tmp_path):
    result = rdma.collect(HostFS(str(tmp_path)), sample_seconds=1.0, sleep=pytest.fail)
    assert result == {
        "available": False,
        "reason": "no RDMA devices (/sys/class/infiniband absent)",
        "interval_s": None,
        "ports": [],
    }
    (tmp_path / IB).mkdir(parents=True)  # the class exists (ib_core loaded) but no device registered
    result = rdma.collect(HostFS(str(tmp_path)), sample_seconds=1.0, sleep=pytest.fail)
    assert result["available"] and result["ports"] == [] and "no RDMA ports" in result["reason"]


def test_roce_over_a_bond(tmp_path):
    """The RoCE LAG as mlx5 registers it: the GID table's netdev is bond0 (gid_attrs/ndevs), not the ports."""
    root = _copy(tmp_path)
    ndevs = root / IB / "mlx5_bond_0/ports/1/gid_attrs/ndevs"
    ndevs.mkdir(parents=True)
    for index in ("0", "1", "2", "3"):
        (ndevs / index).write_text("bond0\n")
    (root / "sys/class/net/bond0").mkdir(parents=True)
    (root / "sys/class/net/bond0/flags").write_text("0x1403\n")  # IFF_UP | IFF_MASTER | ...
    bond = _ports(rdma.collect(HostFS(str(root)), sample_seconds=0))["mlx5_bond_0/1"]
    assert (bond["netdevs"], bond["netdev_up"]) == (["bond0"], True)
    (root / "sys/class/net/bond0/flags").write_text("0x1402\n")  # ip link set bond0 down
    assert _ports(rdma.collect(HostFS(str(root)), sample_seconds=0))["mlx5_bond_0/1"]["netdev_up"] is False


def test_an_infiniband_port_lists_its_functions_netdevs_not_gids(tmp_path):
    root = _copy(tmp_path)
    (root / IB / "mlx5_0/device/net/ibp24s0").mkdir(parents=True)
    (root / IB / "mlx5_0/ports/1/gid_attrs/ndevs").mkdir(parents=True)
    (root / IB / "mlx5_0/ports/1/gid_attrs/ndevs/0").write_text("ignored\n")  # IB GIDs have no netdev
    port = _ports(rdma.collect(HostFS(str(root)), sample_seconds=0))["mlx5_0/1"]
    assert (port["netdevs"], port["netdev_up"]) == (["ibp24s0"], None)


def test_hostile_and_odd_files_are_reported_never_raised(tmp_path):
    root = _copy(tmp_path)
    port = root / IB / "mlx5_0/ports/1"
    (port / "state").write_bytes(b"\xff\xfe 4: ACT\x1b[31mIVE\n")
    (port / "phys_state").write_text("")
    (port / "rate").write_text("unknown\n")
    (port / "link_layer").write_text("Infini\u202eBand" + "x" * 5000 + "\n")
    (port / "counters/symbol_error").write_text("N/A (no PMA)\n")
    (port / "counters/link_downed").write_text("-1\n")
    (root / IB / "mlx5_0/fw_ver").write_bytes(b"28.41\x00.1000\n")
    (root / IB / "mlx5_0/ports/x1").mkdir()  # not a port number
    (root / IB / "bad name;rm -rf").mkdir()  # not a device name the kernel would register
    result = rdma.collect(HostFS(str(root)), sample_seconds=0)
    ports = _ports(result)
    assert "mlx5_0/x1" not in ports and not any(name.startswith("bad") for name in ports)
    p = ports["mlx5_0/1"]
    assert p["state_code"] is None and p["state"].isprintable() and "\x1b" not in p["state"]
    assert p["phys_state"] is None and p["rate_gbps"] is None and p["width"] is None
    assert len(p["link_layer"]) <= 64 and "\u202e" not in p["link_layer"]
    assert p["unreadable"] == {"symbol_error": "not a number: 'N/A (no PMA)'", "link_downed": "not a number: '-1'"}
    assert p["counters"]["symbol_error"] is None and "symbol_error" not in p["saturated"]
    assert "\x00" not in p["fw_ver"]


def test_counter_files_a_driver_does_not_have_are_left_out(tmp_path):
    root = _copy(tmp_path)
    (root / IB / "mlx5_0/ports/1/counters/VL15_dropped").unlink()
    port = _ports(rdma.collect(HostFS(str(root)), sample_seconds=0))["mlx5_0/1"]
    assert "VL15_dropped" not in port["counters"] and "VL15_dropped" not in port["unreadable"]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("400 Gb/sec (4X NDR)", (400.0, "4X", "NDR")),
        ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
        ("53.125 Gb/sec (1X NDR)", (53.125, "1X", "NDR")),
        ("100 Gb/sec (2X HDR)\n", (100.0, "2X", "HDR")),
        ("10 Gb/sec", (10.0, None, None)),
        ("", (None, None, None)),
        (None, (None, None, None)),
    ],
)
def test_rate_strings(text, parsed):
    assert rdma.parse_rate(text) == parsed


# ---------------------------------------------------------------- the report


def test_the_html_report_shows_each_port(tmp_path):
    root = _copy(tmp_path)
    (root / IB / "mlx5_4/ports/1/state").write_text("1: DOWN\n")
    (root / IB / "mlx5_4/ports/1/phys_state").write_text("3: Disabled\n")
    facts = rdma.collect(HostFS(str(root)), sample_seconds=0)
    facts["ports"][0]["netdevs"] = ["<script>alert(1)</script>"]
    report = copy.deepcopy(load("sample-v1.json"))
    report["hosts"]["iad-h100-03"].setdefault("facts", {})["rdma"] = facts
    report["hosts"]["sg-a100-01"].setdefault("facts", {})["rdma"] = rdma.collect(HostFS(str(tmp_path / "none")), 0)
    page = report_html.render_html(report)
    details = parse(page).find("section", data_host="iad-h100-03").find("details", class_="rdma")
    assert details.find("summary").all_text() == "RDMA ports (8 of 9 up)"
    rows = [[td.all_text() for td in tr.iter("td")] for tr in details.find("tbody").iter("tr")]
    assert rows[2][:4] == ["mlx5_4/1", "DOWN / Disabled", "400 Gb/sec (4X NDR)", "InfiniBand"]
    assert rows[1][5] == "saturated: excessive_buffer_overrun_errors, link_downed; read once"
    assert "<script>alert(1)</script>" not in page and page.count("<script>") == 1
    none = parse(page).find("section", data_host="sg-a100-01").find("details", class_="rdma")
    assert none.attrs["data-rdma"] == "unavailable" and "no RDMA devices" in none.all_text()
    assert parse(page).find("section", data_host="fra-a100-02").find("details", class_="rdma") is None
