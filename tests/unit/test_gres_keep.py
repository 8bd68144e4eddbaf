"""`gpufleet topology --gres` never drops the GPU lines of a node it did not read (issue 29 point 2): a host that
was unreachable, failed or answered without topology keeps its lines of the previous file, and so does a node of
that file outside the run's --limit; a previous file with lines whose node cannot be told is left alone while a host
is unread. The real fragment writer into real files under a temp directory; the hosts' results are
``collect``'s shape, made from runner.HostResult as the playbook run would give them."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as view

from gpufleet.commands import topology as command
from gpufleet.runner import HostResult, RunResult

LINE = "Name=gpu Type=h100 File=/dev/nvidia{} Cores=0-27"


def _topo(gpus: int) -> dict:
    return {"available": True, "gres": [LINE.format(i) for i in range(gpus)], "matrix": {}}


def _gpu_lines(path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]


def _previous(tmp_path, **nodes: int):
    target = tmp_path / "gres.conf"
    target.write_text(
        "# gres.conf fragment written by gpufleet topology (earlier)\n"
        + "".join(f"NodeName={name} {LINE.format(i)}\n" for name, gpus in nodes.items() for i in range(gpus))
    )
    return target


def test_an_unread_host_keeps_its_lines_and_is_named(tmp_path):
    target = _previous(tmp_path, g1=4, g2=8)
    before = _gpu_lines(target)
    notes: list[str] = []
    command.write_gres(str(target), {"g1": _topo(4)}, unread={"g2": "unreachable"}, notes=notes)
    after = _gpu_lines(target)
    assert len(after) == len(before) == 12
    assert [ln for ln in after if ln.startswith("NodeName=g2 ")] == [ln for ln in before if "NodeName=g2 " in ln]
    assert "# g2: not read (unreachable): 8 line(s) kept from the previous file" in target.read_text()
    assert notes == [f"g2: not read (unreachable): 8 previous line(s) kept in {target}"]


def test_a_run_that_reads_nothing_leaves_every_gpu_line(tmp_path):
    # The case: `topology -l HOST --gres FILE` with HOST unreadable wrote a file of comments only.
    target = _previous(tmp_path, g1=4, g2=8)
    before = _gpu_lines(target)
    command.write_gres(str(target), {}, unread={"g1": "failed"})
    assert _gpu_lines(target) == before


def test_a_node_outside_the_limit_keeps_its_lines_and_a_read_host_gets_its_new_ones(tmp_path):
    target = _previous(tmp_path, g1=4, g9=2)
    notes: list[str] = []
    command.write_gres(str(target), {"g1": _topo(2)}, notes=notes)  # g1 read: 2 GPUs now, its own business
    nodes = [ln.split()[0] for ln in _gpu_lines(target)]
    assert nodes == ["NodeName=g1"] * 2 + ["NodeName=g9"] * 2
    assert notes == [f"g9: not read (not in this run): 2 previous line(s) kept in {target}"]


def test_every_host_read_replaces_the_file(tmp_path):
    target = _previous(tmp_path, g1=4, g2=8)
    notes: list[str] = []
    command.write_gres(str(target), {"g1": _topo(1), "g2": _topo(1)}, notes=notes)
    assert [ln.split()[0] for ln in _gpu_lines(target)] == ["NodeName=g1", "NodeName=g2"] and notes == []


def test_lines_of_no_known_node_are_not_dropped_while_a_host_is_unread(tmp_path):
    target = tmp_path / "gres.conf"
    target.write_text("Name=gpu File=/dev/nvidia0\nNodeName=g1 " + LINE.format(0) + "\n")
    before = target.read_text()
    with pytest.raises(view.GresError, match=r"1 line\(s\) not in gpufleet's NodeName= form .* \(g2\)"):
        command.write_gres(str(target), {"g1": _topo(1)}, unread={"g2": "unreachable"})
    assert target.read_text() == before
    command.write_gres(str(target), {"g1": _topo(1), "g2": _topo(1)})  # every host read: the file is gpufleet's
    assert [ln.split()[0] for ln in _gpu_lines(target)] == ["NodeName=g1", "NodeName=g2"]


def test_a_directory_leaves_an_unread_hosts_file_alone(tmp_path):
    out = tmp_path / "gres"
    out.mkdir()
    (out / "g2.gres.conf").write_text(f"NodeName=g2 {LINE.format(0)}\n")
    notes: list[str] = []
    written = command.write_gres(str(out), {"g1": _topo(1)}, unread={"g2": "failed"}, notes=notes)
    assert written == [out / "g1.gres.conf"]
    assert (out / "g2.gres.conf").read_text() == f"NodeName=g2 {LINE.format(0)}\n"
    assert notes == [f"g2: not read (failed): {out / 'g2.gres.conf'} left as it was"]


def test_a_host_that_answered_without_topology_counts_as_unread():
    ok, blind, down = HostResult("a"), HostResult("b"), HostResult("c", status="unreachable", message="ssh: timeout")
    ok.record("t", command.TOPOLOGY_ACTION, {"topology": _topo(1)})
    blind.record("t", command.TOPOLOGY_ACTION, {"topology": {"available": False, "error": "no /sys/bus/pci"}})
    down.record("t", command.TOPOLOGY_ACTION, {"unreachable": True})
    hosts = command.collect(RunResult(rc=4, status="failed", hosts={"a": ok, "b": blind, "c": down}), ["a", "b", "c"])
    assert command.unread_why(hosts) == {"b": "no topology: no /sys/bus/pci", "c": "unreachable"}
