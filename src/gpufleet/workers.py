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
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess  # nosec B404  # ssh to the execution node, an argv list, no shell
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpufleet import paths
from gpufleet.exits import UsageError
from gpufleet.runner import HostResult, _clean, _message, action_of, strategy_env

DEFAULT_VENV = "/opt/gpufleet/venv"
WORKER_VAR = "gpufleet_worker"  # inventory variable (per group or host): the region's worker URL
REGION_VAR = "gpufleet_worker_region"  # optional: the region's name (default: the worker node's host name)
DIRECT = "direct"
# the ssh processes of the workers running now: a stop signal kills them (their streams end, their runs return)
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
# SSH to the execution node: never prompt, notice a dead link (ssh(1): ServerAliveInterval x ServerAliveCountMax).
SSH_BASE = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=15"]
SSH_BASE += ["-o", "ServerAliveCountMax=4"]


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

    def ssh_command(self, ssh_args: list[str] | None = None) -> list[str]:
        """``ssh ... user@node 'PATH=<venv>/bin:$PATH ansible-runner worker'``: the job on stdin, events on stdout
        (ansible-runner's worker reads the transmitted job from stdin and streams its events to stdout)."""
        cmd = [*SSH_BASE, *(ssh_args or [])]
        if self.port:
            cmd += ["-p", str(self.port)]
        target = f"{self.user}@{self.host}" if self.user else self.host
        bin_dir = shlex.quote(f"{self.venv}/bin")
        remote = f"PATH={bin_dir}:$PATH exec ansible-runner worker"
        return [*cmd, target, remote]


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
    with each host's inventory variables (what the region's job ships)."""

    direct: list[str] = field(default_factory=list)
    by_worker: dict[Worker, list[str]] = field(default_factory=dict)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def via(self) -> dict[str, str]:
        out = {name: DIRECT for name in self.direct}
        for worker, names in self.by_worker.items():
            out.update({name: worker.via for name in names})
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


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


def plan(inventory: list[str], host_names: list[str], options: list[str]) -> Plan:
    """Assign each host: a ``--worker REGION=URL`` (REGION an inventory group or pattern; the first option that
    matches a host wins), else its ``gpufleet_worker`` inventory variable, else direct."""
    from ansible import constants as C
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

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
    result = Plan()
    for name in host_names:
        host = inv.get_host(name)
        hv = variables.get_vars(host=host, include_hostvars=False, stage="all") if host else {}
        for internal in C.INTERNAL_STATIC_VARS:
            hv.pop(internal, None)
        hv = _plain(hv)
        result.hostvars[name] = hv
        worker = chosen.get(name)
        if worker is None and hv.get(WORKER_VAR):
            url = str(hv[WORKER_VAR])
            region = str(hv.get(REGION_VAR) or urlsplit(url).hostname or url)
            worker = parse_url(region, url)
            if region in regions and regions[region] != worker:
                raise UsageError(f"{WORKER_VAR}: region {region!r} has two workers ({regions[region].url}, {url})")
            regions[region] = worker
        if worker is None:
            result.direct.append(name)
        else:
            result.by_worker.setdefault(worker, []).append(name)
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


def collect(hosts: dict[str, HostResult], event: dict[str, Any]) -> None:
    """Record a task event's result under its host (the same reading as runner.run_playbook)."""
    data = event.get("event_data") or {}
    name = data.get("host")
    kind = event.get("event")
    if not name or kind not in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
        return
    h = hosts.setdefault(name, HostResult(name))
    task, action, res = data.get("task", ""), action_of(data), _clean(data.get("res") or {})
    if kind == "runner_on_ok":
        h.record(task, action, res)
    elif kind == "runner_on_failed":
        h.record(task, action, res)
        h.status, h.message = "failed", f"{task}: {_message(res)}"
    else:
        h.record(task, action, {**res, "unreachable": True})
        h.status, h.message = "unreachable", _message(res)


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
) -> WorkerRun:
    """transmit -> ssh worker -> process for one region. Never raises for a worker's failure: it is in ``error``."""
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
        with open(stream, "rb") as stdin, open(err_path, "wb") as stderr:
            try:
                proc = subprocess.Popen(  # nosec B603  # argv list (ssh, the node's ansible-runner worker), no shell
                    worker.ssh_command(ssh_args), stdin=stdin, stdout=subprocess.PIPE, stderr=stderr
                )
            except OSError as exc:
                return WorkerRun(worker, hosts, "error", None, f"ssh: {exc}", time.monotonic() - started)
            with _LIVE_LOCK:
                _LIVE.add(proc)
            timer = None
            timed_out = threading.Event()
            if timeout_s:

                def expire() -> None:
                    timed_out.set()
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()

                timer = threading.Timer(timeout_s, expire)
                timer.daemon = True
                timer.start()
            try:
                processed = ansible_runner.run(
                    streamer="process",
                    _input=proc.stdout,
                    private_data_dir=str(Path(tmp) / "process"),
                    event_handler=handler,
                    status_handler=lambda data, runner_config=None: statuses.append(data),
                    cancel_callback=lambda: False,
                    quiet=True,
                )
            finally:
                if timer:
                    timer.cancel()
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
        if timed_out.is_set():
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
            run = run_worker(worker, playbook_path, hostvars, node_vars, forks, ssh_args, locked, timeout_s)
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
