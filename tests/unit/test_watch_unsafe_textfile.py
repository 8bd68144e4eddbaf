"""The watch runs as root (its timer, and unsandboxed: the role's first run, Slurm's HealthCheckProgram, cron): a
textfile directory another user can write is refused with a journal line that names it, its owner and mode and the
fix, and the run still writes its state file (issue 26). The real checker, on an empty host root; real ownership
(chown to nobody, 65534: root only)."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import checker

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _run(tmp_path, capsys, **watch):
    textfile_dir = tmp_path / "node-exporter"
    textfile_dir.mkdir(mode=0o755)
    os.chown(textfile_dir, NOBODY, NOBODY)
    (tmp_path / "root").mkdir()
    config = {
        "host": "gpu-a1",
        "policy": {
            "watch": {"textfile_dir": str(textfile_dir), "state_file": str(tmp_path / "state" / "s.json"), **watch}
        },
        "audit": {"root": str(tmp_path / "root"), "backend": "nvidia-smi", "nvidia_smi_path": "/nonexistent"},
    }
    path = tmp_path / "watch.json"
    path.write_text(json.dumps(config))
    status = checker.main(["--config", str(path)])
    return status, textfile_dir, capsys.readouterr().out


def test_a_textfile_directory_owned_by_another_user_is_refused_and_the_state_still_written(tmp_path, capsys):
    status, textfile_dir, out = _run(tmp_path, capsys)
    assert status == checker.EXIT_UNKNOWN
    assert os.listdir(textfile_dir) == []
    refused = [line for line in out.splitlines() if "not written" in line]
    assert len(refused) == 1, out
    assert str(textfile_dir) in refused[0] and "uid 65534" in refused[0] and "mode 0755" in refused[0]
    assert "watch.textfile_owner" in refused[0]
    assert json.loads((tmp_path / "state" / "s.json").read_text())["host"] == "gpu-a1"


def test_the_owner_the_policy_names_may_own_the_textfile_directory(tmp_path, capsys):
    _status, textfile_dir, out = _run(tmp_path, capsys, textfile_owner=str(NOBODY))
    assert "not written" not in out
    assert "gpufleet_" in (textfile_dir / checker.TEXTFILE_NAME).read_text()
    assert oct(os.stat(textfile_dir / checker.TEXTFILE_NAME).st_mode & 0o777) == "0o644"
