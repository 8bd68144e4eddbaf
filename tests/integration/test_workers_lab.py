"""Region-local execution through ansible-runner's streaming workers, in the podman lab: an execution node (a
container with sshd, prepared by playbooks/execution_node.yml over SSH, as an operator would) and two targets (sshd
containers) on the lab's internal network. ``gpufleet audit --worker`` audits the targets from the node (transmit ->
``ansible-runner worker`` over SSH -> process) and gives the same findings as the direct audit; a worker whose SSH
fails makes its hosts unreachable with the reason, and the direct hosts still report.

The link between the controller and the node is the lab's plain network here; bench/workers.py puts the targets and
the node behind the emulated 180 ms link.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import labkit
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from benchlib.ansible_link import SSHD_CONFIG, sshd_image  # noqa: E402

SSHD_BASE = "localhost/gpufleet-debian12:current"
PREFIX = "gpufleet-h8w-"

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make lab)"),
    pytest.mark.skipif(shutil.which("ssh") is None, reason="openssh-client is not installed"),
]


def _run(*argv: str, timeout: float = 120) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(argv)}: {res.stderr or res.stdout}"
    return res.stdout


def _ctl(lab, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``argv`` on the controller's side: inside the controller's namespace."""
    return subprocess.run(["ip", "netns", "exec", lab["ctl"], *argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Two network namespaces joined by a veth pair: the controller's (the CLI runs there) and the region's, where
    the node (sshd on port 22) and two targets (sshd on 2201, 2202) run as containers sharing its network. The
    keys' folder is mounted at the same path in the containers, so one inventory serves the controller (direct)
    and the node (worker). The node is prepared by playbooks/execution_node.yml over podman's connection (from
    this machine's own namespace, where the controller-side cache can be filled)."""
    if not shutil.which("ip") or subprocess.run(["podman", "image", "exists", SSHD_BASE]).returncode != 0:
        pytest.skip(f"ip or {SSHD_BASE} missing (make lab)")
    image = sshd_image()
    tmp = tmp_path_factory.mktemp("workers")
    keys = tmp / "keys"
    keys.mkdir()
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id_ed25519"), "-C", "gpufleet-h8w")
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "ssh_host_ed25519_key"))
    shutil.copy(keys / "id_ed25519.pub", keys / "authorized_keys")
    token = secrets.token_hex(3)
    ctl, region = f"{PREFIX}{token}-ctl", f"{PREFIX}{token}-region"
    names = {role: f"{PREFIX}{token}-{role}" for role in ("node", "t1", "t2")}
    ports = {"node": 22, "t1": 2201, "t2": 2202}
    octet = 100 + secrets.randbelow(150)
    addr = f"10.232.{octet}.2"
    started, made = [], []
    try:
        for ns in (ctl, region):
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "link", "add", "h8w0", "netns", ctl, "type", "veth", "peer", "name", "h8w1", "netns", region)
        for ns, dev, ip in ((ctl, "h8w0", f"10.232.{octet}.1/24"), (region, "h8w1", f"{addr}/24")):
            _run("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
        for role, name in names.items():
            conf = SSHD_CONFIG.format(addr=f"0.0.0.0:{ports[role]}").replace("/bench/", f"{keys}/")
            conf = conf.replace(f"{keys}/sshd.pid", f"/run/sshd-{role}.pid")
            (keys / f"sshd_config-{role}").write_text(conf)
            _run(
                "podman", "run", "-d", "--name", name, "--network", f"ns:/run/netns/{region}",
                "-v", f"{keys}:{keys}", "--hostname", f"h8w-{role}",
                image, "/usr/sbin/sshd", "-D", "-f", f"{keys}/sshd_config-{role}", "-E", "/tmp/sshd.log",
            )  # fmt: skip
            started.append(name)
        ssh_opts = (
            f"-i {keys}/id_ed25519 -o IdentitiesOnly=yes -o UserKnownHostsFile=/dev/null "
            "-o StrictHostKeyChecking=no -o LogLevel=ERROR -o ConnectTimeout=5"
        )
        lab = {"ctl": ctl, "tmp": tmp, "addr": addr, "ssh": ssh_opts, "names": names}
        for role in names:  # sshd listening
            for _ in range(50):
                probe = _ctl(lab, "ssh", *ssh_opts.split(), "-p", str(ports[role]), f"root@{addr}", "true", timeout=30)
                if probe.returncode == 0:
                    break
                time.sleep(0.2)
            else:
                pytest.fail(f"sshd in {names[role]} does not answer: {probe.stderr}")
        node_inv = labkit.write_inventory(
            tmp,
            {
                "node": {
                    "ansible_connection": "containers.podman.podman",
                    "ansible_host": names["node"],
                    "ansible_python_interpreter": "/usr/bin/python3",
                }
            },
            "node.yml",
        )
        lab["node_inventory"] = node_inv
        prep = _prepare(node_inv)
        assert prep.returncode == 0, prep.stdout[-4000:] + prep.stderr[-2000:]
        common = {
            "ansible_user": "root",
            "ansible_host": addr,
            "ansible_ssh_private_key_file": f"{keys}/id_ed25519",
            "ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no",
            "ansible_python_interpreter": "/usr/bin/python3",
            "gpufleet_sample_seconds": 0.2,
        }
        inventory = tmp / "fleet.yml"
        inventory.write_text(
            json.dumps(
                {
                    "all": {
                        "vars": common,
                        "children": {
                            "eu": {"hosts": {"t1": {"ansible_port": ports["t1"]}}},
                            "us": {"hosts": {"t2": {"ansible_port": ports["t2"]}}},
                        },
                    }
                }
            )
        )
        lab["inventory"] = inventory
        yield lab
    finally:
        for name in started:
            subprocess.run(["podman", "rm", "-f", "-t", "1", name], capture_output=True, timeout=60)
        for ns in made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def _prepare(inventory: Path) -> subprocess.CompletedProcess:
    """playbooks/execution_node.yml against the node, as an operator runs it."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory)]
    argv.append(str(REPO / "playbooks" / "execution_node.yml"))
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


def _audit(lab, out: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    argv = [sys.executable, "-m", "gpufleet.cli", "audit", "-i", str(lab["inventory"]), "--out", str(lab["tmp"] / out)]
    res = _ctl(lab, *argv, *extra)
    path = lab["tmp"] / out / "latest" / "report.json"
    assert path.is_file(), f"no report (rc {res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    report = json.loads(path.read_text())
    return res, report


def _verdicts(report: dict) -> dict:
    return {
        name: (h["status"], sorted((f["rule"], f["status"]) for f in h["findings"]))
        for name, h in report["hosts"].items()
    }


def test_execution_node_playbook_installed_the_worker(lab):
    """The node runs `ansible-runner worker` from its venv (no internet there: the wheels came from the
    controller's cache) and its Ansible finds the collection."""
    node = lab["names"]["node"]
    out = _run("podman", "exec", node, "/opt/gpufleet/venv/bin/ansible-runner", "--version")
    assert out.strip()
    listed = _run(
        "podman", "exec", "-e", "ANSIBLE_COLLECTIONS_PATH=/opt/gpufleet/collections", node,
        "/opt/gpufleet/venv/bin/ansible-galaxy", "collection", "list", "gpufleet.tuning",
    )  # fmt: skip
    assert "gpufleet.tuning" in listed


def test_worker_audit_gives_the_direct_findings(lab):
    """Both regions through the worker: the same hosts, statuses and findings as the direct audit; each host says
    how it was reached, the run lists the worker."""
    node = f"ssh://root@{lab['addr']}"
    direct_res, direct = _audit(lab, "direct")
    assert direct_res.returncode in (0, 1), direct_res.stderr[-3000:]
    res, via = _audit(lab, "via", "--worker", f"eu={node}", "--worker", f"us={node}", f"--worker-ssh-args={lab['ssh']}")
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert _verdicts(via) == _verdicts(direct)
    assert all(h["status"] == "ok" for h in via["hosts"].values())
    assert {n: h["via"] for n, h in via["hosts"].items()} == {"t1": "worker:eu", "t2": "worker:us"}
    assert sorted(w["region"] for w in via["run"]["workers"]) == ["eu", "us"]
    assert all(w["error"] is None for w in via["run"]["workers"])
    assert all(w["status"] == "successful" for w in via["run"]["workers"])


def test_failed_worker_makes_its_hosts_unreachable_others_report(lab):
    """eu's worker cannot be reached (nothing listens on its port): t1 is unreachable with ssh's reason, t2
    (direct) is audited; exit 2 (hosts not audited)."""
    bad = f"ssh://root@{lab['addr']}:2"
    res, report = _audit(lab, "broken", "--worker", f"eu={bad}", f"--worker-ssh-args={lab['ssh']}")
    assert res.returncode == 2, res.stderr[-3000:]
    t1, t2 = report["hosts"]["t1"], report["hosts"]["t2"]
    assert t1["status"] == "unreachable" and t1["via"] == "worker:eu"
    assert "worker eu" in t1["message"] and "Connection refused" in t1["message"], t1["message"]
    assert t2["status"] == "ok" and t2["via"] == "direct"
    assert report["run"]["workers"][0]["error"]


def test_worker_that_fails_on_the_node(lab):
    """The node answers SSH but has no ansible-runner where the URL says (a node not prepared): the worker's own
    error is the hosts' reason; the region with a good worker still reports through it."""
    good, bad = f"ssh://root@{lab['addr']}", f"ssh://root@{lab['addr']}/opt/missing/venv"
    res, report = _audit(
        lab, "no-runner", "--worker", f"eu={bad}", "--worker", f"us={good}", f"--worker-ssh-args={lab['ssh']}"
    )
    assert res.returncode == 2, res.stderr[-3000:]
    t1, t2 = report["hosts"]["t1"], report["hosts"]["t2"]
    assert t1["status"] == "unreachable" and "ansible-runner" in t1["message"] and "not found" in t1["message"]
    assert t2["status"] == "ok" and t2["via"] == "worker:us"


def _node_state(lab) -> tuple[set[str], list[str]]:
    """The node's /tmp entries and its ansible-runner, ansible-playbook and ProxyCommand (sleep 117) processes."""
    node = lab["names"]["node"]
    entries = set(_run("podman", "exec", node, "ls", "-A", "/tmp").split())
    procs = subprocess.run(
        ["podman", "exec", node, "ps", "-eo", "args="], capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    return entries, [p for p in procs if "ansible-runner" in p or "ansible-playbook" in p or "sleep 117" in p]


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_killed_ssh_leaves_nothing_on_the_node(lab):
    """The controller's ssh to the node is killed while the node audits t1 (whose connection hangs: a ProxyCommand
    that sleeps, so the playbook would wait for the host's 120 s timeout): the node's side of the stream closes,
    its wrapper stops ansible-runner worker, the playbook and its ssh, and removes the run's directory; /tmp on the
    node is as before and none of those processes is left, within 30 s."""
    import signal

    node = f"ssh://root@{lab['addr']}"
    inventory = json.loads(lab["inventory"].read_text())
    # port 2299: no ControlPersist master of the earlier tests' t1 connections (same host, port and user) is reused
    hang = {"ansible_port": 2299, "ansible_ssh_common_args": "-o ProxyCommand='sleep 117'"}
    inventory["all"]["children"]["eu"]["hosts"]["t1"].update(hang)
    slow = lab["tmp"] / "slow.yml"
    slow.write_text(json.dumps(inventory))
    before, procs = _node_state(lab)
    assert not procs, procs
    argv = [sys.executable, "-m", "gpufleet.cli", "audit", "-i", str(slow), "-l", "t1", "--out", str(lab["tmp"] / "k")]
    argv += ["--worker", f"eu={node}", f"--worker-ssh-args={lab['ssh']}"]
    cli = subprocess.Popen(["ip", "netns", "exec", lab["ctl"], *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        running: list[str] = []
        while time.monotonic() < deadline and not any("sleep 117" in p for p in running):
            time.sleep(0.5)
            running = _node_state(lab)[1]
        assert any("sleep 117" in p for p in running), f"the node never connected to t1: {running}"
        entries = _node_state(lab)[0]
        assert any(e.startswith("gpufleet-worker-") for e in entries - before), entries - before
        ssh = [p for p in _descendants(cli.pid) if Path(f"/proc/{p}/comm").read_text().strip() == "ssh"]
        assert len(ssh) == 1, ssh
        os.kill(ssh[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        entries, procs = _node_state(lab)
        while (entries - before or procs) and time.monotonic() < deadline:
            time.sleep(0.5)
            entries, procs = _node_state(lab)
        assert entries - before == set() and procs == [], (entries - before, procs)
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 2, err.decode()[-3000:]  # t1 unreachable: its worker's stream was cut
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
