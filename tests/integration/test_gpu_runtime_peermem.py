"""Role gpu_runtime's opt-in load of nvidia_peermem (tasks/peermem.yml, gpu_runtime_peermem_enabled; what rule
NET-GDR-001 asks for where DMA-BUF does not serve), in check mode with diff on this host: it predicts loading the
module and writing the modules-load file (the file's content as the diff) and changes nothing. Only check mode here:
a real run would load a kernel module into this machine's kernel; on a GPU host modprobe runs once (creates:
/sys/module/nvidia_peermem) and the file is written once (ansible.builtin.copy)."""

from __future__ import annotations

from pathlib import Path

import labkit
import pytest

pytestmark = pytest.mark.integration

PLAY = labkit.play(
    "Peer memory",
    tasks=[
        {
            "name": "Peer memory",
            "ansible.builtin.include_role": {"name": "gpufleet.tuning.gpu_runtime", "tasks_from": "peermem"},
        }
    ],  # fmt: skip
    check_mode=True,
    diff=True,
)


def test_peermem_check_mode_predicts_the_load_and_the_file_and_writes_nothing(tmp_path):
    if Path("/sys/module/nvidia_peermem").exists():
        pytest.skip("nvidia_peermem is loaded on this host: nothing to predict")
    conf = tmp_path / "modules-load.d"
    conf.mkdir()
    labkit.write_inventory(tmp_path, {"h": labkit.local_host(gpu_runtime_modules_load_dir=str(conf))})
    labkit.write_play(tmp_path, PLAY)
    result, changed = labkit.run(tmp_path / "play.yml", tmp_path / "hosts.yml")
    assert result.hosts["h"].status == "ok", result.hosts["h"].message
    assert labkit.changed_tasks(changed) == [
        "Load nvidia_peermem at every boot (NET-GDR-001)",
        "Load nvidia_peermem now (NET-GDR-001)",
    ]
    boot = next(d for d in changed if d["task"] == "Load nvidia_peermem at every boot (NET-GDR-001)")
    diffs = boot["res"]["diff"]
    diffs = diffs if isinstance(diffs, list) else [diffs]
    assert any("nvidia_peermem\n" in (d.get("after") or "") for d in diffs), diffs
    assert list(conf.iterdir()) == []
