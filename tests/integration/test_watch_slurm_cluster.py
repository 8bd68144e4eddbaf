"""watch/slurm.py against a real Slurm: Debian 12's slurmctld + slurmd 22.05 and munge in two podman containers
(image localhost/gpufleet-debian12-watch from scripts/lab-setup.sh) on the internal lab network.

gfn1 runs slurmctld and slurmd, gfn2 slurmd; one partition `gpu` of both (proctrack/linuxproc, task/none: no
cgroups). The collection's plugins/module_utils tree is copied into both, and reconcile() runs INSIDE a node
(python3 of the container, its own scontrol), as the checker does on a host. After each call the node's state is
read back with `sinfo` (not with our parser). The cluster is set up once for the module (about 2 s here) and each
test starts from both nodes idle.

End to end: the real checker (the zipapp watch_install builds with watch/bundle.py) with the simulated NVML library
in both nodes; a GPU lost on gfn2 drains it ("gpufleet: GPU-HLT-002 ..."), clearing the fault resumes it - run by
hand as `python3 gpufleet-watch --config ...`, and run by slurmd itself as Slurm's HealthCheckProgram.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (scripts/lab-setup.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab is rootful podman"),
]

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("GPUFLEET_WATCH_IMAGE", "localhost/gpufleet-debian12-watch:current")
NETWORK = os.environ.get("GPUFLEET_LAB_NETWORK", "gpufleet-lab")
NODES = ("gfn1", "gfn2")
SITE = "/opt/gpufleet"  # where the collection's module_utils go inside the containers
LOST = {"rule": "GPU-HLT-002", "severity": "critical", "message": "GPU(s) [3] fell off the bus or cannot be opened"}
POWER = {"rule": "GPU-PWR-002", "severity": "critical", "message": "GPU 1 power limit 500 W above the 400 W cap"}
ON = {"drain": True, "resume": True, "max_drained_fraction": 0.1, "node_name": None}

SLURM_CONF = """\
# gpufleet test cluster (tests/integration/test_watch_slurm_cluster.py)
ClusterName=gpufleet-test
SlurmctldHost=gfn1
AuthType=auth/munge
CryptoType=crypto/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# No cgroups in these containers: Linux process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
NodeName=gfn[1-2] CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=gpu Nodes=gfn[1-2] Default=YES MaxTime=INFINITE State=UP
"""
# What the README shows (slurm.conf(5) of 22.05: run as root on every node not NOT_RESPONDING, killed after 60 s;
# ANY so that a drained node is checked again and can be resumed; CYCLE spreads the nodes over the interval).
# The test's interval is short; a cluster's is watch.interval_seconds (300).
HEALTH_CHECK = """\
HealthCheckProgram=/usr/local/sbin/gpufleet-watch
HealthCheckInterval=%d
HealthCheckNodeState=ANY,CYCLE
"""

# Runs inside a node: reconcile() with the checker's kind of runner (argv, C locale) -> JSON on stdout.
DRIVER = f"""\
import json, os, subprocess, sys
sys.path.insert(0, {SITE!r})
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import slurm


def run(argv):
    env = dict(os.environ, LC_ALL="C", LANG="C")
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


a = json.loads(sys.argv[1])
print(json.dumps(slurm.reconcile(run, a["node"], a["problems"], a["clean"], a["settings"])))
"""


def _podman(*argv: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *argv], input=stdin, capture_output=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(argv)}: rc {proc.returncode}: {proc.stderr.decode()}")
    return proc


def _payload(files: dict[str, tuple[bytes, int]], tree: Path | None = None, under: str = "") -> bytes:
    """A tar of ``files`` (path -> (content, mode)) and the directory ``tree`` (if any) placed at ``under``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, (content, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
        if tree is not None:
            tar.add(tree, arcname=under.lstrip("/"), filter=lambda t: None if "__pycache__" in t.name else t)
    return buf.getvalue()


class Cluster:
    def __init__(self, prefix: str):
        self.prefix = prefix
        self.containers = {node: f"{prefix}-{node}" for node in NODES}

    def sh(self, node: str, script: str, check: bool = True) -> str:
        return _podman("exec", self.containers[node], "bash", "-c", script, check=check).stdout.decode()

    def reconcile(self, node: str, problems: list, clean: bool = True, settings: dict | None = None) -> dict:
        args = {"node": node, "problems": problems, "clean": clean, "settings": settings or ON}
        out = _podman("exec", self.containers[node], "python3", f"{SITE}/reconcile.py", json.dumps(args))
        return json.loads(out.stdout)

    def sinfo(self) -> dict[str, dict]:
        """node -> {state, reason, since}, as `sinfo` prints them (state 'idle', 'drained', ...; reason 'none')."""
        out = self.sh("gfn1", "sinfo -h -N -p gpu -o '%N|%T|%E|%H'")
        rows = (line.split("|") for line in out.splitlines() if line.strip())
        return {n: {"state": s, "reason": r, "since": t} for n, s, r, t in rows}

    def resume_all(self) -> None:
        for node, row in self.sinfo().items():
            if row["state"] not in ("idle",):
                self.sh("gfn1", f"scontrol update nodename={node} state=resume", check=False)
        self.wait_idle()

    def wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            rows = self.sinfo()
            if sorted(rows) == list(NODES) and all(r["state"] == "idle" for r in rows.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes not idle after {timeout} s: {rows}")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    if _podman("image", "exists", IMAGE, check=False).returncode != 0:
        pytest.skip(f"{IMAGE} is missing: run scripts/lab-setup.sh")
    started = time.monotonic()
    lab = Cluster(f"h3slurm-{uuid.uuid4().hex[:6]}")
    try:
        for node, name in lab.containers.items():
            _podman("run", "-d", "--name", name, "--hostname", node, "--network", NETWORK, IMAGE, "sleep", "infinity")
        ips = {}
        for node, name in lab.containers.items():
            ips[node] = (
                _podman("inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{NETWORK}").IPAddress}}}}', name)
                .stdout.decode()
                .strip()
            )
        hosts = "".join(f"{ip} {node}\n" for node, ip in ips.items())
        files = {
            "/etc/slurm/slurm.conf": (SLURM_CONF.encode(), 0o644),
            "/etc/munge/munge.key": (secrets.token_bytes(1024), 0o400),  # one key, shared by both nodes
            f"{SITE}/reconcile.py": (DRIVER.encode(), 0o644),
            "/tmp/hosts.gpufleet": (hosts.encode(), 0o644),
        }
        payload = _payload(
            files, REPO / "plugins/module_utils", f"{SITE}/ansible_collections/gpufleet/tuning/plugins/module_utils"
        )
        for node in NODES:
            _podman("exec", "-i", lab.containers[node], "tar", "-x", "--no-same-owner", "-C", "/", stdin=payload)
            lab.sh(
                node,
                "set -e; cat /tmp/hosts.gpufleet >>/etc/hosts; chown munge:munge /etc/munge/munge.key; "
                "install -d -o munge -g munge /run/munge; runuser -u munge -- munged; "
                "install -d /var/lib/slurm/slurmd; install -d -o slurm /var/log/slurm /var/lib/slurm/slurmctld; "
                + ("slurmctld; " if node == "gfn1" else "")
                + "slurmd",
            )
        lab.wait_idle()
        lab.setup_seconds = time.monotonic() - started
        yield lab
    finally:
        names = list(lab.containers.values())
        _podman("rm", "-f", "-t", "0", *names, check=False)


@pytest.fixture
def lab(cluster):
    cluster.resume_all()
    return cluster


def test_cluster_comes_up_quickly(cluster):
    assert cluster.setup_seconds < 30, f"set-up took {cluster.setup_seconds:.1f} s"


def test_the_lab_network_has_no_way_out(cluster):
    """scripts/lab-setup.sh's network is internal: no default route in the nodes (before the fix the lab ran on
    podman's NAT bridge, 10.88.0.0/16 with a gateway, under the lab network's name)."""
    for node in NODES:
        routes = cluster.sh(node, "ip route")
        assert "default" not in routes and "10.88." not in routes, routes


def test_problem_drains_the_node_with_the_reason(lab):
    out = lab.reconcile("gfn2", [LOST])
    reason = "gpufleet: GPU-HLT-002 GPU(s) [3] fell off the bus or cannot be opened"
    assert (out["action"], out["drained"], out["suppressed"], out["reason"]) == ("drain", True, False, reason)
    rows = lab.sinfo()
    assert rows["gfn2"]["state"] == "drained" and rows["gfn2"]["reason"] == reason
    assert rows["gfn1"]["state"] == "idle"
    assert reason in lab.sh("gfn1", "scontrol show node gfn2")


def test_already_ours_is_not_drained_again_and_the_reason_follows_the_rules(lab):
    lab.reconcile("gfn2", [LOST])
    first = lab.sinfo()["gfn2"]
    time.sleep(1.1)  # the reason's time stamp has a resolution of one second
    for problems in ([LOST], [dict(LOST, message="GPU(s) [3, 5] fell off the bus")]):
        again = lab.reconcile("gfn2", problems)
        assert (again["action"], again["drained"]) == ("none", True)
        assert lab.sinfo()["gfn2"] == first  # not rewritten: same rules, same reason, same time stamp
    changed = lab.reconcile("gfn2", [LOST, POWER])
    assert (changed["action"], changed["drained"]) == ("update", True)
    row = lab.sinfo()["gfn2"]
    assert row["state"] == "drained"
    assert row["reason"].startswith("gpufleet: GPU-HLT-002 ") and "; GPU-PWR-002 GPU 1 power limit" in row["reason"]
    assert row["since"] != first["since"]


def test_a_node_drained_by_someone_else_is_never_resumed_or_redrained(lab):
    lab.sh("gfn1", 'scontrol update nodename=gfn2 state=drain reason="maintenance"')
    before = lab.sinfo()["gfn2"]
    assert (before["state"], before["reason"]) == ("drained", "maintenance")
    for problems in ([], [LOST]):
        out = lab.reconcile("gfn2", problems, clean=True, settings=ON)
        assert (out["action"], out["drained"]) == ("foreign", False)
        assert lab.sinfo()["gfn2"] == before


def test_resume_only_with_resume_on_and_a_clean_run(lab):
    lab.reconcile("gfn2", [LOST])
    for settings, clean in ((dict(ON, resume=False), True), (ON, False)):
        out = lab.reconcile("gfn2", [], clean=clean, settings=settings)
        assert (out["action"], out["drained"]) == ("none", True), (settings, clean)
        assert lab.sinfo()["gfn2"]["state"] == "drained"
    out = lab.reconcile("gfn2", [], clean=True, settings=ON)
    assert (out["action"], out["drained"]) == ("resume", False)
    lab.wait_idle(timeout=10)


def test_circuit_breaker_with_two_nodes(lab):
    settings = dict(ON, max_drained_fraction=0.5)
    first = lab.reconcile("gfn1", [LOST], settings=settings)
    assert (first["action"], first["drained"]) == ("drain", True)
    rows = lab.sinfo()
    assert (rows["gfn1"]["state"], rows["gfn2"]["state"]) == ("drained", "idle")
    second = lab.reconcile("gfn2", [LOST], settings=settings)
    assert (second["action"], second["drained"], second["suppressed"]) == ("suppressed", False, True)
    assert "partition gpu: 1 of 2 nodes already drained, down or failing" in second["message"]
    assert "(taking no jobs: gfn1)" in second["message"]
    rows = lab.sinfo()
    assert (rows["gfn1"]["state"], rows["gfn2"]["state"]) == ("drained", "idle")
    # A looser fraction still leaves the floor: draining gfn2 would leave no node of gpu taking jobs.
    third = lab.reconcile("gfn2", [LOST], settings=dict(settings, max_drained_fraction=0.6))
    assert (third["action"], third["suppressed"]) == ("suppressed", True)
    assert "would leave 0 of 2 nodes, below watch.slurm.min_available_nodes 1" in third["message"]
    assert lab.sinfo()["gfn2"]["state"] == "idle"
    # Without the floor (min_available_nodes 0) the second drain goes through.
    fourth = lab.reconcile("gfn2", [LOST], settings=dict(ON, max_drained_fraction=0.6, min_available_nodes=0))
    assert fourth["action"] == "drain" and lab.sinfo()["gfn2"]["state"] == "drained"


def test_circuit_breaker_counts_nodes_drained_or_down_by_someone_else(lab):
    """gfn1 drained by hand (maintenance), then set down: either way it takes no jobs, and gpufleet must not drain the
    partition's last node. Before, only gpufleet's own drains counted and gfn2 was drained too."""
    lab.sh("gfn1", 'scontrol update nodename=gfn1 state=drain reason="maintenance: PSU swap"')
    for settings in (dict(ON, max_drained_fraction=0.5, min_available_nodes=0), ON):
        out = lab.reconcile("gfn2", [LOST], settings=settings)
        assert (out["action"], out["suppressed"]) == ("suppressed", True), out
        assert "(taking no jobs: gfn1)" in out["message"]
        assert lab.sinfo()["gfn2"]["state"] == "idle"
    lab.sh("gfn1", 'scontrol update nodename=gfn1 state=down reason="hw replaced"')
    out = lab.reconcile("gfn2", [LOST], settings=ON)
    assert out["action"] == "suppressed" and "would leave 0 of 2 nodes" in out["message"]
    assert lab.sinfo()["gfn2"]["state"] == "idle"


# ------------------------------------------------------------------------------------- the checker, end to end
WATCH = "/usr/local/sbin/gpufleet-watch"
WATCH_CONFIG = "/etc/gpufleet/watch.json"
NVML_STATE = "/etc/gpufleet-sim/nvml.state"
TEXTFILE = "/var/lib/prometheus/node-exporter/gpufleet.prom"


@pytest.fixture(scope="module")
def checker(cluster, sim_lib, profiles):
    """The checker on both nodes (as the watch role installs it: zipapp, watch.json; pynvml where pip puts it) with
    a healthy simulated H100 board each; drain and resume on."""
    import pynvml
    from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import bundle

    archive, _version = bundle.build(python="/usr/bin/python3")
    for node in NODES:
        config = {
            "host": node,
            "policy": {"watch": {"slurm": {"drain": True, "resume": True}}},
            "audit": {"nvml_library": f"{SITE}/sim/libnvidia-ml.so.1", "sample_seconds": 0.2},
            "environment": {"FAKE_NVML_STATE": NVML_STATE},
        }
        files = {
            WATCH: (archive, 0o755),
            WATCH_CONFIG: (json.dumps(config).encode(), 0o644),
            "/usr/local/lib/python3.11/dist-packages/pynvml.py": (Path(pynvml.__file__).read_bytes(), 0o644),
            f"{SITE}/sim/libnvidia-ml.so.1": (sim_lib.read_bytes(), 0o755),
            "/var/lib/gpufleet/.keep": (b"", 0o644),
        }
        payload = _payload(files)
        _podman("exec", "-i", cluster.containers[node], "tar", "-x", "--no-same-owner", "-C", "/", stdin=payload)

    def gpus(node: str, **overrides: str) -> None:
        """Write node's simulated NVML state (replaced atomically: the library re-reads it on every call)."""
        state = profiles.build_state("h100", gpus=4, driver="570", overrides=overrides, seed=node)
        text = "".join(f"{k}={v}\n" for k, v in state.items())
        _podman(
            "exec",
            "-i",
            cluster.containers[node],
            "sh",
            "-c",
            f"mkdir -p {Path(NVML_STATE).parent} && cat >{NVML_STATE}.tmp && mv {NVML_STATE}.tmp {NVML_STATE}",
            stdin=text.encode(),
        )

    for node in NODES:
        gpus(node)
    cluster.gpus = gpus
    return cluster


def _drained_metric(lab, node):
    text = lab.sh(node, f"cat {TEXTFILE}")
    line = next(x for x in text.splitlines() if x.startswith("gpufleet_watch_slurm_drained{"))
    assert f'node="{node}"' in line
    return int(float(line.rsplit(" ", 1)[1]))


def test_checker_drains_on_a_lost_gpu_and_resumes_when_it_is_back(checker):
    lab = checker
    lab.resume_all()
    run = f"python3 {WATCH} --config {WATCH_CONFIG}"
    out = lab.sh("gfn2", run)
    assert lab.sinfo()["gfn2"]["state"] == "idle" and _drained_metric(lab, "gfn2") == 0, out

    lab.gpus("gfn2", **{"gpu.3.lost": "1"})
    out = lab.sh("gfn2", run)
    row = lab.sinfo()["gfn2"]
    assert row["state"] == "drained" and row["reason"].startswith("gpufleet: GPU-HLT-002 GPU(s) [3] "), (row, out)
    assert "slurm: drained node gfn2: gpufleet: GPU-HLT-002" in out
    assert _drained_metric(lab, "gfn2") == 1
    # What `pytest -s` shows (README, "Watch"): the checker's journal lines and Slurm's own view of the node.
    reasons = "sinfo -R -o '%75E %N'"
    print(f"\n$ {run}   # on gfn2, GPU 3 lost\n{out.rstrip()}\n$ {reasons}\n{lab.sh('gfn1', reasons).rstrip()}")
    assert lab.sinfo()["gfn1"]["state"] == "idle"

    lab.gpus("gfn2")  # the GPU answers again
    out = lab.sh("gfn2", run)
    assert "slurm: resumed node gfn2" in out, out
    print(f"$ {run}   # GPU 3 back\n{out.rstrip()}")
    lab.wait_idle(timeout=10)
    assert _drained_metric(lab, "gfn2") == 0


def test_checker_as_slurms_health_check_program(checker):
    """slurmd runs the checker itself (HealthCheckProgram): the lost GPU drains gfn2, its return resumes it."""
    lab = checker
    lab.resume_all()
    interval = 2

    def configure(extra: str) -> None:
        conf = SLURM_CONF + extra
        for node in NODES:
            _podman("exec", "-i", lab.containers[node], "sh", "-c", "cat >/etc/slurm/slurm.conf", stdin=conf.encode())
        lab.sh("gfn1", "scontrol reconfigure")

    def wait_for(node: str, state: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            row = lab.sinfo()[node]
            if row["state"] == state:
                return row
            if time.monotonic() > deadline:
                log = lab.sh(node, "tail -5 /var/log/slurm/slurmd.log", check=False)
                raise AssertionError(f"{node} not {state} after {timeout} s: {row}\n{log}")
            time.sleep(0.5)

    configure(HEALTH_CHECK % interval)
    try:
        lab.gpus("gfn2", **{"gpu.3.lost": "1"})
        row = wait_for("gfn2", "drained", 10 * interval)
        assert row["reason"].startswith("gpufleet: GPU-HLT-002 GPU(s) [3] ")
        lab.gpus("gfn2")
        wait_for("gfn2", "idle", 10 * interval)
        # gfn1 was checked too (its textfile), and stays idle: nothing wrong there.
        assert _drained_metric(lab, "gfn1") == 0 and lab.sinfo()["gfn1"]["state"] == "idle"
    finally:
        lab.gpus("gfn2")
        configure("")


def test_checker_never_resumes_when_it_could_not_read_the_gpus(checker):
    """The GPU came back? Not known when the driver does not answer: a node drained for a lost GPU stays drained."""
    lab = checker
    lab.resume_all()
    run = f"python3 {WATCH} --config {WATCH_CONFIG}"
    lab.gpus("gfn2", **{"gpu.3.lost": "1"})
    lab.sh("gfn2", run)
    assert lab.sinfo()["gfn2"]["state"] == "drained"
    try:
        lab.sh("gfn2", f"rm {NVML_STATE}")  # the simulated driver is gone: nvmlInit answers DriverNotLoaded
        out = lab.sh("gfn2", run)
        assert lab.sinfo()["gfn2"]["state"] == "drained", out
    finally:
        lab.gpus("gfn2")


# ------------------------------------------------------------------ kernel-log events: drain once, until a resume
XID_CONFIG = "/etc/gpufleet/watch-xid.json"
KERN_LOG = "/var/log/gpufleet-test-kern.log"


def _xid_line(node: str, when: float, pci: str = "0000:1b:00") -> str:
    """A kernel-log line as Debian 12's rsyslog writes /var/log/kern.log (RFC 3339 time stamps)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int((when % 1) * 1e6):06d}+00:00"
    return f"{stamp} {node} kernel: NVRM: Xid (PCI:{pci}): 79, pid=2701, name=python3, GPU has fallen off the bus.\n"


def _xid_config(lab, node: str, policy: dict | None = None) -> None:
    """The checker's configuration with the kernel log read from KERN_LOG and its own state file."""
    config = {
        "host": node,
        "policy": dict(
            {"watch": {"state_file": "/var/lib/gpufleet/xid-state.json", "slurm": {"drain": True, "resume": True}}},
            **(policy or {}),
        ),
        "audit": {
            "nvml_library": f"{SITE}/sim/libnvidia-ml.so.1",
            "sample_seconds": 0.2,
            "kernel_log": "file",
            "kernel_log_file": KERN_LOG,
        },
        "environment": {"FAKE_NVML_STATE": NVML_STATE},
    }
    payload = _payload({XID_CONFIG: (json.dumps(config).encode(), 0o644)})
    _podman("exec", "-i", lab.containers[node], "tar", "-x", "--no-same-owner", "-C", "/", stdin=payload)
    lab.sh(node, f"rm -f /var/lib/gpufleet/xid-state.json; : >{KERN_LOG}")


def test_an_xid_drains_once_a_resume_holds_and_a_new_xid_drains_again(checker):
    """Xid 79 -> drained; `scontrol update state=resume` by a person -> the same line (still in the 24 h window) does
    not drain on the next runs; a new Xid 79 line -> drained again. Before, every run drained it again."""
    lab = checker
    lab.resume_all()
    _xid_config(lab, "gfn2")
    run = f"python3 {WATCH} --config {XID_CONFIG}"
    now = time.time()
    lab.sh("gfn2", f"printf %s '{_xid_line('gfn2', now - 600)}' >>{KERN_LOG}")
    out = lab.sh("gfn2", run)
    row = lab.sinfo()["gfn2"]
    assert row["state"] == "drained" and row["reason"].startswith("gpufleet: HOST-HLT-001 Xid 79 "), (row, out)

    lab.sh("gfn1", "scontrol update nodename=gfn2 state=resume")  # the operator reset the GPU
    lab.wait_idle(timeout=10)
    outs = []
    for attempt in range(2):
        outs.append(lab.sh("gfn2", run))
        assert lab.sinfo()["gfn2"]["state"] == "idle", (attempt, outs[-1])
        # still reported (the line is in the window), no longer a reason to drain
        assert 'gpufleet_finding{host="gfn2",rule="HOST-HLT-001"' in lab.sh("gfn2", f"cat {TEXTFILE}")
    assert "slurm: node gfn2 takes jobs again after gpufleet drained it for kernel-log events" in outs[0]
    assert "slurm: no drain for HOST-HLT-001 (no fatal event that a resume has not followed)" in outs[1]
    out = outs[1]
    print(f"\n$ {run}   # after the resume, the old Xid 79 still in the window\n{out.rstrip()}")

    lab.sh("gfn2", f"printf %s '{_xid_line('gfn2', time.time(), pci='0000:5d:00')}' >>{KERN_LOG}")
    out = lab.sh("gfn2", run)
    row = lab.sinfo()["gfn2"]
    assert row["state"] == "drained" and "Xid 79" in row["reason"], (row, out)
    lab.resume_all()


def test_gpu_memory_full_while_swapping_never_drains(checker):
    """GPU-MEM-001 fails at critical (the workload's state) and the node stays idle. The host cannot be made to swap
    without touching its memory (host-wide), so a swap-rate threshold of 0 pages/s makes the measured rate count as
    swapping; the simulated GPUs' memory is 99 % used."""
    lab = checker
    lab.resume_all()
    _xid_config(lab, "gfn2", {"memory": {"swap_rate_pages_per_s": 0}})
    full = {f"gpu.{i}.memory_used": str(81000 * 1024 * 1024) for i in range(4)}
    lab.gpus("gfn2", **full)
    try:
        out = lab.sh("gfn2", f"python3 {WATCH} --config {XID_CONFIG}")
        text = lab.sh("gfn2", f"cat {TEXTFILE}")
        assert 'rule="GPU-MEM-001",severity="critical",area="memory",status="fail"} 1' in text, out
        assert lab.sinfo()["gfn2"]["state"] == "idle", out
        assert "slurm: no drain for GPU-MEM-001 (not a drain rule)" in out
        assert "slurm: node gfn2 is IDLE, no problem" in out
    finally:
        lab.gpus("gfn2")
