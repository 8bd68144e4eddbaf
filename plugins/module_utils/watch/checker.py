# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet-watch: the audit's readers and rules, run on the host itself.

The watch role installs this as ``/usr/local/sbin/gpufleet-watch`` (one zipapp built by ``watch/bundle.py`` from the
collection's module_utils: the same code the audit module runs) with ``/etc/gpufleet/watch.json`` (the host's name
and site, its effective policy merged and validated by the role exactly as the audit merges it, and the audit's
reader options) and a systemd timer. Nothing else is needed on the host at run time: no Ansible, no controller.

``gpufleet-watch [--config FILE] [--mode run|npd] [--print] [--record-baseline]``

- ``run`` (the timer, or Slurm's HealthCheckProgram): one check; writes ``<watch.textfile_dir>/gpufleet.prom``
  (node_exporter's textfile collector) and ``watch.state_file`` atomically; logs one line per run and one per
  finding that started or cleared (stdout: the journal under systemd; each line through ``text.clean``, so a
  newline or escape sequence in a process name or kernel-log line stays inside its line); with
  ``watch.slurm.drain``, drains or resumes this host's Slurm node (``watch/slurm.py``) for the findings of the drain
  rules only, a kernel-log event only until a resume followed it (``watch/drain.py``; its position is kept in the
  state file, key ``drain``).
  Exit 0 when the host was checked, 2 when it could not be.
- ``npd`` (a Kubernetes node-problem-detector custom plugin): writes nothing; prints one line of at most 80
  characters and exits 0 (no problem), 1 (a finding failing at or above ``watch.problem_severity``) or 2 (unknown:
  the check could not run).
- ``--print``: the textfile on stdout; no file is written, no Slurm call is made.
- The baseline (``watch/baseline.py``): the first complete run (the role runs one at install) records the GPUs, the
  NVSwitches and the active RDMA ports in ``watch-baseline.json`` next to the state file; later runs are judged
  against it (its GPU count is GPU-HLT-003's expected count unless the policy sets ``health.expected_gpu_count``)
  and export and log what is missing. ``--record-baseline`` records it again from this run (after a deliberate
  hardware change).

Apart from its two output files and, when enabled, the Slurm node's state, the checker changes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import shutil
import socket
import subprocess  # nosec B404  # runs the readers' fixed tools (ethtool, nvidia-smi, scontrol) with argv lists
import sys
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils import audit_core, nvml, probe, programs, prometheus_text
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules as catalog
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import UnsafeDirectory, read_record, write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import balance
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import SEVERITIES, PolicyError, validate
from ansible_collections.gpufleet.tuning.plugins.module_utils.text import clean
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import baseline, drain, slurm

DEFAULT_CONFIG = "/etc/gpufleet/watch.json"
REEXEC_MARKER = "GPUFLEET_WATCH_ENVIRONMENT"
TEXTFILE_NAME = "gpufleet.prom"
STATE_VERSION = 1
EXIT_OK, EXIT_PROBLEM, EXIT_UNKNOWN = 0, 1, 2
NPD_MESSAGE_MAX = 80  # node-problem-detector's default maximum output length of a custom plugin
# Where the GPU and network tools live on the distributions gpufleet supports, for a systemd unit's short PATH.
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
AUDIT_OPTIONS = {
    # option: (default, type); the audit module's options of the same names
    "root": ("/", str),
    "backend": ("auto", str),
    "nvml_library": (None, str),
    "nvidia_smi_path": (None, str),
    "ethtool_path": (None, str),
    "interfaces": (None, list),
    "sample_seconds": (1.0, (int, float)),
    "kernel_log": ("auto", str),
    "kernel_log_file": ("/var/log/kern.log", str),
    "kernel_log_lines": (5000, int),
    "kernel_log_since_hours": (24, int),
    "peer_timeout": (3.0, (int, float)),
}


class CheckError(Exception):
    """The host could not be checked (bad configuration, a reader that refused): exit 2, no findings."""


class HostModule(object):
    """What the readers need of an AnsibleModule (audit_core's contract), without Ansible."""

    def __init__(self, params):
        self.params = params
        self.check_mode = True  # the checker never changes the host

    def fail_json(self, msg, **_kwargs):
        raise CheckError(msg)

    def get_bin_path(self, name, required=False):
        path = os.pathsep.join([os.environ.get("PATH", "")] + list(SEARCH_PATH))
        found = shutil.which(name, path=path)
        if found is None and required:
            raise CheckError("%s: command not found" % name)
        return found

    def run_command(self, args, environ_update=None, handle_exceptions=True, **_kwargs):
        env = dict(os.environ)
        env.update(environ_update or {})
        try:
            pipe = subprocess.PIPE
            proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=pipe,  # nosec B603  # argv list, no shell
                                  stderr=pipe, env=env, timeout=120, check=False)
        except subprocess.TimeoutExpired as exc:
            return 124, "", "%s: timed out after %s s" % (args[0], exc.timeout)
        except OSError as exc:
            if not handle_exceptions:
                raise
            return 127, "", "%s: %s" % (args[0], exc)
        return (proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


def load_config(path):
    """The checker's configuration with the policy validated and the audit options typed; CheckError otherwise."""
    try:
        with open(path) as f:
            config = json.load(f)
    except (IOError, OSError) as exc:
        raise CheckError("config %s: %s (the watch role writes it)" % (path, exc)) from exc
    except ValueError as exc:
        raise CheckError("config %s: not JSON: %s" % (path, exc)) from exc
    if not isinstance(config, dict):
        raise CheckError("config %s: expected a JSON object" % path)
    unknown = sorted(set(config) - {"host", "site", "policy", "audit", "environment", "version"})
    if unknown:
        raise CheckError("config %s: unknown key(s) %s (known: audit, environment, host, policy, site, version)"
                         % (path, ", ".join(unknown)))
    environment = config.get("environment") or {}
    if not isinstance(environment, dict) or not all(isinstance(v, str) for v in environment.values()):
        raise CheckError("config %s: environment: expected an object of strings, got %r" % (path, environment))
    host = config.get("host") or socket.gethostname()
    try:
        policy = validate(config.get("policy") or {}, known_rules=catalog.BY_ID)
    except PolicyError as exc:
        raise CheckError("config %s: %s" % (path, exc)) from exc
    audit = dict((k, v[0]) for k, v in AUDIT_OPTIONS.items())
    for key, value in (config.get("audit") or {}).items():
        if key not in AUDIT_OPTIONS:
            raise CheckError("config %s: audit.%s: unknown option (known: %s)"
                             % (path, key, ", ".join(sorted(AUDIT_OPTIONS))))
        kind = AUDIT_OPTIONS[key][1]
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise CheckError("config %s: audit.%s: expected %s, got %r"
                             % (path, key, getattr(kind, "__name__", "a number"), value))
        audit[key] = value
    if audit["backend"] not in ("auto", "pynvml", "nvidia-smi"):
        raise CheckError("config %s: audit.backend: %r is not one of auto, pynvml, nvidia-smi"
                         % (path, audit["backend"]))
    return {"host": str(host), "site": config.get("site") or policy.get("site"), "policy": policy, "audit": audit,
            "environment": dict((str(k), v) for k, v in environment.items()),
            "version": str(config.get("version") or "unknown")}


def reexec_with_environment(environment):
    """Start again with the configured environment (LD_LIBRARY_PATH for a driver in /opt...) where it differs: the
    dynamic loader reads it only at process start. Once: the marker variable stops a second round. Slurm's
    HealthCheckProgram and node-problem-detector give the program their own environment, so it is applied here and
    not in the systemd unit."""
    if not environment or os.environ.get(REEXEC_MARKER) == "1":
        return
    if all(os.environ.get(k) == v for k, v in environment.items()):
        return
    env = dict(os.environ)
    env.update(environment)
    env[REEXEC_MARKER] = "1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)  # nosec B606  # itself again, same arguments


def check(config, policy=None):
    """One audit of this host with the configured policy (audit_core.run), or ``policy`` (the baseline's)."""
    audit = config["audit"]
    if not os.path.isdir(audit["root"]):
        raise CheckError("audit.root: not a directory: %s" % audit["root"])
    module = HostModule({"backend": audit["backend"], "nvml_library": audit["nvml_library"],
                         "nvidia_smi_path": audit["nvidia_smi_path"]})
    return audit_core.run(module, policy or config["policy"], root=audit["root"], interfaces=audit["interfaces"],
                          sample_seconds=audit["sample_seconds"], kernel_log=audit["kernel_log"],
                          kernel_log_file=audit["kernel_log_file"], kernel_log_lines=audit["kernel_log_lines"],
                          kernel_log_since_hours=audit["kernel_log_since_hours"], ethtool=audit["ethtool_path"],
                          peer_timeout=audit["peer_timeout"])


def add_probe(config, result):
    """With watch.probe_seconds, the balance probe's sample (module_utils/probe.py, as module gpu_probe takes it) and
    the HOST-BAL rules judged on it, in place of the audit's "no probe sample" skips."""
    seconds = config["policy"]["watch"]["probe_seconds"]
    if not seconds:
        return
    try:
        nv = nvml.load_pynvml(config["audit"]["nvml_library"])
    except (ImportError, OSError) as exc:
        sample = {"available": False, "error": "pynvml: %s" % exc, "gpus": [], "processes": []}
    else:
        sample = probe.collect(nv, sys_fs=HostFS(config["audit"]["root"]), proc_fs=HostFS("/"), sample_seconds=seconds)
    judged = dict((f["rule"], f) for f in catalog.evaluate({"probe": sample}, config["policy"], rules=balance.RULES))
    result["findings"] = [judged.get(f.get("rule"), f) for f in result["findings"]]
    result["summary"] = catalog.summarize(result["findings"])
    result["facts"]["probe"] = sample


def _rank(severity):
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def problems(findings, severity):
    """Findings failing at or above ``severity``, worst first."""
    bad = [f for f in findings if f.get("status") == "fail" and _rank(f.get("severity")) <= _rank(severity)]
    return sorted(bad, key=lambda f: (_rank(f.get("severity")), f.get("rule", "")))


def is_clean(result):
    """A complete run: every rule evaluated (no error finding) and the GPUs really read (NVML or nvidia-smi answered
    and listed at least one GPU). Only then may a node be resumed: a run in which the driver did not answer skips
    every GPU rule, and skipped is not repaired."""
    if result is None:
        return False
    gpu = result["facts"].get("gpu")
    if not isinstance(gpu, dict) or not (gpu.get("nvml") or {}).get("available") or not gpu.get("gpus"):
        return False
    return not any(f.get("status") == "error" for f in result["findings"])


def where(finding):
    """'GPU 1, 3' / 'eth0' / '' from a finding's items."""
    gpus, nics = [], []
    for item in finding.get("items") or []:
        if not isinstance(item, dict):
            continue
        if item.get("gpu") is not None and str(item["gpu"]) not in gpus:
            gpus.append(str(item["gpu"]))
        elif item.get("nic") and item["nic"] not in nics:
            nics.append(str(item["nic"]))
    parts = []
    if gpus:
        parts.append("GPU " + ", ".join(gpus))
    if nics:
        parts.append(", ".join(nics))
    return "; ".join(parts)


def state_entries(findings, previous, now):
    """The state file's findings: rule -> {status, severity, area, where, message, since}."""
    out = {}
    for f in prometheus_text.findings_of(findings):
        before = previous.get(f["rule"]) if isinstance(previous, dict) else None
        same = isinstance(before, dict) and before.get("status") == f["status"]
        out[f["rule"]] = {"status": f["status"], "severity": f.get("severity"), "area": f.get("area"),
                          "where": where(f), "message": f.get("message", ""),
                          "since": before.get("since", now) if same else now}
    return out


def changes(previous, current):
    """One log line per finding that started, changed status or place, or cleared."""
    lines = []
    verbs = {"fail": "failing", "warn": "warning"}
    for rule in sorted(set(previous) | set(current)):
        before, now = previous.get(rule), current.get(rule)
        if now is None:
            place = " on %s" % before.get("where") if before.get("where") else ""
            lines.append("%s cleared (was %s%s)" % (rule, verbs.get(before.get("status"), before.get("status")), place))
            continue
        place = " on %s" % now["where"] if now["where"] else ""
        if before is None or before.get("status") != now["status"]:
            lines.append("%s started %s%s [%s]: %s" % (rule, verbs[now["status"]], place, now["severity"],
                                                       now["message"]))
        elif before.get("where") != now["where"]:
            lines.append("%s still %s, now%s" % (rule, verbs[now["status"]], place or " on the host"))
    return lines


def read_state(path):
    return read_record(path, STATE_VERSION) or {}


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id(root="/"):
    """The running kernel's boot id (a new one every boot), or None."""
    text = HostFS(root).read(BOOT_ID)
    return text.strip() or None if text else None


def slurm_step(config, result, previous, run_command, log):
    """Drain or resume this host's Slurm node for this run: (slurm state, drain state) for the state file.

    The node is read first: when the previous run had drained it for kernel-log events (``drain.drained_for``) and
    it now takes jobs again, it was resumed, and those events are acknowledged (watch/drain.py). Then only the
    findings that drain (drain rules at or above watch.slurm.drain_severity, kernel-log events not acknowledged) go
    to ``slurm.reconcile``."""
    settings = config["policy"]["watch"]["slurm"]
    node = settings["node_name"] or socket.gethostname().split(".")[0]
    log_fact = (result["facts"].get("host") or {}).get("kernel_log") or {}
    boot, source = boot_id(config["audit"]["root"]), log_fact.get("source")
    before = previous.get("drain") if isinstance(previous.get("drain"), dict) else {}
    acknowledged = drain.applies(before.get("acknowledged"), boot, source)
    drained_for = before.get("drained_for")
    if drained_for and before.get("boot_id") != boot and source != "file":
        drained_for = None  # events of a boot whose log is gone (dmesg/journal show the running boot only)
    current, _why = slurm.show_node(run_command, node)
    if drained_for and current is not None and not slurm.unavailable(current):
        acknowledged = drain.merge(acknowledged, drained_for)
        log("slurm: node %s takes jobs again after gpufleet drained it for kernel-log events: those events no "
            "longer drain it, new ones do" % node)
        drained_for = None
    to_drain = drain.findings_that_drain(result["findings"], settings["drain_severity"], acknowledged)
    draining = set(f.get("rule") for f in to_drain)
    held = []
    for p in problems(result["findings"], config["policy"]["watch"]["problem_severity"]):
        if p.get("rule") in draining:
            continue
        if p.get("rule") not in drain.DRAIN_RULES:
            why = "not a drain rule"
        elif p.get("rule") in drain.KERNEL_LOG_RULES:
            why = "no fatal event that a resume has not followed"
        else:
            why = "below watch.slurm.drain_severity"
        held.append("%s (%s)" % (p.get("rule"), why))
    if held:
        log("slurm: no drain for %s" % ", ".join(held))
    outcome = slurm.reconcile(run_command, node, to_drain, is_clean(result), settings, current=current)
    if outcome.get("drained"):
        drained_for = drain.merge(drained_for, drain.events(to_drain))
    slurm_state = {"node": node, "drained": bool(outcome.get("drained")),
                   "suppressed": bool(outcome.get("suppressed")), "reason": outcome.get("reason"),
                   "action": outcome.get("action")}
    drain_state = {"boot_id": boot, "source": source, "drained_for": drained_for,
                   "acknowledged": dict(acknowledged, boot_id=boot) if acknowledged else None}
    if outcome.get("message"):
        log("slurm: %s" % outcome["message"])
    return slurm_state, drain_state


def textfile(config, result, state, run):
    """The node_exporter textfile: the controller report's finding families, then the checker's own."""
    host = config["host"]
    s = prometheus_text.sample
    hl = [("host", host)]
    findings = result["findings"] if result else []
    families = []
    if result is not None:
        families.append(("finding", prometheus_text.FINDING_HELP, prometheus_text.finding_samples(host, findings)))
        families.append(("host_up", "1: this host was checked (the watch runs on the host itself).",
                         [s("host_up", hl + [("status", "ok")], 1)]))
        families.append(("host_findings", prometheus_text.HOST_FINDINGS_HELP,
                         prometheus_text.host_findings_samples(host, findings, SEVERITIES)))
        families.append(("audit_timestamp_seconds", "Unix time the check finished.",
                         [s("audit_timestamp_seconds", [], run["finished"])]))
        families.append(("audit_complete", "1 if every rule was evaluated (no rule raised an error).",
                         [s("audit_complete", [], 1 if is_clean(result) else 0)]))
    info = hl + [("site", config["site"] or ""), ("version", config["version"]),
                 ("policy_digest", audit_core.policy_digest(config["policy"]))]
    families.append(("watch_info", "The on-host checker: its version, site and the digest of its policy.",
                     [s("watch_info", info, 1)]))
    families.append(("watch_interval_seconds", "Seconds between the checker's runs (policy watch.interval_seconds).",
                     [s("watch_interval_seconds", hl, config["policy"]["watch"]["interval_seconds"])]))
    families.append(("watch_run_duration_seconds", "Wall time of the checker's last run.",
                     [s("watch_run_duration_seconds", hl, round(run["wall"], 3))]))
    families.append(("watch_run_cpu_seconds", "CPU time (user + system) of the checker's last run.",
                     [s("watch_run_cpu_seconds", hl, round(run["cpu"], 3))]))
    families.append(("watch_last_run_ok", "1 if the last run checked the host, 0 if it could not (see the journal).",
                     [s("watch_last_run_ok", hl, 1 if result is not None else 0)]))
    if state.get("last_success") is not None:
        families.append(("watch_last_success_timestamp_seconds", "Unix time the last successful check finished.",
                         [s("watch_last_success_timestamp_seconds", hl, float(state["last_success"]))]))
    since = []
    for f in prometheus_text.findings_of(findings):
        entry = state.get("findings", {}).get(f["rule"])
        if entry:
            since.append(s("watch_finding_since_timestamp_seconds", prometheus_text.finding_labels(host, f),
                           float(entry["since"])))
    families.append(("watch_finding_since_timestamp_seconds",
                     "Unix time this finding started (first run that saw it with this status).", since))
    base = state.get("baseline")
    if isinstance(base, dict) and base.get("recorded") is not None:
        families.append(("watch_baseline_recorded_timestamp_seconds",
                         "Unix time the watch recorded this host's hardware baseline (at install).",
                         [s("watch_baseline_recorded_timestamp_seconds", hl, float(base["recorded"]))]))
        recorded, seen = base.get("counts") or {}, base.get("seen") or {}
        families.append(("watch_baseline", "The baseline's count of each part: GPUs, NVSwitches, active RDMA ports.",
                         [s("watch_baseline", hl + [("part", k)], recorded[k]) for k in sorted(recorded)
                          if recorded[k] is not None]))
        families.append(("watch_baseline_seen", "This run's count of each part of the baseline.",
                         [s("watch_baseline_seen", hl + [("part", k)], seen[k]) for k in sorted(seen)
                          if seen[k] is not None]))
        families.append(("watch_baseline_differences",
                         "Parts of the baseline this run does not see (missing GPUs, NVSwitches, RDMA ports).",
                         [s("watch_baseline_differences", hl, len(base.get("differences") or []))]))
    slurm_state = state.get("slurm")
    if config["policy"]["watch"]["slurm"]["drain"] and isinstance(slurm_state, dict):
        nl = hl + [("node", slurm_state.get("node", ""))]
        families.append(("watch_slurm_drained", "1 while this host's Slurm node is drained by gpufleet.",
                         [s("watch_slurm_drained", nl, 1 if slurm_state.get("drained") else 0)]))
        families.append(("watch_slurm_drain_suppressed",
                         "1 when the circuit breaker (watch.slurm.max_drained_fraction, min_available_nodes) held a "
                         "drain back.",
                         [s("watch_slurm_drain_suppressed", nl, 1 if slurm_state.get("suppressed") else 0)]))
    return prometheus_text.render(families)


def _counts(snap):
    """{gpus, nvswitches, rdma_ports} counts of a baseline or a snapshot (None where unknown)."""
    ports = snap.get("rdma_ports")
    return {"gpus": snap.get("gpu_count"), "nvswitches": snap.get("nvswitches"),
            "rdma_ports": len(ports) if ports is not None else None}


def summary_line(config, result, problem_list, run, differences=()):
    if result is None:
        return "gpufleet-watch %s: could not check the host after %.1f s" % (config["host"], run["wall"])
    by_status = result["summary"]["by_status"]
    text = "gpufleet-watch %s: %d rules in %.1f s (CPU %.2f s): %d failing, %d warning" % (
        config["host"], len(result["findings"]), run["wall"], run["cpu"], by_status.get("fail", 0),
        by_status.get("warn", 0))
    if by_status.get("error"):
        text += ", %d errors" % by_status["error"]
    if problem_list:
        text += "; problems (%s and worse): %s" % (config["policy"]["watch"]["problem_severity"],
                                                   ", ".join(f["rule"] for f in problem_list))
    if differences:
        text += "; %d difference(s) from the baseline recorded at install" % len(differences)
    return text


def npd_message(config, result, problem_list):
    if result is None:
        return "gpufleet: could not check the host"
    if not problem_list:
        return "gpufleet: no %s+ findings" % config["policy"]["watch"]["problem_severity"]
    text = clean("gpufleet: " + "; ".join(("%s %s" % (f["rule"], where(f))).strip() for f in problem_list))
    return text if len(text) <= NPD_MESSAGE_MAX else text[:NPD_MESSAGE_MAX - 3] + "..."


def _cpu_seconds():
    """CPU time of this process so far (start-up and imports included; execve keeps the count) and its children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv=None, version=None, out=None):
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="gpufleet-watch", description="gpufleet's rules on this host.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the watch role's configuration (%(default)s)")
    parser.add_argument("--mode", choices=("run", "npd"), default="run",
                        help="run: write the textfile and state, drain/resume Slurm if enabled (timer, Slurm "
                             "HealthCheckProgram); npd: node-problem-detector plugin (exit 0 ok, 1 problem, "
                             "2 unknown), writes nothing")
    parser.add_argument("--print", dest="print_only", action="store_true",
                        help="print the textfile instead of writing any file; no Slurm call")
    parser.add_argument("--record-baseline", dest="record_baseline", action="store_true",
                        help="record this run's GPUs, NVSwitches and RDMA ports as the baseline (after a deliberate "
                             "hardware change; the first complete run records it by itself)")
    args = parser.parse_args(argv)

    def log(line):
        # One journal line per event: whatever a host put in it (a process name, a kernel-log line, Slurm's
        # answer) is escaped, so it can neither forge a line nor reach the terminal of whoever reads the journal.
        out.write(clean(line) + "\n")
        out.flush()

    started = time.time()
    try:
        config = load_config(args.config)
    except CheckError as exc:
        log("gpufleet: could not check the host: %s" % exc if args.mode == "npd" else "gpufleet-watch: %s" % exc)
        return EXIT_UNKNOWN
    if argv is None:
        reexec_with_environment(config["environment"])
    if version:
        config["version"] = version
    watch = config["policy"]["watch"]
    base_path = baseline.path_for(watch["state_file"])
    base = None if args.record_baseline else baseline.read(base_path)
    result, error = None, None
    try:
        result = check(config, baseline.expected_gpu_count(config["policy"], base))
        add_probe(config, result)
    except CheckError as exc:
        error = str(exc)
    except Exception as exc:  # a reader bug must still leave a textfile that says the check failed
        error = "%s: %s" % (type(exc).__name__, exc)
    finished = time.time()
    run = {"finished": finished, "wall": finished - started, "cpu": _cpu_seconds()}
    problem_list = problems(result["findings"], watch["problem_severity"]) if result else []

    if args.mode == "npd":
        log(npd_message(config, result, problem_list))
        if result is None:
            return EXIT_UNKNOWN
        return EXIT_PROBLEM if problem_list else EXIT_OK

    previous = read_state(watch["state_file"])
    notes = []
    if result is not None and base is None and not args.print_only:
        if is_clean(result):
            base = baseline.record(result["facts"], finished, config["host"])
            try:
                baseline.write(base_path, base)
                notes.append("baseline recorded in %s: %s" % (base_path, baseline.summary(base)))
            except (IOError, OSError) as exc:
                notes.append("baseline not recorded: %s" % exc)
                base = None
        else:
            notes.append("baseline not recorded: the run was not complete (recorded by the next complete run)")
    before = previous.get("baseline") if isinstance(previous.get("baseline"), dict) else {}
    differences = baseline.compare(base, result["facts"]) if result is not None else before.get("differences", [])
    if result is not None and differences != before.get("differences", []):
        notes.extend("baseline: %s" % d for d in differences if d not in before.get("differences", []))
        if not differences:
            notes.append("baseline: this host has again everything recorded at install")
    seen = baseline.snapshot(result["facts"]) if result is not None else {}
    state = {"version": STATE_VERSION, "host": config["host"], "updated": finished,
             "baseline": None if base is None else {
                 "recorded": base.get("recorded"), "differences": differences,
                 "counts": _counts(base), "seen": _counts(seen) if seen else before.get("seen")},
             "last_success": finished if result is not None else previous.get("last_success"),
             "findings": (state_entries(result["findings"], previous.get("findings", {}), finished)
                          if result is not None else previous.get("findings", {})),
             "slurm": previous.get("slurm"), "drain": previous.get("drain")}
    if args.print_only:
        out.write(textfile(config, result, state, run))
        return EXIT_OK if result is not None else EXIT_UNKNOWN

    if error is not None:
        log("gpufleet-watch: could not check the host: %s" % error)
    else:
        for line in changes(previous.get("findings", {}), state["findings"]):
            log(line)
    for line in notes:
        log(line)
    if watch["slurm"]["drain"] and result is not None:
        state["slurm"], state["drain"] = slurm_step(config, result, previous, programs.runner(HostModule({})), log)
    log(summary_line(config, result, problem_list, run, (state.get("baseline") or {}).get("differences")))
    status = EXIT_OK if result is not None else EXIT_UNKNOWN
    # Each output on its own: a textfile directory refused (another user can write it) still leaves the state.
    for path, text, owner in (
            (watch["state_file"], lambda: json.dumps(state, indent=1, sort_keys=True) + "\n", None),
            (os.path.join(watch["textfile_dir"], TEXTFILE_NAME), lambda: textfile(config, result, state, run),
             watch.get("textfile_owner"))):
        try:
            write_atomic(path, text(), mode=0o644, owner=owner)
        except UnsafeDirectory as exc:
            log("gpufleet-watch: not written: %s" % exc)
            status = EXIT_UNKNOWN
        except (IOError, OSError) as exc:
            log("gpufleet-watch: cannot write %s: %s" % (path, exc))
            status = EXIT_UNKNOWN
    return status
