"""The audit module's result shapes through real Ansible (issue 27 §4), old against new on the same inputs.

The demo fleet and the reference hosts are audited twice in one play, with playbooks/audit.yml's own arguments: in
the default shape (``full``: what a user's play registers and reads) and in the ``compact`` one (one JSON string,
what playbooks/audit.yml registers). A user's play still reads ``findings`` from the default shape; the reports built
from the compact results (decoded once by ``fleet.expand``) are byte for byte those built from the full ones, in
every format, through the CLI's reading of the results (ansible-runner events) and through the ``audit_report``
action (hostvars). Also: the host's reads run inside the GPUs' counter sample window (``nvml.collect``'s
``meanwhile``), so an audit takes about one window plus the GPU reads."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import labkit
import pytest
import simfleet
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import reference  # noqa: E402

pytestmark = pytest.mark.integration
FILES = ("json", "html", "junit", "prometheus")
STARTED = "2026-12-07T10:00:00+00:00"


def _audit_task(name: str, register: str, **extra) -> dict:
    """playbooks/audit.yml's audit task, its arguments as shipped (``result`` aside)."""
    shipped = yaml.safe_load((REPO / "playbooks" / "audit.yml").read_text())[0]["tasks"]
    task = next(t for t in shipped if "gpufleet.tuning.audit" in t)
    args = {k: v for k, v in task["gpufleet.tuning.audit"].items() if k != "result"}
    return {"name": name, "gpufleet.tuning.audit": {**args, **extra}, "register": register}


def _report_task(name: str, var: str, shape: str) -> dict:
    args = {"out_dir": "{{ reports }}/" + shape, "result_var": var, "stamp": "run", "started_at": STARTED}
    return {"name": name, "gpufleet.tuning.audit_report": args, "run_once": True, "delegate_to": "localhost"}


@pytest.fixture(scope="module")
def audited(sim_lib, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shapes")
    demo_inventory = simfleet.demo_inventory(tmp / "demo", sim_lib)
    built = reference.build(tmp / "reference")
    reference_inventory = reference.inventory(tmp / "reference.yml", built, sim_lib.parent)
    user_reads = {
        "name": "A play of one's own reads the registered findings (the default shape)",
        "ansible.builtin.assert": {
            "that": [
                "audit_full.findings | length > 40",
                "audit_full.findings | selectattr('status', 'eq', 'fail') | list | length"
                " == audit_full.summary.by_status.fail",
                "audit_full.facts.gpu.gpu_count == (audit_compact.audit_json | from_json).facts.gpu.gpu_count",
                "audit_compact.findings is not defined",
            ]
        },
    }
    tasks = [
        _audit_task("Audit, default shape", "audit_full"),
        _audit_task("Audit, compact shape", "audit_compact", result="compact"),
        user_reads,
        _report_task("Report from the full results", "audit_full", "full"),
        _report_task("Report from the compact results", "audit_compact", "compact"),
    ]
    play = labkit.write_play(
        tmp, labkit.play("Both shapes", tasks=tasks, environment="{{ gpufleet_environment | default({}) }}")
    )
    # One run per fleet (the demo inventory's policy names a site for its own groups only); one report per run and
    # shape, and one set of results.
    results = {}
    for fleet_name, inventory in (("demo", demo_inventory), ("reference", reference_inventory)):
        out = tmp / fleet_name
        run = run_playbook(str(play), str(inventory), extravars={"reports": str(out)})
        results[fleet_name] = run
    return {"tmp": tmp, "results": results, "hosts": sorted(simfleet.EXPECTED) + sorted(built)}


def _hosts(audited) -> dict:
    return {name: h for run in audited["results"].values() for name, h in run.hosts.items()}


def _write(results: dict, out: Path, run: dict | None = None) -> tuple[dict, dict[str, bytes]]:
    report = fleet.build_report(results, started_at=STARTED)
    if run is not None:
        report["run"] = copy.deepcopy(run)  # a run's id and finishing time are its own
    files = writer.write_all(report, out, stamp="run")
    return report, {key: files[key].read_bytes() for key in FILES}


def test_every_host_answered_in_both_shapes_and_the_users_play_read_findings(audited):
    hosts = _hosts(audited)
    assert sorted(hosts) == sorted(audited["hosts"]) and len(hosts) == 13
    for name, host in hosts.items():
        assert host.status == "ok", f"{name}: {host.message}"
        full, compact = host.results["Audit, default shape"], host.results["Audit, compact shape"]
        assert full["findings"] and "audit_json" not in full
        assert "findings" not in compact and isinstance(compact["audit_json"], str)
        assert host.results["A play of one's own reads the registered findings (the default shape)"]


def test_reports_from_compact_results_are_byte_identical(audited, tmp_path):
    """The CLI's reading (ansible-runner events): every format, byte for byte, old shape against new."""
    hosts = _hosts(audited)
    full = {name: h.results["Audit, default shape"] for name, h in hosts.items()}
    compact = {name: h.results["Audit, compact shape"] for name, h in hosts.items()}
    full_report, full_files = _write(full, tmp_path / "full")
    compact_report, compact_files = _write(compact, tmp_path / "compact", run=full_report["run"])
    assert compact_report == full_report
    assert {h["status"] for h in full_report["hosts"].values()} == {"ok"}
    for key in FILES:
        assert compact_files[key] == full_files[key], key


def test_the_report_action_reads_both_shapes_alike(audited):
    """The audit_report action (hostvars, as playbooks/audit.yml runs it): the same report, run fields aside."""
    for fleet_name, run in audited["results"].items():
        reports = {}
        for shape in ("full", "compact"):
            report = json.loads((audited["tmp"] / fleet_name / shape / "run" / "report.json").read_text())
            report.pop("run")
            reports[shape] = report
        assert reports["compact"] == reports["full"], fleet_name
        assert reports["full"]["summary"]["hosts"]["ok"] == len(run.hosts)
        actions = [
            h.results[f"Report from the {shape} results"]
            for shape in ("full", "compact")
            for h in run.hosts.values()
            if f"Report from the {shape} results" in h.results
        ]
        assert len(actions) == 2
        full, compact = ({k: a[k] for k in ("summary", "failing", "worst_severity", "verdict")} for a in actions)
        assert compact == full


def test_other_reads_run_inside_the_gpus_sample_window(sim_lib, tmp_path, monkeypatch):
    """nvml.collect's meanwhile runs after every GPU's first counter read and before the wait: a second of other
    reads inside a one-second window adds nothing to the collection's time, where after the window it adds a
    second."""
    built = reference.build(tmp_path / "ref", hosts=["dgx-h100"])["dgx-h100"]
    monkeypatch.setenv("FAKE_NVML_STATE", str(Path(built["dir"]) / "nvml.state"))
    nv = nvml.load_pynvml(str(sim_lib))
    fs = HostFS(str(Path(built["dir"]) / "root"))
    calls = []

    def other_reads():
        calls.append(time.monotonic())
        time.sleep(1.0)

    def timed(**kwargs):
        started = time.monotonic()
        driver, gpus = nvml.collect(nv, fs, sample_seconds=1.0, **kwargs)
        return time.monotonic() - started, gpus

    alone, gpus = timed()
    with_reads, gpus_with = timed(meanwhile=other_reads)
    assert len(calls) == 1
    assert len(gpus_with) == len(gpus) == 8
    assert all(g["pcie"]["sample_seconds"] >= 1.0 for g in gpus_with)
    assert with_reads < alone + 0.5, f"{with_reads:.2f} s with a second of other reads, {alone:.2f} s without"
    assert os.environ["FAKE_NVML_STATE"].endswith("nvml.state")
