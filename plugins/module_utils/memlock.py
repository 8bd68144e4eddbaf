# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The locked-memory limits GPU jobs get: the audit's own /proc/self/limits and CAP_IPC_LOCK, pam_limits
(limits.conf, limits.d), systemd's DefaultLimitMEMLOCK, and the job daemons' units (LimitMEMLOCK= with drop-ins) and
running processes (/proc/<pid>/limits).

Every file is read through HostFS; parsers are small pure functions of text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.tuning.plugins.module_utils import systemd_unit
from ansible_collections.gpufleet.tuning.plugins.module_utils.decoders import to_int

UNLIMITED = ("unlimited", "infinity", "-1")
# The daemons GPU jobs run under, as (systemd unit, process name, starts jobs): a job inherits RLIMIT_MEMLOCK from
# the daemon that starts it (Slurm FAQ "memlock": slurmd's limit caps jobs; containers inherit the runtime's limit
# unless the runtime sets one), and pam_limits never reaches a service started by systemd (its limit is
# LimitMEMLOCK=, systemd.exec(5)). kubelet is read but starts no job itself: pods run under the CRI runtime
# (containerd, CRI-O), whose limit is the one they get.
JOB_SERVICES = (
    ("slurmd.service", "slurmd", True),
    ("kubelet.service", "kubelet", False),
    ("containerd.service", "containerd", True),
    ("docker.service", "dockerd", True),
    ("crio.service", "crio", True),
)
SYSTEM_CONF = "/etc/systemd/system.conf"
SYSTEM_CONF_DIRS = ("/etc/systemd/system.conf.d", "/run/systemd/system.conf.d", "/usr/local/lib/systemd/system.conf.d",
                    "/usr/lib/systemd/system.conf.d", "/lib/systemd/system.conf.d")
CAP_IPC_LOCK = 14  # linux/capability.h


def _limit_kb(value, unit_bytes):
    if value.lower() in UNLIMITED:
        return None
    number = int(value)
    return number // 1024 if unit_bytes else number


def parse_proc_limits(text):
    """(soft_kb, hard_kb) of "Max locked memory" in /proc/<pid>/limits; None = unlimited.

    Raises ValueError when the line is absent or malformed.
    """
    for line in (text or "").splitlines():
        if line.startswith("Max locked memory"):
            parts = line[len("Max locked memory"):].split()
            if len(parts) < 2:
                break
            unit_bytes = len(parts) > 2 and parts[2] == "bytes"
            return _limit_kb(parts[0], unit_bytes), _limit_kb(parts[1], unit_bytes)
    raise ValueError("no 'Max locked memory' line")


def parse_limits_conf(text, path):
    """memlock lines of a pam_limits file -> [{path, domain, type, value_kb}] (value_kb None = unlimited)."""
    out = []
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        parts = line.split()
        if len(parts) < 4 or parts[2] != "memlock" or parts[1] not in ("soft", "hard", "-"):
            continue
        try:
            value = _limit_kb(parts[3], False)
        except ValueError:
            continue  # pam_limits ignores such a line too
        out.append({"path": path, "domain": parts[0], "type": parts[1], "value_kb": value})
    return out


def _proc_caps(text):
    """(uid, has CAP_IPC_LOCK) from /proc/<pid>/status (Uid: real..., CapEff: hex mask); None where absent."""
    uid = cap = None
    for line in (text or "").splitlines():
        key, _sep, value = line.partition(":")
        if key == "Uid" and value.split():
            uid = to_int(value)
        elif key == "CapEff":
            try:
                cap = bool(int(value.strip(), 16) >> CAP_IPC_LOCK & 1)
            except ValueError:
                cap = None
    return uid, cap


def read_job_services(fs):
    """The job-running daemons present (unit installed or process running), each with its unit's LimitMEMLOCK and
    the limits of its running processes (/proc/<pid>/limits)."""
    names = dict((proc, unit) for unit, proc, _starts in JOB_SERVICES)
    running = {}
    for path in fs.glob("/proc/[0-9]*/comm"):
        comm = (fs.read(path) or "").strip()
        if comm not in names:
            continue
        pid = int(path.split("/")[2])
        entry = {"pid": pid, "soft_kb": None, "hard_kb": None, "error": None}
        try:
            entry["soft_kb"], entry["hard_kb"] = parse_proc_limits(fs.read("/proc/%d/limits" % pid))
        except ValueError as exc:
            entry["error"] = "/proc/%d/limits: %s" % (pid, exc)
        running.setdefault(names[comm], []).append(entry)
    services = []
    for unit, proc, starts_jobs in JOB_SERVICES:
        fragment = systemd_unit.unit_file(fs, unit)
        if fragment is None and unit not in running:
            continue
        paths = ([fragment] if fragment else []) + systemd_unit.dropins(fs, unit)
        services.append({
            "unit": unit,
            "process": proc,
            "starts_jobs": starts_jobs,
            "fragment": fragment,
            "dropins": paths[1:] if fragment else paths,
            "limit": systemd_unit.effective_limit(fs, paths, "Service", "LimitMEMLOCK"),
            "processes": sorted(running.get(unit, []), key=lambda p: p["pid"]),
        })
    return services


def read_memlock(fs, unsupported):
    memlock = {"process_soft_kb": None, "process_hard_kb": None, "configured": []}
    try:
        memlock["process_soft_kb"], memlock["process_hard_kb"] = parse_proc_limits(fs.read("/proc/self/limits"))
    except ValueError as exc:
        unsupported["memlock.process_soft_kb"] = unsupported["memlock.process_hard_kb"] = (
            "/proc/self/limits: %s" % exc)
    # mlock(2): a process with CAP_IPC_LOCK is not bound by RLIMIT_MEMLOCK, so a root audit's own limit says
    # nothing about the limit of the users' jobs.
    memlock["process_uid"], memlock["process_cap_ipc_lock"] = _proc_caps(fs.read("/proc/self/status"))
    if memlock["process_cap_ipc_lock"] is None:
        unsupported["memlock.process_cap_ipc_lock"] = "no CapEff in /proc/self/status"
    paths = ["/etc/security/limits.conf"] + fs.glob("/etc/security/limits.d/*.conf")
    for path in paths:
        memlock["configured"].extend(parse_limits_conf(fs.read(path), path))
    chosen = {}  # system.conf, then its drop-ins by file name (systemd-system.conf(5))
    for directory in SYSTEM_CONF_DIRS:
        for path in fs.glob(directory + "/*.conf"):
            chosen.setdefault(os.path.basename(path), path)
    conf = [SYSTEM_CONF] + [chosen[name] for name in sorted(chosen)]
    memlock["systemd_default"] = systemd_unit.effective_limit(fs, conf, "Manager", "DefaultLimitMEMLOCK")
    memlock["services"] = read_job_services(fs)
    return memlock
