"""The topology views (plugin_utils/report/topology.py): the matrix as `nvidia-smi topo -m` lays it out, the
bindings, the gres.conf fragment; the HTML report's per-host topology section; `gpufleet topology`'s pieces that
need no host (results by module, --gres files). The facts are hand-made in the shape of module_utils/topology.py
(issue 17's design): four GPUs of an HGX H100 board on two sockets, two NICs, and a cloud VM with a flat tree."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as view
from report_fixtures import load
from test_report_html import parse

from gpufleet import cli
from gpufleet.commands import topology as command
from gpufleet.runner import HostResult, RunResult

REPO = Path(__file__).resolve().parents[2]


def _gpu(index, bus, numa, cores, siblings, path, peers):
    return {
        "index": index,
        "bus_id": bus,
        "numa_node": numa,
        "local_cpus": f"{cores},{siblings}",
        "cores": cores,
        "siblings": siblings,
        "path": path,
        "nvlink": {"links": 18, "peers": peers, "via_nvswitch": True},
    }


def _hgx() -> dict:
    """GPU0/1 and mlx5_0 under one switch (socket 0), GPU2/3 and mlx5_1 under one switch (socket 1); NVSwitch."""
    s0, s1 = ("0-55", "112-167"), ("56-111", "168-223")
    gpus = [
        _gpu(0, "0000:18:00.0", 0, *s0, ["0000:00:01.0", "0000:16:01.0", "0000:18:00.0"], {"1": 18, "2": 18, "3": 18}),
        _gpu(1, "0000:2a:00.0", 0, *s0, ["0000:00:01.0", "0000:16:02.0", "0000:2a:00.0"], {"0": 18, "2": 18, "3": 18}),
        _gpu(2, "0000:9a:00.0", 1, *s1, ["0000:80:01.0", "0000:98:01.0", "0000:9a:00.0"], {"0": 18, "1": 18, "3": 18}),
        _gpu(3, "0000:ab:00.0", 1, *s1, ["0000:80:01.0", "0000:98:02.0", "0000:ab:00.0"], {"0": 18, "1": 18, "2": 18}),
    ]
    near = {0: "mlx5_0", 1: "mlx5_0", 2: "mlx5_1", 3: "mlx5_1"}
    matrix = {}
    for g in range(4):
        row = {f"GPU{p}": ("X" if p == g else "NV18") for p in range(4)}
        row["mlx5_0"] = "PIX" if g < 2 else "SYS"
        row["mlx5_1"] = "PIX" if g >= 2 else "SYS"
        matrix[f"GPU{g}"] = row
    return {
        "available": True,
        "error": None,
        "flat": False,
        "flat_reason": None,
        "numa_nodes": {"0": {"cpus": "0-55,112-167"}, "1": {"cpus": "56-111,168-223"}},
        "gpus": gpus,
        "nics": [
            {"name": "ibp24s0", "device": "mlx5_0", "kind": "infiniband", "bus_id": "0000:18:00.1", "numa_node": 0},
            {"name": "ibp154s0", "device": "mlx5_1", "kind": "infiniband", "bus_id": "0000:9a:00.1", "numa_node": 1},
        ],
        "matrix": matrix,
        "bindings": [
            {
                "gpu": g["index"],
                "cpus": g["local_cpus"],
                "numactl": f"numactl --cpunodebind={g['numa_node']} --membind={g['numa_node']}",
                "taskset": f"taskset -c {g['local_cpus']}",
                "nics": [near[g["index"]], near[3 - g["index"]]],
                "nic": near[g["index"]],
            }
            for g in gpus
        ],
        "gres": [
            f"Name=gpu Type=h100 File=/dev/nvidia{g} Cores={'0-55' if g < 2 else '56-111'} "
            f"Links={','.join('-1' if p == g else '18' for p in range(4))}"
            for g in range(4)
        ],
    }


def _vm() -> dict:
    """An Azure-ND-like VM: GPUs and NICs on a flat bus, categories from NUMA only."""
    topo = _hgx()
    topo.update(flat=True, flat_reason="Hyper-V vmbus: no PCIe switch above the GPUs")
    for row in topo["matrix"].values():
        row["mlx5_0"] = "NODE" if row["mlx5_0"] == "PIX" else row["mlx5_0"]
        row["mlx5_1"] = "NODE" if row["mlx5_1"] == "PIX" else row["mlx5_1"]
    return topo


# ------------------------------------------------------------------------------------------------ terminal


def test_matrix_is_laid_out_as_nvidia_smi_topo_m():
    assert view.render_matrix(_hgx()).splitlines() == [
        "      GPU0  GPU1  GPU2  GPU3  NIC0  NIC1  CPU Affinity    NUMA Affinity",
        "GPU0  X     NV18  NV18  NV18  PIX   SYS   0-55,112-167    0",
        "GPU1  NV18  X     NV18  NV18  PIX   SYS   0-55,112-167    0",
        "GPU2  NV18  NV18  X     NV18  SYS   PIX   56-111,168-223  1",
        "GPU3  NV18  NV18  NV18  X     SYS   PIX   56-111,168-223  1",
    ]
    assert view.render_nics(_hgx()).splitlines() == [
        "NIC Legend:",
        "  NIC0: mlx5_0 (ibp24s0, infiniband, 0000:18:00.1, NUMA 0)",
        "  NIC1: mlx5_1 (ibp154s0, infiniband, 0000:9a:00.1, NUMA 1)",
    ]


def test_gpus_are_ordered_by_index_not_as_text():
    topo = {"matrix": {f"GPU{i}": {f"GPU{j}": "X" if i == j else "SYS" for j in (10, 2, 1)} for i in (10, 2, 1)}}
    table = view.matrix_table(topo)
    assert [r["name"] for r in table["rows"]] == ["GPU1", "GPU2", "GPU10"]
    assert table["columns"] == ["GPU1", "GPU2", "GPU10"]
    assert table["rows"][2]["cells"] == ["SYS", "SYS", "X"]


def test_host_section_has_matrix_legend_and_bindings():
    text = view.render_host("gpu01", {"status": "ok", "topology": _hgx()})
    assert text.startswith("== gpu01 ==\n      GPU0")
    assert "NOTE" not in text
    for code in ("X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS"):
        assert f"\n  {code:<4} = " in text
    lines = text.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("  GPU0 ")))
    assert lines[first : first + 3] == [
        "  GPU0 0000:18:00.0  NUMA 0  cores 0-55 + SMT siblings 112-167  NIC mlx5_0 (then mlx5_1)",
        "      numactl --cpunodebind=0 --membind=0",
        "      taskset -c 0-55,112-167",
    ]
    assert "  GPU2 0000:9a:00.0  NUMA 1  cores 56-111 + SMT siblings 168-223  NIC mlx5_1 (then mlx5_0)" in lines


def test_a_flat_tree_says_so():
    text = view.render_host("nd-vm", {"status": "ok", "topology": _vm()})
    assert (
        "NOTE: PCIe tree flattened (a virtual machine): Hyper-V vmbus: no PCIe switch above the GPUs; the categories "
        "come from the NUMA nodes alone (NODE/SYS)\n"
    ) in text
    assert "GPU0  X     NV18  NV18  NV18  NODE  SYS" in text
    reader_says = view.flat_note({**_vm(), "flat_reason": "VMBus host bridges; categories are NUMA only (NODE/SYS)"})
    assert (
        reader_says
        == "PCIe tree flattened (a virtual machine): VMBus host bridges; categories are NUMA only (NODE/SYS)"
    )


def test_a_host_without_topology_says_why():
    down = view.render_host("gone", {"status": "unreachable", "message": "ssh: timed out"})
    assert down == "== gone ==\nunreachable: ssh: timed out"
    unavailable = {"status": "ok", "topology": {"available": False, "error": "/sys/bus/pci not readable"}}
    assert view.render_host("h", unavailable) == "== h ==\ntopology unavailable: /sys/bus/pci not readable"


def test_bindings_name_the_nearest_nics_and_count_the_rest():
    topo = _hgx()
    topo["bindings"][0]["nics"] = [f"mlx5_{i}" for i in range(12)]
    line = view.render_bindings(topo).splitlines()[1]
    assert line.endswith("NIC mlx5_0 (then mlx5_1, mlx5_2, mlx5_3, +8 more)")


def test_host_values_cannot_drive_the_terminal():
    topo = _hgx()
    topo["matrix"]["GPU0"]["\x1b[2J"] = "PIX"
    topo["bindings"][0]["numactl"] = "numactl\n== forged =="
    text = view.render_host("h\x1b]0;x\x07", {"status": "ok", "topology": topo})
    assert "\x1b" not in text and "\x07" not in text
    assert "\n== forged ==" not in text and "numactl\\n== forged ==" in text


# ------------------------------------------------------------------------------------------------ gres.conf


def test_gres_lines_name_the_node_one_line_per_gpu():
    assert view.gres_lines("gpu01", _hgx()) == [
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55 Links=-1,18,18,18",
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia1 Cores=0-55 Links=18,-1,18,18",
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia2 Cores=56-111 Links=18,18,-1,18",
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia3 Cores=56-111 Links=18,18,18,-1",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "Name=gpu File=/dev/nvidia0\nNodeName=other Name=gpu File=/dev/nvidia9",  # a forged second line
        "Name=gpu File=/dev/nvidia0 # comment",
        "Name=mps Count=100",
        "Name=gpu",
        42,
    ],
)
def test_gres_lines_drop_what_gres_conf_would_misread(line):
    topo = _hgx()
    topo["gres"] = [line]
    warnings: list[str] = []
    assert view.gres_lines("gpu01", topo, warnings) == []
    assert len(warnings) == 1 and warnings[0].startswith("gpu01: gres line ") and "dropped" in warnings[0]


@pytest.mark.parametrize("name", ["gpu 01", "gpu01#x", "NodeName=x", "", "-gpu"])
def test_gres_lines_refuse_a_host_name_slurm_cannot_carry(name):
    with pytest.raises(view.GresError, match="not a node name"):
        view.gres_lines(name, _hgx())


def test_gres_fragment_sorts_hosts_and_names_those_without_lines():
    no_gpu = {"available": True, "gres": [], "matrix": {}}
    text = view.gres_fragment(
        {"b02": _hgx(), "a01": no_gpu, "c03": {"available": False, "error": "no NVML"}}, "2026-12-01T00:00:00+00:00"
    )
    lines = text.splitlines()
    assert lines[0] == "# gres.conf fragment written by gpufleet topology (2026-12-01T00:00:00+00:00)"
    body = [line for line in lines if not line.startswith("# ") or ":" in line.split()[1]]
    assert body[0] == "# a01: no lines (no GPU)"
    assert [line.split()[0] for line in body[1:5]] == ["NodeName=b02"] * 4
    assert body[5] == "# c03: no lines (no NVML)"
    assert text.endswith("\n")


# ------------------------------------------------------------------------------------------------ HTML


@pytest.fixture(scope="module")
def topo_report():
    report = copy.deepcopy(load("sample-v1.json"))
    report["hosts"]["iad-h100-03"].setdefault("facts", {})["topology"] = _hgx()
    vm = _vm()
    vm["nics"][0]["name"] = vm["bindings"][0]["nic"] = "<script>alert(1)</script>"
    report["hosts"]["sg-a100-01"].setdefault("facts", {})["topology"] = vm
    return report


def _section(page, host):
    return parse(page).find("section", data_host=host)


def test_html_host_has_a_collapsible_topology_section(topo_report):
    page = report_html.render_html(topo_report)
    details = _section(page, "iad-h100-03").find("details", class_="topology")
    assert details is not None and details.attrs["data-topology"] == "available" and "open" not in details.attrs
    assert details.find("summary").all_text() == "GPU topology (4 GPUs, 2 NICs)"
    matrix = details.find("table", class_="topo-matrix")
    head = [th.all_text() for th in matrix.find("thead").iter("th")]
    assert head == ["", "GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0", "mlx5_1", "CPU affinity", "NUMA"]
    row = [r for r in matrix.find("tbody").iter("tr")][2]
    cells = [td for td in row.iter("td")]
    assert [(td.all_text(), td.attrs["class"]) for td in cells[:6]] == [
        ("NV18", "topo-nv"),
        ("NV18", "topo-nv"),
        ("X", "topo-self"),
        ("NV18", "topo-nv"),
        ("SYS", "topo-sys"),
        ("PIX", "topo-pix"),
    ]
    bindings = details.find("table", class_="topo-bindings").all_text()
    assert "numactl --cpunodebind=1 --membind=1" in bindings and "taskset -c 56-111,168-223" in bindings


def test_html_flat_tree_note_and_hostile_values_escaped(topo_report):
    page = report_html.render_html(topo_report)
    details = _section(page, "sg-a100-01").find("details", class_="topology")
    assert "PCIe tree flattened" in details.find("p", class_="banner topo-flat").all_text()
    assert details.find("summary").all_text() == "GPU topology (4 GPUs, 2 NICs, flattened PCIe tree)"
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # the page's own script only


def test_html_host_without_topology_facts_has_no_section(topo_report):
    page = report_html.render_html(topo_report)
    assert _section(page, "fra-a100-02").find("details", class_="topology") is None
    plain = report_html.render_html(load("sample-v1.json"))
    assert 'class="topology"' not in plain


def test_html_unavailable_topology_says_why():
    report = copy.deepcopy(load("sample-v1.json"))
    report["hosts"]["iad-h100-03"].setdefault("facts", {})["topology"] = {"available": False, "error": "no sysfs"}
    details = _section(report_html.render_html(report), "iad-h100-03").find("details", class_="topology")
    assert details.attrs["data-topology"] == "unavailable"
    assert "Topology unavailable: no sysfs" in details.all_text()


# ------------------------------------------------------------------------------------------------ the command


def test_topology_command_is_registered_with_its_options(capsys):
    args = cli.build_parser().parse_args(["topology", "-i", "inv.yml", "-l", "g1", "--gres", "d/", "--json", "t.json"])
    assert args.func is command.run
    assert (args.inventory, args.limit, args.gres, args.json) == (["inv.yml"], "g1", "d/", "t.json")


def test_playbook_calls_the_module_the_cli_reads_and_the_cli_names_no_task():
    plays = yaml.safe_load((REPO / "playbooks" / "topology.yml").read_text())
    tasks = plays[0]["tasks"]
    assert [t for t in tasks if command.TOPOLOGY_ACTION in t]
    source = (REPO / "src" / "gpufleet" / "commands" / "topology.py").read_text()
    assert not [t["name"] for t in tasks if t["name"] in source]


def _result(**hosts: HostResult) -> RunResult:
    return RunResult(rc=0, status="successful", hosts=hosts)


def test_collect_reads_results_by_module_whatever_the_task_is_called():
    ok = HostResult("a")
    ok.record("Whatever it is called", command.TOPOLOGY_ACTION, {"changed": False, "topology": _hgx()})
    failed = HostResult("b", status="failed", message="gpu_topology: boom")
    failed.record("x", command.TOPOLOGY_ACTION, {"failed": True, "msg": "boom"})
    other = HostResult("c")
    other.record("Read topology", "ansible.builtin.debug", {"topology": _hgx()})  # not the module: not read
    hosts = command.collect(_result(a=ok, b=failed, c=other), ["a", "b", "c", "d"])
    assert hosts["a"] == {"status": "ok", "message": None, "topology": _hgx()}
    assert hosts["b"] == {"status": "failed", "message": "gpu_topology: boom"}
    assert hosts["c"]["status"] == "missing" and hosts["d"]["status"] == "missing"


def test_gres_to_a_file_holds_every_host_and_replaces_the_old_one(tmp_path):
    target = tmp_path / "gres.conf"
    target.write_text("old\n")
    written = command.write_gres(str(target), {"g2": _hgx(), "g1": _hgx()})
    assert written == [target]
    lines = target.read_text().splitlines()
    assert [line.split()[0] for line in lines if not line.startswith("#")] == ["NodeName=g1"] * 4 + ["NodeName=g2"] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gres.conf"]  # no temp file left


def test_gres_to_a_directory_writes_one_file_per_host(tmp_path):
    out = tmp_path / "gres"
    written = command.write_gres(str(out) + "/", {"g2": _hgx(), "g1": _hgx()})
    assert written == [out / "g1.gres.conf", out / "g2.gres.conf"]
    assert all(line.startswith("NodeName=g1 ") for line in (out / "g1.gres.conf").read_text().splitlines()[2:])


def test_gres_writes_nothing_when_one_host_name_is_bad(tmp_path):
    with pytest.raises(view.GresError):
        command.write_gres(str(tmp_path) + "/", {"a1": _hgx(), "b 2": _hgx()})
    assert list(tmp_path.iterdir()) == []


def test_nics_follow_the_reader_order_and_are_listed():
    topo = _hgx()
    topo["nics"] = [dict(topo["nics"][1], device="mlx5_2"), dict(topo["nics"][0], device="mlx5_10", speed_mbps=400000)]
    for row in topo["matrix"].values():
        row["mlx5_2"], row["mlx5_10"] = row.pop("mlx5_1"), row.pop("mlx5_0")
    assert view.matrix_table(topo)["columns"][4:] == ["mlx5_2", "mlx5_10"]  # as listed, not as text (10 < 2)
    text = view.render_nics(topo)
    assert text.splitlines() == [
        "NIC Legend:",
        "  NIC0: mlx5_2 (ibp154s0, infiniband, 0000:9a:00.1, NUMA 1)",
        "  NIC1: mlx5_10 (ibp24s0, infiniband, 400 Gb/s, 0000:18:00.1, NUMA 0)",
    ]
    page = report_html.render_html(
        {**load("sample-v1.json"), "hosts": {"h": {"status": "ok", "facts": {"topology": topo}}}}
    )
    assert "mlx5_10</span> = ibp24s0 (infiniband, 400 Gb/s, 0000:18:00.1, NUMA 0)" in page
