"""`make device-check`'s script end to end, without a GPU: scripts/device_check.py as its own process, with the
simulated libnvidia-ml.so.1 standing in for the driver (its state set to what a recorded A100 `nvidia-smi -q -x`
shows, tests/fixtures/nvidia-smi-xml/) and an `nvidia-smi` on PATH that prints that recorded output and a
one-GPU `topo -m`. Every step runs for real on localhost (gpu_info through Ansible, gpufleet audit, gpufleet
topology, the probe playbook, the watch checker zipapp with --print).

One GPU field is made to differ (the power limit in the simulated state): the run must exit 1, list exactly that
field (and the enforced limit that follows it) as MISMATCH, match everything else, and write its table files only
under --out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import simulators

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024

sys.path.insert(0, str(REPO / "tests" / "unit"))
from test_device_check import A100_STATE, A100_UNSET  # noqa: E402

# The layout nvidia-smi r535+ prints for one GPU (an empty cell before GPU NUMA ID, as in public recordings).
TOPO = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-55,112-167\t0\t\tN/A\n\nLegend:\n\n  X = Self\n"


def test_device_check_runs_every_step_and_reports_the_difference(sim_lib, tmp_path):
    profiles = simulators.profiles()
    state = profiles.build_state("a100", gpus=1, driver="535", overrides=A100_STATE + [
        "gpu.0.power_limit_mw=450000", "gpu.0.enforced_power_limit_mw=450000"])  # fmt: skip
    for key in A100_UNSET:
        state.pop(key, None)
    profiles.write_state(tmp_path / "nvml.state", state)
    state_text = (tmp_path / "nvml.state").read_text()
    (tmp_path / "q.xml").write_text((REPO / "tests" / "fixtures" / "nvidia-smi-xml" / "a100-sxm4-v12.xml").read_text())
    (tmp_path / "topo.txt").write_text(TOPO)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "-q -x") cat {tmp_path / "q.xml"} ;;\n'
        f'  "topo -m") cat {tmp_path / "topo.txt"} ;;\n'
        '  "-q") echo "==============NVSMI LOG==============" ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(tmp_path / "nvml.state")}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "device_check.py"), "--out", str(out), "--probe-seconds", "1",
         "--repeat", "1"],
        capture_output=True, text=True, env=env, timeout=400, check=False, cwd=str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = json.loads((out / "table.json").read_text())
    assert [s["step"] for s in table["steps"] if not s["ok"]] == [], table["steps"]
    assert {s["step"] for s in table["steps"]} >= {"gpu_info (Ansible)", "gpufleet audit", "gpufleet topology",
                                                   "gpufleet probe", "watch checker --print", "whole check"}
    bad = {r["field"]: (r["gpufleet"], r["nvidia_smi"]) for r in table["rows"] if r["status"] == "MISMATCH"}
    assert bad == {"power.limit_w": ("450", "500"), "power.enforced_limit_w": ("450", "500")}
    fields = {r["field"] for r in table["rows"] if r["status"] == "match"}
    assert {"audit GPU UUIDs", "probe GPU bus ids", "row GPU0", "topology local_cpus", "gpu_info numa_node",
            "uuid", "temperature.shutdown"} <= fields  # fmt: skip
    assert [t["reader"].split(" (")[0] for t in table["timings"]] == [
        "gpufleet nvml.collect", "nvidia-smi -q", "nvidia-smi -q -x"]  # fmt: skip
    assert "| power.limit_w | 450 | 500 | MISMATCH |" in (out / "table.md").read_text()
    assert "1 mismatch" not in proc.stderr and "2 mismatch" in proc.stderr
    # Read-only: the simulated GPUs' state (which any NVML setter rewrites) is unchanged, and nothing but the output
    # directory was written where the run started.
    assert (tmp_path / "nvml.state").read_text() == state_text
    assert {p.name for p in tmp_path.iterdir()} - {"nvml.state.lock"} == {"bin", "nvml.state", "out", "q.xml",
                                                                          "topo.txt"}
