"""`gpufleet topology` end to end: the real CLI runs playbooks/topology.yml, the gpu_topology module reads fixture
hosts built by tests/sim/host/pcitree.py (an HGX H100 board, a dual-socket PCIe L40S server, an Azure ND H100 v5 VM
with a flat tree) with unmodified pynvml over the simulated libnvidia-ml.so.1, and the command prints each host's
matrix and bindings and writes the gres.conf fragment(s) and the JSON facts.

What is checked against what: the printed matrix and bindings against the facts the module returned (--json), the
gres.conf lines against the module's own lines with NodeName= added, the exit codes (2 when a host cannot be read,
the others still printed and written)."""

from __future__ import annotations

import json
from pathlib import Path

import labkit
import pytest
import simulators

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
pcitree = simulators.pcitree()
profiles = simulators.profiles()

# host -> (pcitree platform, NVML profile, GPUs)
HOSTS = {
    "hgx01": ("hgx_h100", "h100", 8),
    "l40s01": ("l40s_pcie", "l40s", 4),
    "ndvm01": ("azure_nd_h100_v5", "h100", 8),
}


def _host(tmp: Path, sim_lib: Path, name: str) -> dict:
    platform, profile, gpus = HOSTS[name]
    root = pcitree.build(tmp / name / "root", platform)
    state = tmp / name / "nvml.state"
    profiles.write_state(state, profiles.build_state(profile, gpus, overrides=pcitree.nvml_overrides(platform)))
    return labkit.local_host(
        gpufleet_audit_root=str(root),
        gpufleet_environment={"LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state)},
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, sim_lib):
    tmp = tmp_path_factory.mktemp("topology")
    hosts = {name: _host(tmp, sim_lib, name) for name in HOSTS}
    return tmp, labkit.write_inventory(tmp, hosts)


@pytest.fixture(scope="module")
def run(fleet):
    tmp, inventory = fleet
    out = tmp / "out"
    proc = labkit.gpufleet(
        "topology", "-i", str(inventory), "--gres", str(out / "gres") + "/", "--json", str(out / "topology.json"),
        timeout=300,
    )  # fmt: skip
    return proc, out


def _sections(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("== ") and line.endswith(" =="):
            current = line[3:-3]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def test_every_host_is_read_and_printed(run):
    proc, out = run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads((out / "topology.json").read_text())
    assert sorted(facts) == sorted(HOSTS)
    sections = _sections(proc.stdout)
    assert sorted(sections) == sorted(HOSTS)
    for name, host in facts.items():
        assert host["status"] == "ok", (name, host)
        topo = host["topology"]
        assert topo["available"] and len(topo["gpus"]) == HOSTS[name][2], name
        lines = sections[name]
        # The printed matrix is the module's: one row per device, each cell as the facts have it; NICs are
        # NIC0, NIC1, ... as in nvidia-smi, the NIC Legend names them.
        legend = dict(line.strip().split(" ")[:2] for line in lines if line.startswith("  NIC"))
        names = {label.rstrip(":"): name for label, name in legend.items()}
        header = next(i for i, line in enumerate(lines) if "CPU Affinity" in line)
        columns = [names.get(c, c) for c in lines[header].split()[: len(topo["matrix"])]]
        assert sorted(columns) == sorted(topo["matrix"]), name
        for row in lines[header + 1 : header + 1 + len(topo["matrix"])]:
            label, *cells = row.split()
            assert cells[: len(columns)] == [topo["matrix"][names.get(label, label)][c] for c in columns], (name, row)
        for b in topo["bindings"]:
            assert "      " + b["numactl"] in lines and "      " + b["taskset"] in lines, (name, b)


def test_the_flat_vm_is_named_as_such_and_the_boards_are_not(run):
    proc, _ = run
    sections = _sections(proc.stdout)
    assert any(line.startswith("NOTE: PCIe tree flattened") for line in sections["ndvm01"])
    assert not any(line.startswith("NOTE:") for line in sections["hgx01"] + sections["l40s01"])


def test_gres_directory_holds_one_file_per_host_with_the_module_lines(run):
    _, out = run
    facts = json.loads((out / "topology.json").read_text())
    assert sorted(p.name for p in (out / "gres").iterdir()) == sorted(f"{n}.gres.conf" for n in HOSTS)
    for name, host in facts.items():
        lines = [ln for ln in (out / "gres" / f"{name}.gres.conf").read_text().splitlines() if not ln.startswith("#")]
        assert lines == [f"NodeName={name} {g}" for g in host["topology"]["gres"]], name
        assert len(lines) == HOSTS[name][2]
        assert all(" File=/dev/nvidia" in ln and " Cores=" in ln for ln in lines), lines
    # Links= where NVLink exists (HGX: NVSwitch; the Azure VM's GPUs keep theirs), none on the PCIe L40S server.
    hgx = (out / "gres" / "hgx01.gres.conf").read_text().splitlines()
    assert "NodeName=hgx01 Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55 Links=-1,18,18,18,18,18,18,18" in hgx
    assert " Links=" not in (out / "gres" / "l40s01.gres.conf").read_text()


def test_gres_file_for_a_group_and_limit(fleet, tmp_path):
    _, inventory = fleet
    target = tmp_path / "gres.conf"
    proc = labkit.gpufleet("topology", "-i", str(inventory), "-l", "hgx01,l40s01", "--gres", str(target), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(_sections(proc.stdout)) == ["hgx01", "l40s01"]
    nodes = [ln.split()[0] for ln in target.read_text().splitlines() if not ln.startswith("#")]
    assert nodes == ["NodeName=hgx01"] * 8 + ["NodeName=l40s01"] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gres.conf"]  # written in place, no temp file left


def test_a_host_that_cannot_be_read_exits_2_and_the_others_are_still_written(fleet, tmp_path, sim_lib):
    tmp, inventory = fleet
    broken = labkit.write_inventory(
        tmp_path,
        {
            "hgx01": _host(tmp_path, sim_lib, "hgx01"),
            "broken01": labkit.local_host("/nonexistent/python"),
        },
    )
    target = tmp_path / "gres.conf"
    # Issue 29: the file held broken01's two GPUs; a run that cannot read broken01 keeps them and says so.
    old = [f"NodeName=broken01 Name=gpu Type=a100 File=/dev/nvidia{i} Cores=0-15" for i in range(2)]
    target.write_text("\n".join(["NodeName=hgx01 Name=gpu File=/dev/nvidia0", *old]) + "\n")
    proc = labkit.gpufleet("topology", "-i", str(broken), "--gres", str(target), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "gpufleet: exit 2: no topology from 1 host(s): broken01" in proc.stderr
    assert f"gpufleet: --gres: broken01: not read (failed): 2 previous line(s) kept in {target}" in proc.stderr
    sections = _sections(proc.stdout)
    assert sections["broken01"][0].startswith("failed: ")
    lines = [ln for ln in target.read_text().splitlines() if not ln.startswith("#")]
    assert lines[:2] == old and [ln.split()[0] for ln in lines[2:]] == ["NodeName=hgx01"] * 8


def test_an_inventory_that_does_not_exist_is_a_usage_error(tmp_path):
    proc = labkit.gpufleet("topology", "-i", str(tmp_path / "nope.yml"), timeout=60)
    assert proc.returncode == 3 and "inventory not found" in proc.stderr


def test_policy_keys_given_as_extra_variables_stop_the_playbook_naming_gpufleet_policy_file(fleet, tmp_path):
    """Issue 29: `ansible-playbook playbooks/topology.yml -e @policy.yml` was silently accepted. The topology reads
    no policy: each host's task fails naming the keys and gpufleet_policy_file (what the playbooks that judge take),
    and no topology is returned; gpufleet_policy_file itself (set fleet-wide in an inventory) is no error."""
    from gpufleet.runner import run_playbook

    _, inventory = fleet
    stray = run_playbook("topology.yml", str(inventory), limit="hgx01", extravars={"min_severity": "low", "power": {}})
    host = stray.hosts["hgx01"]
    assert host.status == "failed", host.message
    assert "read by nothing: min_severity, power" in host.message and "gpufleet_policy_file" in host.message
    assert not (host.actions.get("gpufleet.tuning.gpu_topology") or {}).get("topology")
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text("min_severity: low\n")
    named = run_playbook(
        "topology.yml", str(inventory), limit="hgx01", extravars={"gpufleet_policy_file": str(policy_file)}
    )
    assert named.hosts["hgx01"].status == "ok", named.hosts["hgx01"].message
