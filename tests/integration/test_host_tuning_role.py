"""Role host_tuning against a fixture host root: check mode changes nothing, converge fixes every host rule it
owns (verified by re-running the audit on the same root), the second run changes nothing."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import yaml

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim" / "host"))
import mkroot  # noqa: E402

pytestmark = pytest.mark.integration
OWNED = ["HOST-CPU-001", "HOST-CPU-003", "HOST-MEM-002", "HOST-MEM-003", "HOST-MEM-005"]

PLAY = """
- name: Tune
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.tuning.host_tuning
      when: not (audit_only | default(false))
  tasks:
    - name: Audit
      gpufleet.tuning.audit:
        root: "{{ host_tuning_root }}"
        gather: [host]
        sample_seconds: 0
      register: audit
"""


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def _run(tmp: Path, audit_only=False):
    events = []
    extra = {"audit_only": audit_only}
    result = run_playbook(str(tmp / "play.yml"), str(tmp / "hosts.yml"), extravars=extra, on_event=events.append)
    changed = sorted(
        {
            e["event_data"]["task"]
            for e in events
            if e.get("event") == "runner_on_ok" and (e["event_data"].get("res") or {}).get("changed")
        }
    )
    host = result.hosts["h"]
    assert host.status == "ok", host.message
    failing = sorted(f["rule"] for f in host.results["Audit"]["findings"] if f["status"] == "fail")
    return host, changed, failing


def test_host_tuning_fixes_its_rules(tmp_path):
    root = mkroot.build_root(
        tmp_path / "root",
        {
            "governor": "powersave",
            "swappiness": 60,
            "thp_enabled": "always",
            "numa_balancing": 1,
            "overcommit_memory": 2,
            "memlock_kb": 64,
            "process_memlock_kb": 64,
        },
    )
    inv = {
        "all": {
            "hosts": {
                "h": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "host_tuning_root": str(root),
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(PLAY)

    _, _, before = _run(tmp_path, audit_only=True)
    assert set(OWNED) | {"HOST-MEM-004"} <= set(before)

    digest = _digest(root)
    (tmp_path / "check.yml").write_text(PLAY.replace("gather_facts: false", "gather_facts: false\n  check_mode: true"))
    check = run_playbook(str(tmp_path / "check.yml"), str(tmp_path / "hosts.yml"))
    assert check.hosts["h"].status == "ok", check.hosts["h"].message
    assert _digest(root) == digest, "check mode changed the host"

    _, changed, after = _run(tmp_path)
    assert "Kernel memory and NUMA settings (HOST-MEM-002, HOST-MEM-005, HOST-CPU-003)" in changed
    assert not set(OWNED) & set(after), after
    text = (root / "etc/sysctl.d/60-gpufleet.conf").read_text()
    assert "vm.swappiness = 10" in text and "kernel.numa_balancing = 0" in text
    assert (root / "etc/security/limits.d/90-gpufleet.conf").read_text().count("memlock unlimited") == 2
    assert {p.read_text().strip() for p in root.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")} == {
        "performance"
    }

    _, changed, _ = _run(tmp_path)
    assert changed == []


def test_tuned_keeps_the_governor(tmp_path):
    root = mkroot.build_root(tmp_path / "root", {"governor": "powersave"})
    (root / "etc/tuned").mkdir(parents=True, exist_ok=True)
    (root / "etc/tuned/active_profile").write_text("balanced\n")
    inv = {
        "all": {
            "hosts": {
                "h": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "host_tuning_root": str(root),
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(PLAY)
    _, _, failing = _run(tmp_path)
    assert "HOST-CPU-001" in failing  # left to TuneD, and reported
    assert {p.read_text().strip() for p in root.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")} == {
        "powersave"
    }
