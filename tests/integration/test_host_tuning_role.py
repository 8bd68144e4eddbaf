"""Role host_tuning against a fixture host root: check mode changes nothing, converge fixes every host rule it
owns (verified by re-running the audit on the same root), the second run changes nothing."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import labkit
import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim" / "host"))
import mkroot  # noqa: E402

pytestmark = pytest.mark.integration
OWNED = ["HOST-CPU-001", "HOST-CPU-003", "HOST-MEM-002", "HOST-MEM-003", "HOST-MEM-005"]

AUDIT = """
- name: Audit
  gpufleet.tuning.audit:
    root: "{{ host_tuning_root }}"
    gather: [host]
    sample_seconds: 0
  register: audit
"""
PLAY = labkit.play("Tune", roles=("host_tuning",), tasks=AUDIT, audit_only=True)


def _host(tmp: Path, root: Path) -> None:
    """Inventory and play of one local host ``h`` whose root is the fixture tree ``root``."""
    labkit.write_inventory(tmp, {"h": labkit.local_host(host_tuning_root=str(root))})
    labkit.write_play(tmp, PLAY)


def _run(tmp: Path, audit_only=False):
    result, changed = labkit.run(tmp / "play.yml", tmp / "hosts.yml", extravars={"audit_only": audit_only})
    host = result.hosts["h"]
    assert host.status == "ok", host.message
    failing = sorted(f["rule"] for f in host.results["Audit"]["findings"] if f["status"] == "fail")
    return host, labkit.changed_tasks(changed), failing


def test_host_tuning_fixes_its_rules(tmp_path):
    root = mkroot.build_root(
        tmp_path / "root",
        {
            "governor": "powersave",
            "epp": "power",  # TuneD's powersave profile: a fail (the balanced default is only a low warning)
            "swappiness": 60,
            "swap_total_mib": 8192,  # HOST-MEM-002 is judged only where swap exists
            "thp_defrag": "always",
            "numa_balancing": 1,
            "overcommit_memory": 2,
            "memlock_kb": 64,
            "process_memlock_kb": 64,
            # A Kubernetes node: containerd installed (its upstream unit sets no LimitMEMLOCK), not running: pods
            # would get 8 MiB (a pod has no ulimit of its own and inherits the runtime's).
            "job_services": [
                mkroot.job_service("kubelet.service", running=False),
                mkroot.job_service("containerd.service", running=False),
            ],
        },
    )
    _host(tmp_path, root)

    _, _, before = _run(tmp_path, audit_only=True)
    assert set(OWNED) | {"HOST-MEM-004"} <= set(before)

    digest = labkit.digest(root)
    check_play = labkit.play("Tune", roles=("host_tuning",), tasks=AUDIT, audit_only=True, check_mode=True)
    check = run_playbook(str(labkit.write_play(tmp_path, check_play, "check.yml")), str(tmp_path / "hosts.yml"))
    assert check.hosts["h"].status == "ok", check.hosts["h"].message
    assert labkit.digest(root) == digest, "check mode changed the host"

    _, changed, after = _run(tmp_path)
    assert "Kernel memory and NUMA settings (HOST-MEM-002, HOST-MEM-005, HOST-CPU-003)" in changed
    assert not set(OWNED) & set(after), after
    text = (root / "etc/sysctl.d/60-gpufleet.conf").read_text()
    assert "vm.swappiness = 10" in text and "kernel.numa_balancing = 0" in text
    assert (root / "etc/security/limits.d/90-gpufleet.conf").read_text().count("memlock unlimited") == 2
    dropin = root / "etc/systemd/system/containerd.service.d/90-gpufleet-memlock.conf"
    assert "[Service]\nLimitMEMLOCK=infinity\n" in dropin.read_text()
    assert {p.read_text().strip() for p in root.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")} == {
        "performance"
    }

    _, changed, _ = _run(tmp_path)
    assert changed == []


def test_tuned_keeps_the_governor(tmp_path):
    root = mkroot.build_root(tmp_path / "root", {"governor": "powersave", "epp": "power"})
    (root / "etc/tuned").mkdir(parents=True, exist_ok=True)
    (root / "etc/tuned/active_profile").write_text("balanced\n")
    _host(tmp_path, root)
    _, _, failing = _run(tmp_path)
    assert "HOST-CPU-001" in failing  # left to TuneD, and reported
    assert {p.read_text().strip() for p in root.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")} == {
        "powersave"
    }


# ------------------------------------------- issue 12: targets from the policy, owners' choices kept

POLICY_TASKS = """
- name: Audit
  gpufleet.tuning.audit:
    policy: "{{ [gpufleet_policy | default({}), gpufleet_policy_group | default({}),
                 gpufleet_policy_host | default({})] | ansible.builtin.combine(recursive=true) }}"
    root: "{{ host_tuning_root }}"
    gather: [host]
    sample_seconds: 0
  register: audit
- name: Decisions
  ansible.builtin.debug:
    msg:
      overrides: "{{ host_tuning_policy_overrides }}"
      irqbalance: "{{ host_tuning_irqbalance }}"
      restart_required: "{{ host_tuning_restart_required }}"
"""
POLICY_PLAY = labkit.play("Tune", roles=("host_tuning",), tasks=POLICY_TASKS)


def _fleet(tmp_path, hosts):
    """Several fixture hosts in one run (one playbook for all): {name: (mkroot overrides, host vars)}."""
    inventory = {}
    for name, (overrides, hostvars) in hosts.items():
        root = mkroot.build_root(tmp_path / name, overrides)
        inventory[name] = labkit.local_host(host_tuning_root=str(root), **hostvars)
    labkit.write_inventory(tmp_path, inventory)
    labkit.write_play(tmp_path, POLICY_PLAY)


def _run_fleet(tmp_path):
    result, changed = labkit.run(tmp_path / "play.yml", tmp_path / "hosts.yml")
    changed = sorted({(d["host"], d["task"]) for d in changed})
    out = {}
    for name, host in result.hosts.items():
        assert host.status == "ok", (name, host.message)
        findings = {f["rule"]: f for f in host.results["Audit"]["findings"]}
        out[name] = (findings, host.results["Decisions"]["msg"])
    return out, changed


SYSCTL_TASK = "Kernel memory and NUMA settings (HOST-MEM-002, HOST-MEM-005, HOST-CPU-003)"


def test_targets_come_from_the_policy_and_running_choices_are_kept(tmp_path):
    _fleet(
        tmp_path,
        {
            # The group's policy allows at most 5: the role writes 5 (today it writes its own 10). Overcommit 1 and
            # THP never are acceptable to the policy: kept (today the role sets 0 and madvise).
            "swap5": (
                {"swappiness": 60, "swap_total_mib": 8192, "overcommit_memory": 1, "thp_enabled": "never"},
                {"gpufleet_policy_group": {"memory": {"max_swappiness": 5}}},
            ),
            # An owner's swappiness 1 stays (today the role raises it to 10); a role variable set by the user wins
            # and is listed. Issue 29: HOST-MEM-002 passes, so its value is written only when asked to make what
            # holds persistent (gpufleet_remediate_persist).
            "owner1": (
                {"swappiness": 1, "memlock_kb": 64},
                {"host_tuning_memlock": "1048576", "gpufleet_remediate_persist": True},
            ),
            # Issue 29: the same owner without persist - every sysctl and memlock rule passes, nothing is written.
            "held1": ({"swappiness": 1}, {}),
            # Issue 29: a role variable set is a request to set it, even where the rule passes (10 <= 10 without swap).
            "asked5": ({}, {"host_tuning_swappiness": 5}),
            # Rules the policy turned off (HOST-MEM-005 and HOST-CPU-001 disabled) are left alone, also in the files
            # written whole for the rules that fail (HOST-MEM-002: sysctl.d; HOST-MEM-003: sysfs.json).
            "off": (
                {
                    "swappiness": 60,
                    "swap_total_mib": 8192,
                    "overcommit_memory": 2,
                    "governor": "powersave",
                    "thp_defrag": "always",
                },
                {
                    "gpufleet_policy_group": {
                        "rules": {"HOST-MEM-005": {"enabled": False}, "HOST-CPU-001": {"enabled": False}}
                    }
                },
            ),
        },
    )
    hosts, changed = _run_fleet(tmp_path)
    text = (tmp_path / "swap5/etc/sysctl.d/60-gpufleet.conf").read_text()
    assert "vm.swappiness = 5" in text and "vm.overcommit_memory = 1" in text, text
    assert (tmp_path / "swap5/proc/sys/vm/swappiness").read_text().strip() == "5"
    assert "[never]" in (tmp_path / "swap5/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    findings, decisions = hosts["swap5"]
    assert findings["HOST-MEM-002"]["status"] == "pass" and findings["HOST-MEM-002"]["expected"] == "<= 5"
    assert decisions["overrides"] == []

    assert "vm.swappiness = 1" in (tmp_path / "owner1/etc/sysctl.d/60-gpufleet.conf").read_text()
    assert (tmp_path / "owner1/proc/sys/vm/swappiness").read_text().strip() == "1"
    limits = (tmp_path / "owner1/etc/security/limits.d/90-gpufleet.conf").read_text()
    assert "* soft memlock 1048576" in limits
    findings, decisions = hosts["owner1"]
    assert findings["HOST-MEM-002"]["status"] == "pass"
    assert decisions["overrides"] == [
        {
            "variable": "host_tuning_memlock",
            "value": "1048576",
            "policy_key": "memory.min_memlock_kb",
            "policy_value": None,
        }
    ]
    assert ("owner1", SYSCTL_TASK) in changed  # the file is written, with the owner's 1

    assert not (tmp_path / "held1/etc/sysctl.d/60-gpufleet.conf").exists()
    assert not (tmp_path / "held1/etc/security/limits.d/90-gpufleet.conf").exists()
    assert (tmp_path / "held1/proc/sys/vm/swappiness").read_text().strip() == "1"
    assert [c for c in changed if c[0] == "held1" and c[1] != "Decisions"] == []
    assert "vm.swappiness = 5" in (tmp_path / "asked5/etc/sysctl.d/60-gpufleet.conf").read_text()
    assert (tmp_path / "asked5/proc/sys/vm/swappiness").read_text().strip() == "5"
    assert not (tmp_path / "asked5/etc/security/limits.d/90-gpufleet.conf").exists()  # HOST-MEM-004 passes

    text = (tmp_path / "off/etc/sysctl.d/60-gpufleet.conf").read_text()
    assert "vm.swappiness = 10" in text and "overcommit" not in text, text
    assert (tmp_path / "off/proc/sys/vm/overcommit_memory").read_text().strip() == "2"
    sysfs = json.loads((tmp_path / "off/etc/gpufleet/sysfs.json").read_text())
    assert "defrag" in json.dumps(sysfs) and "scaling_governor" not in json.dumps(sysfs), sysfs
    assert (tmp_path / "off/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip() == "powersave"
    findings, _ = hosts["off"]
    assert findings["HOST-MEM-002"]["status"] == "pass" and findings["HOST-MEM-003"]["status"] == "pass"
    assert findings["HOST-MEM-005"]["status"] == "skip" and findings["HOST-CPU-001"]["status"] == "skip"

    _hosts, changed = _run_fleet(tmp_path)
    assert [c for c in changed if c[1] != "Decisions"] == []


def test_the_role_computes_no_target_itself():
    """Issue 27: every target comes from gpufleet.tuning.remediation_targets (each rule's target next to its check in
    rules/memory.py and rules/cpu.py): the role's first task runs it when the playbook has not (gpufleet_targets),
    the next one reads it; no host_info call, no policy merging, no vars/ that template (issue 14: vars/ outranks
    the inventory)."""
    role = REPO / "roles" / "host_tuning"
    assert not (role / "tasks" / "targets.yml").exists()
    vars_file = role / "vars" / "main.yml"
    if vars_file.exists():
        assert "{{" not in vars_file.read_text() and "{%" not in vars_file.read_text(), "vars/main.yml computes"
    tasks = "\n".join(p.read_text() for p in sorted((role / "tasks").glob("*.yml")))
    for word in ("host_info", "gpufleet_policy", "effective_policy", "policy_inputs"):
        assert word not in tasks, word
    main = yaml.safe_load((role / "tasks" / "main.yml").read_text())[0]["block"]
    first, second = main[0], main[1]
    assert first["gpufleet.tuning.remediation_targets"]["roles"] == ["host_tuning"]
    assert first["when"] == "gpufleet_targets is not defined" and first["register"] == "__host_tuning_targets"
    assert "__host_tuning_t" in second["ansible.builtin.set_fact"]
    assert first["tags"] == second["tags"] == ["always"]  # --tags HOST-MEM-004 needs them too


def _pinned(affinity):
    return [
        mkroot.irq_device("nic", "0000:17:00.0", 120, 4, name="ens1f0", numa_node=0, affinity=affinity),
        mkroot.irq_device("gpu", "0000:18:00.0", 200, 1, numa_node=0),
    ]


def test_irqbalance_is_not_started_over_irqs_pinned_by_hand(tmp_path):
    running = {"gpufleet_policy_group": {"cpu": {"irqbalance": "running"}}}
    _fleet(
        tmp_path,
        {
            "pinned": ({"irqbalance": False, "irq_devices": _pinned(["2", "3", "4", "5"])}, running),
            "spread": ({"irqbalance": False, "irq_devices": _pinned("node")}, running),
            "forced": (
                {"irqbalance": False, "irq_devices": _pinned(["2", "3", "4", "5"])},
                {**running, "host_tuning_irqbalance_override_pinned": True},
            ),
            "owner": ({"irqbalance": False, "irq_devices": _pinned("node")}, {}),
        },
    )
    hosts, _changed = _run_fleet(tmp_path)

    findings, decisions = hosts["pinned"]
    irq = decisions["irqbalance"]
    assert (irq["wanted"], irq["state"], irq["running"]) == ("started", None, False)
    assert irq["reason"].startswith("IRQs pinned by hand: 120, 121, 122, 123 (devices ens1f0)")
    assert [p["cpus"] for p in irq["pinned"]] == ["2", "3", "4", "5"]
    assert findings["HOST-CPU-004"]["status"] == "pass"
    assert "IRQs pinned by hand: ens1f0 (IRQs 120-123)" in findings["HOST-CPU-004"]["message"]

    findings, decisions = hosts["spread"]
    assert decisions["irqbalance"]["state"] == "started" and decisions["irqbalance"]["pinned"] == []
    assert findings["HOST-CPU-004"]["status"] == "fail"  # a fixture root has no service to start

    assert hosts["forced"][1]["irqbalance"]["state"] == "started"
    assert hosts["forced"][1]["overrides"] == []

    findings, decisions = hosts["owner"]  # the default policy (any) leaves the service to its owner
    assert decisions["irqbalance"]["state"] is None and "cpu.irqbalance: any" in decisions["irqbalance"]["reason"]
    assert findings["HOST-CPU-004"]["status"] == "pass"


# ------------------------------------------- issue 13: HOST-MEM-004 where GPU jobs run

DROPIN = "etc/systemd/system/{}.d/90-gpufleet-memlock.conf"
MEMLOCK_TASK = "Memlock limit of the daemons that start GPU jobs (HOST-MEM-004)"


def test_memlock_reaches_the_job_daemons(tmp_path):
    """A drop-in per job daemon's unit (limits.conf never reaches a systemd service): installed daemons pass the
    re-audit; a running one keeps its old limit, is listed in host_tuning_restart_required and is not restarted;
    the policy's limit is written in systemd's form; check mode changes nothing; a second run changes nothing."""
    _fleet(
        tmp_path,
        {
            # slurmd and kubelet installed, not running (kubelet's unit sets 64M): slurmd gets infinity; kubelet
            # starts no job itself and is left alone.
            "installed": (
                {
                    "job_services": [
                        mkroot.job_service("slurmd.service", running=False),
                        mkroot.job_service("kubelet.service", "64M", running=False),
                    ]
                },
                {},
            ),
            # A Kubernetes node's containerd running with systemd's default 8 MiB: fixed on disk, restart needed, not
            # done.
            "running": (
                {"job_services": [mkroot.job_service("kubelet.service"), mkroot.job_service("containerd.service")]},
                {},
            ),
            # The policy asks for 1 GiB: LimitMEMLOCK=1048576K, as the rule reads it.
            "policy": (
                {"job_services": [mkroot.job_service("slurmd.service", running=False)]},
                {"gpufleet_policy_group": {"memory": {"min_memlock_kb": 1048576}}},
            ),
            # No job daemons: only the limits.d file, as before.
            "plain": ({}, {}),
        },
    )
    roots = {name: tmp_path / name for name in ("installed", "running", "policy", "plain")}
    digests = {name: labkit.digest(root) for name, root in roots.items()}
    labkit.write_play(
        tmp_path, labkit.play("Tune", roles=("host_tuning",), tasks=POLICY_TASKS, check_mode=True), "check.yml"
    )
    check, predicted = labkit.run(tmp_path / "check.yml", tmp_path / "hosts.yml")
    assert all(h.status == "ok" for h in check.hosts.values()), {n: h.message for n, h in check.hosts.items()}
    assert {n: labkit.digest(r) for n, r in roots.items()} == digests, "check mode changed a host"
    predicted = {(d["host"], d["task"]) for d in predicted}
    assert ("running", MEMLOCK_TASK) in predicted and ("plain", MEMLOCK_TASK) not in predicted

    hosts, changed = _run_fleet(tmp_path)
    assert (
        (roots["installed"] / DROPIN.format("slurmd.service"))
        .read_text()
        .endswith("[Service]\nLimitMEMLOCK=infinity\n")
    )
    assert not (roots["installed"] / DROPIN.format("kubelet.service")).exists()  # pods run under the runtime
    findings, decisions = hosts["installed"]
    assert findings["HOST-MEM-004"]["status"] == "pass", findings["HOST-MEM-004"]
    assert decisions["restart_required"] == []

    assert "LimitMEMLOCK=infinity" in (roots["running"] / DROPIN.format("containerd.service")).read_text()
    findings, decisions = hosts["running"]
    assert decisions["restart_required"] == ["containerd.service"]
    assert findings["HOST-MEM-004"]["status"] == "fail"  # its running jobs still get 8 MiB
    assert "its unit now gives unlimited: restart containerd.service" in findings["HOST-MEM-004"]["message"]

    assert "LimitMEMLOCK=1048576K" in (roots["policy"] / DROPIN.format("slurmd.service")).read_text()
    assert hosts["policy"][0]["HOST-MEM-004"]["status"] == "pass"

    assert not (roots["plain"] / "etc/systemd/system").exists()
    assert hosts["plain"][0]["HOST-MEM-004"]["status"] == "pass"
    assert {(h, t) for h, t in changed if t == MEMLOCK_TASK} == {
        ("installed", MEMLOCK_TASK),
        ("running", MEMLOCK_TASK),
        ("policy", MEMLOCK_TASK),
    }
    assert predicted >= {(h, t) for h, t in changed if t == MEMLOCK_TASK}

    hosts, changed = _run_fleet(tmp_path)
    assert [c for c in changed if c[1] != "Decisions"] == []
    assert hosts["running"][1]["restart_required"] == ["containerd.service"]  # still true, still not restarted


LIVE_TASKS = """
- name: Read
  gpufleet.tuning.host_info:
    sample_seconds: 0
    kernel_log: none
  register: after
- name: Decisions
  ansible.builtin.debug:
    msg:
      restart_required: "{{ host_tuning_restart_required }}"
"""
LIVE_PLAY = labkit.play("Tune a live systemd host", roles=("host_tuning",), tasks=LIVE_TASKS)
FAKE_CONTAINERD = """[Unit]
Description=containerd stand-in (sleep, named containerd)
[Service]
ExecStart=/usr/local/bin/containerd infinity
LimitMEMLOCK=2M
[Install]
WantedBy=multi-user.target
"""


@pytest.fixture
def systemd_container():
    image = "localhost/gpufleet-debian12-systemd:current"
    if not shutil.which("podman") or subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        pytest.skip(f"podman image {image} is not here")
    name = f"gpufleet-h13-memlock-{os.getpid()}"
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    subprocess.run(
        ["podman", "run", "-d", "--name", name, "--network", "none", "--ulimit", f"nofile={nofile}:{nofile}",
         "--ulimit", "nproc=32768:32768", image, "/lib/systemd/systemd"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        for _ in range(60):
            state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], capture_output=True)
            if state.stdout.strip() in (b"running", b"degraded"):
                break
            time.sleep(0.5)
        subprocess.run(["podman", "exec", "-i", name, "sh", "-c", "cat > /lib/systemd/system/containerd.service"],
                       input=FAKE_CONTAINERD.encode(), check=True)  # fmt: skip
        # A Kubernetes node: kubelet's unit is installed (not started), so containerd's limit is the pods' limit.
        subprocess.run(["podman", "exec", "-i", name, "sh", "-c", "cat > /lib/systemd/system/kubelet.service"],
                       input=b"[Unit]\nDescription=kubelet stand-in\n[Service]\nExecStart=/bin/true\n",
                       check=True)  # fmt: skip
        subprocess.run(
            ["podman", "exec", name, "sh", "-c",
             "cp /bin/sleep /usr/local/bin/containerd && systemctl daemon-reload && systemctl start containerd"],
            check=True,
        )  # fmt: skip
        yield name
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "1", name], capture_output=True)


def _sh(name, command):
    return subprocess.run(["podman", "exec", name, "sh", "-c", command], capture_output=True, text=True).stdout.strip()


def test_memlock_dropin_and_restart_gate_on_a_live_systemd_host(systemd_container, tmp_path):
    """The whole path on a real systemd (a container): host_info reads the unit and the running daemon's
    /proc/<pid>/limits, the role writes the drop-in and reloads systemd but restarts nothing until
    host_tuning_restart_ok; then the daemon runs with the policy's limit and the rule passes. The container's hard
    memlock limit is 8 MiB (no CAP_SYS_RESOURCE to raise it), so the policy here asks for 4 MiB."""
    name = systemd_container
    host = {
        "ansible_connection": "containers.podman.podman",
        "ansible_python_interpreter": "/usr/bin/python3",
        "gpufleet_policy": {"memory": {"min_memlock_kb": 4096}},
        **{
            f"host_tuning_{rule}_enabled": False
            for rule in ("host_mem_002", "host_mem_003", "host_mem_005", "host_cpu_001", "host_cpu_003", "host_cpu_004")
        },
    }
    inventory = labkit.write_inventory(tmp_path, {name: host})
    play = labkit.write_play(tmp_path, LIVE_PLAY)
    policy = pol_mod.validate({"memory": {"min_memlock_kb": 4096}}, known_rules=rules.BY_ID)

    def run(restart_ok):
        result, changed = labkit.run(play, inventory, extravars={"host_tuning_restart_ok": restart_ok})
        host = result.hosts[name]
        assert host.status == "ok", host.message
        changed = set(labkit.changed_tasks(changed))
        facts = host.results["Read"]["host"]
        finding = {f["rule"]: f for f in rules.evaluate({"host": facts}, policy)}["HOST-MEM-004"]
        return finding, host.results["Decisions"]["msg"]["restart_required"], changed, facts

    pid = _sh(name, "systemctl show -p MainPID --value containerd")
    finding, restart, changed, facts = run(False)
    assert MEMLOCK_TASK in changed
    assert "LimitMEMLOCK=4096K" in _sh(name, f"cat /{DROPIN.format('containerd.service')}")
    assert _sh(name, "systemctl show -p LimitMEMLOCK --value containerd") == str(4096 * 1024)  # reloaded
    assert _sh(name, "systemctl show -p MainPID --value containerd") == pid  # not restarted
    assert restart == ["containerd.service"]
    [svc] = [s for s in facts["memlock"]["services"] if s["unit"] == "containerd.service"]
    assert svc["processes"][0]["pid"] == int(pid) and svc["processes"][0]["soft_kb"] == 2048
    assert finding["status"] == "fail" and "restart containerd.service" in finding["message"], finding

    finding, restart, changed, _ = run(True)
    assert "Restart the job daemons for their new memlock limit (HOST-MEM-004)" in changed
    assert _sh(name, "systemctl show -p MainPID --value containerd") != pid
    assert "8388608" not in _sh(name, "grep locked /proc/$(systemctl show -p MainPID --value containerd)/limits")
    assert restart == [] and finding["status"] == "pass", finding

    _finding, _restart, changed, _ = run(True)
    assert changed == set(), changed
