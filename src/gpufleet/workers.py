"""Region-local execution: audit a region's hosts from an execution node inside the region, on ansible-runner's
streaming engine (the one AWX and receptor use: ``transmit`` -> ``worker`` -> ``process``).

For each region the controller packs the job (the audit playbook, ansible.cfg, an inventory of the region's hosts
with their variables, the extra vars) with ``ansible_runner.run(streamer='transmit')``, pipes the stream over SSH
into ``ansible-runner worker`` on the region's execution node, and reads the node's event stream back with
``ansible_runner.run(streamer='process')``. Only the job (a few kB) and the results cross the long link: the
per-host SSH connections, with their handshakes and round trips, stay inside the region.

A worker named ``ssh://user@node[:port][/path]`` runs ``<path>/bin/ansible-runner worker`` on ``node`` (``path``:
the node's gpufleet venv, ``/opt/gpufleet/venv`` as ``playbooks/execution_node.yml`` installs it; the collection
is found in ``<path>/../collections``). A worker that cannot be reached, fails or disconnects makes each of its
hosts that did not answer ``unreachable``, with the worker's reason; the other regions still report.

What the controller trusts of a node (a node in another region may be compromised):

- Its stream is read through ``worker_stream.StreamGuard``: JSON event and status lines only, bounded in size;
  the artifacts zip ansible-runner's worker appends is never unpacked on the controller (the processor would
  follow the zip's own symlinks out of its directory), only its directory read: a link, a special file or a path
  outside it is refused. A stream that breaks these rules makes every host of the region ``unreachable`` with the
  reason (its results are not kept).
- The job carries only what the audit reads of each host: Ansible's connection and become variables
  (``CONNECTION_VARS``, ``CONNECTION_PREFIXES``; the node must reach the hosts as the controller would, passwords
  included when the inventory uses them) and gpufleet's own ``gpufleet_*`` variables (the policy layers, the
  audit's settings). Every other inventory variable (a database password in group_vars, say) stays on the
  controller.
- Vault: a vaulted variable the job does not carry is never decrypted (an inventory whose unrelated vaulted
  variables need a password the controller was not given still plans). A vaulted variable the job carries is
  decrypted on the controller with the vault secrets Ansible is configured with (``ANSIBLE_VAULT_PASSWORD_FILE``,
  ``ANSIBLE_VAULT_IDENTITY_LIST`` or ansible.cfg, the same a direct run uses) and shipped in clear inside the SSH
  stream: the node has no vault password. Without a secret that opens it, planning stops with a UsageError
  naming the variable and the host.
- The node runs the job in its own temporary directory (``gpufleet-worker-*`` under its TMPDIR), removed when the
  worker ends, when the wrapper is signalled (SIGHUP, SIGINT, SIGTERM) and when the controller's side of the
  stream closes (the controller keeps ssh's stdin open until it has read the results: its end means the
  controller or the link is gone, and the wrapper stops the worker). Directories older than a day that a killed
  wrapper left are removed by the next run (``NODE_SCRIPT``).
- The ssh destination comes after ``--`` and a node or user name may not start with ``-``.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess  # nosec B404  # ssh to the execution node, an argv list, no shell
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpufleet import paths, worker_stream
from gpufleet.exits import UsageError
from gpufleet.runner import HostResult, collect, strategy_env

DEFAULT_VENV = "/opt/gpufleet/venv"
WORKER_VAR = "gpufleet_worker"  # inventory variable (per group or host): the region's worker URL
REGION_VAR = "gpufleet_worker_region"  # optional: the region's name (default: the worker node's host name)
DIRECT = "direct"
_HOST = re.compile(r"[A-Za-z0-9_.:%][A-Za-z0-9_.:%-]*")  # a host name or address: never an ssh option
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")  # a login name
# the ssh processes of the workers running now: a stop signal kills them (their streams end, their runs return)
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
# SSH to the execution node: never prompt, notice a dead link (ssh(1): ServerAliveInterval x ServerAliveCountMax).
SSH_BASE = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=15"]
SSH_BASE += ["-o", "ServerAliveCountMax=4"]
# What the job carries of a host's variables: Ansible's connection and become variables (ansible.constants'
# MAGIC_VARIABLE_MAPPING spells the same names, plus these prefixes for the connection plugins' own options) and
# gpufleet's variables; see the module docstring.
CONNECTION_VARS = frozenset(
    {
        "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user", "ansible_ssh_user",
        "ansible_connection", "ansible_password", "ansible_ssh_pass", "ansible_private_key_file",
        "ansible_ssh_private_key_file", "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_scp_extra_args",
        "ansible_sftp_extra_args", "ansible_ssh_executable", "ansible_ssh_pipelining", "ansible_pipelining",
        "ansible_ssh_timeout", "ansible_timeout", "ansible_ssh_transfer_method", "ansible_shell_type",
        "ansible_shell_executable", "ansible_module_compression", "ansible_python_interpreter",
        "ansible_remote_tmp", "ansible_docker_extra_args",
    }
)  # fmt: skip
CONNECTION_PREFIXES = ("ansible_become", "ansible_ssh_", "ansible_paramiko_", "ansible_podman_", "ansible_docker_")
OWN_PREFIX = "gpufleet_"
# On the node (its venv's python; argv: the venv, the job's size in bytes): read the job from stdin into a fresh
# directory, run `ansible-runner worker` on it with the events on stdout, stop the worker when stdin ends early
# (the controller holds it open until it has read the results) or on SIGHUP/SIGINT/SIGTERM, and remove the
# directory in every case. Stopping signals the worker and every process under it (ansible-playbook runs in its
# own session under pexpect, and the worker does not stop it on SIGTERM): SIGTERM, then SIGKILL after 10 s (a
# process is signalled only while /proc shows the same start time). Also removes what killed runs left
# (gpufleet-worker-* of this user, over a day old).
NODE_SCRIPT = r"""
import os, shutil, signal, subprocess, sys, tempfile, threading, time
venv, size = sys.argv[1], int(sys.argv[2])
base = tempfile.gettempdir()
for name in os.listdir(base):
    path = os.path.join(base, name)
    try:
        st = os.lstat(path)
        if name.startswith("gpufleet-worker-") and st.st_uid == os.getuid() and time.time() - st.st_mtime > 86400:
            shutil.rmtree(path)
    except OSError:
        pass
work = tempfile.mkdtemp(prefix="gpufleet-worker-")
worker = None
told = {}
rc = 70
def born(pid):
    try:
        with open("/proc/" + str(pid) + "/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[19]
    except (OSError, ValueError, IndexError):
        return None, None
def family(root):
    kids = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            ppid, start = born(entry)
            kids.setdefault(ppid, []).append((int(entry), start))
    found, todo = {}, [root]
    while todo:
        for pid, start in kids.get(todo.pop(), []):
            found[pid] = start
            todo.append(pid)
    return found
def signal_all(procs, sig):
    for pid, start in procs.items():
        if born(pid)[1] == start:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
def stop():
    if worker is not None and worker.poll() is None:
        procs = family(worker.pid)
        procs[worker.pid] = born(worker.pid)[1]
        told.update(procs)
        signal_all(procs, signal.SIGTERM)
def on_signal(signum, frame):
    stop()
    raise SystemExit(128 + signum)
def watch():
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    stop()
try:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    job_path = os.path.join(work, "job")
    with open(job_path, "wb") as job:
        left = size
        while left > 0:
            chunk = os.read(0, min(left, 65536))
            if not chunk:
                sys.stderr.write("gpufleet worker: the job arrived incomplete\n")
                raise SystemExit(65)
            job.write(chunk)
            left -= len(chunk)
    env = dict(os.environ, PATH=os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", ""))
    argv = [os.path.join(venv, "bin", "ansible-runner"), "worker", "--private-data-dir", os.path.join(work, "run")]
    with open(job_path, "rb") as job:
        worker = subprocess.Popen(argv, stdin=job, env=env)
    threading.Thread(target=watch, daemon=True).start()
    rc = worker.wait()
    rc = rc if rc >= 0 else 128 - rc
finally:
    if worker is not None:
        stop()
        if told:
            deadline = time.time() + 10
            while time.time() < deadline and any(born(pid)[1] == start for pid, start in told.items()):
                worker.poll()
                time.sleep(0.2)
            signal_all(told, signal.SIGKILL)
            worker.poll()
    shutil.rmtree(work, ignore_errors=True)
sys.exit(rc)
"""


@dataclass(frozen=True)
class Worker:
    """One region's execution node."""

    region: str
    url: str
    host: str
    user: str | None = None
    port: int | None = None
    venv: str = DEFAULT_VENV

    @property
    def via(self) -> str:
        return f"worker:{self.region}"

    @property
    def collections(self) -> str:
        return str(Path(self.venv).parent / "collections")

    def ssh_command(self, ssh_args: list[str] | None = None, job_bytes: int = 0) -> list[str]:
        """``ssh ... -- user@node '<venv>/bin/python -c NODE_SCRIPT <venv> <job_bytes>'``: the job (``job_bytes``
        long) on stdin, then stdin held open; the events of ansible-runner's worker on stdout. The destination comes
        after ``--``: never an option, whatever the inventory or URL says."""
        cmd = [*SSH_BASE, *(ssh_args or [])]
        if self.port:
            cmd += ["-p", str(self.port)]
        target = f"{self.user}@{self.host}" if self.user else self.host
        runner = f"{self.venv}/bin/ansible-runner"
        missing = f"{runner}: not found (prepare the node with playbooks/execution_node.yml)"
        remote = (
            f"test -x {shlex.quote(runner)} || {{ echo {shlex.quote(missing)} >&2; exit 127; }}; "
            f"exec {shlex.quote(self.venv + '/bin/python')} -c {shlex.quote(NODE_SCRIPT)} "
            f"{shlex.quote(self.venv)} {int(job_bytes)}"
        )
        return [*cmd, "--", target, remote]


def parse_url(region: str, url: str) -> Worker:
    """``ssh://user@node[:port][/venv]`` -> Worker; a UsageError names what is wrong."""
    where = f"--worker {region}={url}"
    if not region or any(c in region for c in " ,=:"):
        raise UsageError(f"{where}: REGION must be a name (an inventory group), without spaces, ',', '=' or ':'")
    parts = urlsplit(url)
    if parts.scheme != "ssh":
        raise UsageError(f"{where}: the worker must be an ssh:// URL (ssh://user@exec-node[:port]), got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"{where}: the port must be a number from 1 to 65535") from None
    if not parts.hostname:
        raise UsageError(f"{where}: the URL names no execution node (ssh://user@exec-node[:port])")
    if parts.query or parts.fragment or parts.password:
        raise UsageError(f"{where}: only ssh://user@exec-node[:port][/venv-path] is understood")
    if not _HOST.fullmatch(parts.hostname):
        raise UsageError(
            f"{where}: the execution node must be a host name or address (letters, digits, '.', '-', '_', ':'; "
            f"not starting with '-'), got {parts.hostname!r}"
        )
    if parts.username is not None and not _USER.fullmatch(parts.username):
        raise UsageError(
            f"{where}: the user must be a login name (letters, digits, '.', '-', '_'; not starting with '-'), "
            f"got {parts.username!r}"
        )
    venv = parts.path.rstrip("/") or DEFAULT_VENV
    return Worker(region, url, parts.hostname, parts.username, port, venv)


def parse_option(text: str) -> Worker:
    """``--worker REGION=ssh://user@node[:port]``."""
    region, sep, url = text.partition("=")
    if not sep:
        raise UsageError(f"--worker {text}: expected REGION=ssh://user@exec-node[:port]")
    return parse_url(region.strip(), url.strip())


@dataclass
class Plan:
    """Which hosts go through which worker (``by_worker``) and which the controller audits itself (``direct``),
    with each host's inventory variables: for a worker's host what the region's job ships (``shipped`` names,
    vaulted values decrypted), for a direct host the same names without vaulted values (the direct run reads the
    inventory itself; these are only read for the report)."""

    direct: list[str] = field(default_factory=list)
    by_worker: dict[Worker, list[str]] = field(default_factory=dict)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def via(self) -> dict[str, str]:
        out = {name: DIRECT for name in self.direct}
        for worker, names in self.by_worker.items():
            out.update({name: worker.via for name in names})
        return out


def shipped(name: str) -> bool:
    """Whether the region's job carries a host variable of this name (see the module docstring)."""
    if name == WORKER_VAR or name == REGION_VAR:
        return False  # the controller's routing, nothing the node needs
    return name.startswith(OWN_PREFIX) or name in CONNECTION_VARS or name.startswith(CONNECTION_PREFIXES)


class _Sealed(Exception):
    """A vaulted value left closed (a direct host's variables)."""


def _sealed(value: Any) -> str:
    raise _Sealed


def _vault_secrets(loader: Any) -> list:
    """The vault secrets Ansible is configured with (ANSIBLE_VAULT_PASSWORD_FILE, ANSIBLE_VAULT_IDENTITY_LIST,
    ansible.cfg), read now, as ansible-playbook reads them for a direct run; no prompt."""
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.errors import AnsibleError

    ids = list(C.config.get_config_value("DEFAULT_VAULT_IDENTITY_LIST") or [])
    password_file = C.config.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
    files = [str(password_file)] if password_file else []
    if not ids and not files:
        return []
    ids = CLI.build_vault_ids(ids, vault_password_files=files, ask_vault_pass=False, auto_prompt=False)
    secrets = []
    for slug in ids:
        vault_id, source = CLI.split_vault_id(slug)
        try:
            from ansible.parsing.vault import get_file_vault_secret

            secret = get_file_vault_secret(filename=source, vault_id=vault_id, loader=loader)
            secret.load()
        except AnsibleError as exc:
            raise UsageError(f"vault password file {source}: {exc}") from None
        secrets.append((vault_id or C.DEFAULT_VAULT_IDENTITY, secret))
    return secrets


def mentions_worker(inventory: list[str], limit_bytes: int = 50_000_000) -> bool:
    """Whether any inventory source (a file, or the files under a directory: group_vars, host_vars) names the
    ``gpufleet_worker`` variable: without it and without --worker, the audit need not read every host's variables
    again (at 1,000 hosts that costs seconds). A dynamic inventory whose files do not spell the name: use
    --worker."""
    needle = WORKER_VAR.encode()
    seen = 0
    for source in inventory:
        root = Path(source)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            try:
                size = path.stat().st_size
                if seen + size > limit_bytes:
                    return True  # too much to read: assume it may, and let plan() read the variables
                seen += size
                if needle in path.read_bytes():
                    return True
            except OSError:
                continue
    return False


def _ship_policy_file(kept: dict[str, Any], hostvars: Callable[[], dict[str, Any]], loader: Any, host: str) -> None:
    """A policy file the inventory names (gpufleet_policy_file: a path on the controller) travels as its content,
    read here: the node has no such file (plugin_utils/policy_layers.py takes either). ``hostvars``: the host's
    variables to template the path with (inventory_dir included), asked for only when the variable is set."""
    from ansible.template import Templar
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import policy_layers

    name = policy_layers.FILE_VARIABLE
    if kept.get(name) is None or isinstance(kept[name], dict):
        return
    try:
        values = hostvars()
        path = Templar(loader=loader, variables=values).template(values[name])
    except Exception as exc:  # an undefined variable or a template error in the inventory
        raise UsageError(f"{host}: {name}: {exc}") from None
    try:
        kept[name] = policy_layers.read_policy_file(path)
    except policy_layers.PolicyFileError as exc:
        raise UsageError(f"{host}: {exc}") from None


def plan(inventory: list[str], host_names: list[str], options: list[str]) -> Plan:
    """Assign each host: a ``--worker REGION=URL`` (REGION an inventory group or pattern; the first option that
    matches a host wins), else its ``gpufleet_worker`` inventory variable, else direct."""
    from ansible import constants as C
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import plain

    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=list(inventory))
    variables = VariableManager(loader=loader, inventory=inv)
    wanted = set(host_names)
    chosen: dict[str, Worker] = {}
    regions: dict[str, Worker] = {}
    for text in options:
        worker = parse_option(text)
        if worker.region in regions and regions[worker.region] != worker:
            raise UsageError(f"--worker {worker.region}: given twice with different URLs")
        regions[worker.region] = worker
        matched = [h.name for h in inv.get_hosts(pattern=worker.region)]
        if not matched:
            raise UsageError(f"--worker {text}: no host of the inventory is in {worker.region!r} (a group or pattern)")
        for name in matched:
            if name in wanted:
                chosen.setdefault(name, worker)
    secrets: list | None = None

    def decrypter(host: str, var: str) -> Callable[[Any], str]:
        def decrypt(value: Any) -> str:
            nonlocal secrets
            from ansible.errors import AnsibleError
            from ansible.parsing.vault import VaultLib

            if secrets is None:
                secrets = _vault_secrets(loader)
            how = "ANSIBLE_VAULT_PASSWORD_FILE, ANSIBLE_VAULT_IDENTITY_LIST or vault_password_file in ansible.cfg"
            if not secrets:
                raise UsageError(f"{var} of host {host} is vault-encrypted and the worker needs it: give its vault "
                                 f"password ({how})")  # fmt: skip
            ciphertext = value._ciphertext
            try:
                opened = VaultLib(secrets).decrypt(ciphertext)
            except AnsibleError as exc:
                raise UsageError(f"{var} of host {host} is vault-encrypted and cannot be decrypted: {exc}") from None
            return opened.decode("utf-8", "replace") if isinstance(opened, bytes) else str(opened)

        return decrypt

    result = Plan()
    for name in host_names:
        host = inv.get_host(name)
        hv = variables.get_vars(host=host, include_hostvars=False, stage="all") if host else {}
        for internal in C.INTERNAL_STATIC_VARS:
            hv.pop(internal, None)
        route = {k: plain(hv[k], decrypter(name, k)) for k in (WORKER_VAR, REGION_VAR) if hv.get(k) is not None}
        worker = chosen.get(name)
        if worker is None and route.get(WORKER_VAR):
            url = str(route[WORKER_VAR])
            region = str(route.get(REGION_VAR) or urlsplit(url).hostname or url)
            worker = parse_url(region, url)
            if region in regions and regions[region] != worker:
                raise UsageError(f"{WORKER_VAR}: region {region!r} has two workers ({regions[region].url}, {url})")
            regions[region] = worker
        names = [str(k) for k in hv if shipped(str(k))]
        if worker is None:
            result.direct.append(name)
            kept = {}
            for k in names:  # the direct run reads the inventory itself: nothing vaulted is opened here
                with contextlib.suppress(_Sealed):
                    kept[k] = plain(hv[k], _sealed)
        else:
            result.by_worker.setdefault(worker, []).append(name)
            kept = {k: plain(hv[k], decrypter(name, k)) for k in names}
            _ship_policy_file(kept, partial(variables.get_vars, host=host, include_hostvars=False), loader, name)
        result.hostvars[name] = kept
    return result


@dataclass
class WorkerRun:
    """What came back from one worker: each host's results (as ``runner.run_playbook`` collects them) and, when
    the worker itself failed, why."""

    worker: Worker
    hosts: dict[str, HostResult]
    status: str
    rc: int | None
    error: str | None = None
    wall_s: float = 0.0


def pack(
    job_dir: Path, playbook: Path, hostvars: dict[str, dict[str, Any]], extravars: dict[str, Any], worker: Worker
) -> dict[str, Any]:
    """Lay out the region's job as an ansible-runner private data dir: project/<playbook> and project/ansible.cfg
    (the worker runs ansible-playbook in project/, where Ansible reads ansible.cfg from the current directory),
    the region's hosts with their variables as the inventory. Returns ansible-runner's keyword arguments."""
    project = job_dir / "project"
    project.mkdir(parents=True)
    shutil.copy(playbook, project / playbook.name)
    cfg = paths.collection_root() / "ansible.cfg"
    if cfg.is_file():
        shutil.copy(cfg, project / "ansible.cfg")
    return {
        "private_data_dir": str(job_dir),
        "playbook": playbook.name,
        "inventory": {"all": {"hosts": hostvars}},
        "extravars": extravars,
        # the node's installed collection; the rest of its environment is its own
        "envvars": {
            "ANSIBLE_COLLECTIONS_PATH": worker.collections,
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            **strategy_env(),  # the node's collection has the strategy too
        },
    }


def run_worker(
    worker: Worker,
    playbook: Path,
    hostvars: dict[str, dict[str, Any]],
    extravars: dict[str, Any],
    forks: int | None = None,
    ssh_args: list[str] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    timeout_s: float | None = None,
    max_stream_bytes: int = worker_stream.MAX_STREAM_BYTES,
    max_line_bytes: int = worker_stream.MAX_LINE_BYTES,
) -> WorkerRun:
    """transmit -> ssh worker -> process for one region. Never raises for a worker's failure: it is in ``error``.
    The node's stream reaches the processor through a ``worker_stream.StreamGuard`` (``max_stream_bytes``,
    ``max_line_bytes``); a stream it refuses leaves no host result."""
    import ansible_runner

    started = time.monotonic()
    hosts: dict[str, HostResult] = {}
    statuses: list[dict[str, Any]] = []
    said: list[str] = []  # the playbook's last output lines: why a run without results failed

    def handler(event: dict[str, Any]) -> bool:
        collect(hosts, event)
        text = str(event.get("stdout") or "").strip()
        if text:
            said[:] = [line.strip() for line in text.splitlines() if line.strip()][-3:]
        if on_event is not None:
            on_event(event)
        return False  # kept in memory only: no job_events files on the controller

    with tempfile.TemporaryDirectory(prefix="gpufleet-worker-") as tmp:
        job = Path(tmp) / "job"
        kwargs = pack(job, playbook, hostvars, extravars, worker)
        if forks:
            kwargs["cmdline"] = f"--forks {int(forks)}"
        stream = Path(tmp) / "job.stream"
        try:
            with open(stream, "wb") as fh:
                ansible_runner.run(streamer="transmit", _output=fh, quiet=True, **kwargs)
        except Exception as exc:  # a job that cannot be packed is this region's failure, not the whole audit's
            return WorkerRun(worker, hosts, "error", None, f"could not pack the job: {exc}", time.monotonic() - started)
        err_path = Path(tmp) / "ssh.stderr"
        job_bytes = stream.stat().st_size
        with open(err_path, "wb") as stderr:
            try:
                proc = subprocess.Popen(  # nosec B603  # argv list (ssh, the node's ansible-runner worker), no shell
                    worker.ssh_command(ssh_args, job_bytes),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                )
            except OSError as exc:
                return WorkerRun(worker, hosts, "error", None, f"ssh: {exc}", time.monotonic() - started)
            with _LIVE_LOCK:
                _LIVE.add(proc)

            def send() -> None:  # the job, then stdin stays open: its end tells the node the controller is gone
                with contextlib.suppress(OSError, ValueError), open(stream, "rb") as job:
                    shutil.copyfileobj(job, proc.stdin)
                    proc.stdin.flush()

            sender = threading.Thread(target=send, name=f"gpufleet-job-{worker.region}", daemon=True)
            sender.start()

            def kill(reason: object = None) -> None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

            timer = None
            timed_out = threading.Event()
            if timeout_s:

                def expire() -> None:
                    timed_out.set()
                    kill()

                timer = threading.Timer(timeout_s, expire)
                timer.daemon = True
                timer.start()
            guard = worker_stream.StreamGuard(proc.stdout, max_stream_bytes, max_line_bytes, on_error=kill)
            try:
                processed = ansible_runner.run(
                    streamer="process",
                    _input=guard,
                    private_data_dir=str(Path(tmp) / "process"),
                    event_handler=handler,
                    status_handler=lambda data, runner_config=None: statuses.append(data),
                    cancel_callback=lambda: False,
                    quiet=True,
                )
            finally:
                if timer:
                    timer.cancel()
                if sender.is_alive():  # ssh took no job (a hung link): nothing more will come from it
                    kill()
                sender.join()
                with contextlib.suppress(Exception):
                    proc.stdin.close()  # the node's worker has ended (or is told to end)
                with contextlib.suppress(Exception):
                    proc.stdout.close()
                try:
                    ssh_rc = proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    ssh_rc = proc.wait()
                with _LIVE_LOCK:
                    _LIVE.discard(proc)
        status, rc = processed.status, processed.rc
        error = None
        explanation = next((s.get("job_explanation") for s in reversed(statuses) if s.get("job_explanation")), None)
        if guard.error:
            hosts.clear()  # a node that broke the protocol: none of its results is kept
            error = guard.error
        elif timed_out.is_set():
            error = f"no end of the worker's stream within {timeout_s:g} s"
        elif ssh_rc == 255 or status in ("error", "failed") and not hosts:
            ssh_said = err_path.read_text(errors="replace").strip().splitlines()
            detail = ssh_said[-1] if ssh_said else explanation or " ".join(said) or f"ssh exited {ssh_rc}"
            error = f"ssh {worker.url}: {detail}" if ssh_rc == 255 else f"worker {worker.url}: {detail}"
        elif status == "error":
            error = explanation or "the worker's stream ended early"
    return WorkerRun(worker, hosts, status, rc, error, time.monotonic() - started)


def unreachable_result(worker: Worker, reason: str) -> dict[str, Any]:
    """The audit result a host gets when its region's worker failed: ``unreachable`` (fleet.host_entry's reading),
    with the worker's reason."""
    return {"unreachable": True, "msg": f"worker {worker.region} ({worker.url}) failed: {reason}"}


@dataclass
class Outcome:
    """The whole audit: each host's audit result (None: none came back), how each host was reached, each
    worker's run and the direct run (None when every host has a worker)."""

    results: dict[str, dict[str, Any] | None]
    via: dict[str, str]
    workers: list[WorkerRun]
    direct: Any = None
    interrupted: str | None = None  # "SIGINT" / "SIGTERM": the audit was stopped; hosts without a result have None


def stop_workers() -> None:
    """Kill the ssh of every worker running now (ansible-runner worker on the node stops when its input ends)."""
    with _LIVE_LOCK:
        for proc in list(_LIVE):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()  # ssh ends its session (and a ProxyCommand) on SIGTERM


def run_all(
    the_plan: Plan,
    inventory: list[str],
    playbook: str,
    action: str,
    extravars: dict[str, Any],
    forks: int | None = None,
    ssh_args: list[str] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    quiet: bool = True,
    timeout_s: float | None = None,
    max_stream_bytes: int = worker_stream.MAX_STREAM_BYTES,
    max_line_bytes: int = worker_stream.MAX_LINE_BYTES,
) -> Outcome:
    """Every region's worker (each in its own thread) and the direct hosts (from this thread, so that Ctrl-C
    stops them as a plain audit does), at the same time. ``action``: the module whose result is a host's audit;
    ``extravars``: the run's extra vars, the report directory left to each part (the caller builds the report)."""
    from gpufleet.runner import Stopper, run_playbook

    lock = threading.Lock()

    def locked(event: dict[str, Any]) -> None:
        if on_event is not None:
            with lock:
                on_event(event)

    playbook_path = Path(playbook) if "/" in playbook else paths.collection_root() / "playbooks" / playbook
    runs: list[WorkerRun] = []
    threads = []
    for worker, names in the_plan.by_worker.items():
        hostvars = {name: the_plan.hostvars.get(name, {}) for name in names}
        # the worker's own report goes to its job directory, deleted with it: the controller builds the report
        node_vars = {**extravars, "gpufleet_report_dir": "{{ playbook_dir }}/reports"}

        def one(worker: Worker = worker, hostvars: dict = hostvars, node_vars: dict = node_vars) -> None:
            run = run_worker(
                worker, playbook_path, hostvars, node_vars, forks, ssh_args, locked, timeout_s,
                max_stream_bytes, max_line_bytes,
            )  # fmt: skip
            with lock:
                runs.append(run)

        thread = threading.Thread(target=one, name=f"gpufleet-worker-{worker.region}", daemon=True)
        thread.start()
        threads.append(thread)
    direct = None
    if the_plan.direct:
        with tempfile.TemporaryDirectory(prefix="gpufleet-direct-") as tmp:
            direct = run_playbook(
                str(playbook_path),
                inventory,
                limit=",".join(the_plan.direct),
                extravars={**extravars, "gpufleet_report_dir": tmp},
                forks=forks,
                quiet=quiet,
                on_event=locked,
            )
    interrupted = direct.interrupted if direct is not None else None
    if interrupted:
        stop_workers()
    else:  # Ctrl-C or SIGTERM while only workers run: stop them, keep what arrived
        stopper = Stopper()
        with stopper.installed():
            pending = list(threads)
            while pending and not stopper.signals:
                pending[0].join(timeout=0.2)
                pending = [t for t in pending if t.is_alive()]
        if stopper.signals:
            interrupted = stopper.interrupted
            stop_workers()
    for thread in threads:
        thread.join()
    results: dict[str, dict[str, Any] | None] = {}
    for name in the_plan.direct:
        host = direct.hosts.get(name) if direct else None
        results[name] = host.actions.get(action) if host else None
    for run in runs:
        for name in the_plan.by_worker[run.worker]:
            host = run.hosts.get(name)
            result = host.actions.get(action) if host else None
            if result is None and run.error and not interrupted:
                result = unreachable_result(run.worker, run.error)
            results[name] = result
    runs.sort(key=lambda r: r.worker.region)
    return Outcome(results, the_plan.via(), runs, direct, interrupted)
