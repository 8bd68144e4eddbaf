# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Kernel parameters: runtime values under /proc/sys, the drop-in files that set them at boot, and who else
sets the same key.

Boot order follows systemd-sysctl / ``sysctl --system``: every ``*.conf`` in /etc/sysctl.d, /run/sysctl.d,
/usr/local/lib/sysctl.d, /usr/lib/sysctl.d and /lib/sysctl.d, one file per basename (the first directory wins),
applied in lexical order of basename, then /etc/sysctl.conf (procps). The last assignment of a key wins.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"
_KEY = re.compile(r"^[a-z0-9_]+(?:[./][a-zA-Z0-9_-]+)+$")


def key_error(key):
    """Why ``key`` is not a sysctl name we accept, or None."""
    if not isinstance(key, str) or not _KEY.match(key) or ".." in key:
        return "not a sysctl name (letters, digits, '_', '-', separated by '.'; e.g. net.ipv4.tcp_rmem)"
    return None


def proc_path(key):
    return "/proc/sys/" + key.replace(".", "/")


def normalize(value):
    """Sysctl values compare by words: "4096 87380  6291456" == "4096\\t87380\\t6291456"."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value)
    return " ".join(str(value).split())


def _fieldwise(pick, wanted, current):
    """``wanted`` with each integer field replaced by ``pick(wanted field, current field)``; ``wanted`` as it is when
    nothing is running or the two are not integer lists of the same length."""
    if current is None:
        return wanted
    want, have = wanted.split(), current.split()
    if len(want) != len(have):
        return wanted
    try:
        return " ".join(str(pick(int(w), int(h))) for w, h in zip(want, have))
    except ValueError:
        return wanted


def at_least(wanted, current):
    """``wanted`` raised field by field to ``current`` where current is larger ("4096 131072 90000000" against a
    running "4096 87380 268435456" gives "4096 131072 268435456"); ``wanted`` as it is when the two are not
    integer lists of the same length (or nothing is running)."""
    return _fieldwise(max, wanted, current)


def at_most(wanted, current):
    """The mirror of ``at_least``: ``wanted`` lowered field by field to ``current`` where current is smaller (a
    running vm.swappiness 1 against a wanted 10 gives 1); ``wanted`` as it is when the two are not integer lists of
    the same length (or nothing is running)."""
    return _fieldwise(min, wanted, current)


def parse_conf(text):
    """{key: value} from sysctl.conf syntax (comments, '-' prefix for ignore-errors, '/' or '.' separators)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        key = key.strip().lstrip("-").replace("/", ".")
        out[key] = normalize(value)
    return out


def boot_files(fs):
    """Config files in the order they are applied at boot (host paths)."""
    chosen = {}
    for directory in SYSCTL_DIRS:
        for path in fs.glob(directory + "/*.conf"):
            chosen.setdefault(os.path.basename(path), path)
    ordered = [chosen[name] for name in sorted(chosen)]
    if fs.exists(SYSCTL_CONF):
        ordered.append(SYSCTL_CONF)
    return ordered


def who_sets(fs, keys, own_file):
    """For each key: every other file that sets it, and the file whose value wins at boot."""
    report = dict((k, {"set_by": [], "boot_winner": None, "boot_value": None}) for k in keys)
    for path in boot_files(fs):
        for key, value in parse_conf(fs.read(path)).items():
            if key not in report:
                continue
            if path != own_file:
                report[key]["set_by"].append({"path": path, "value": value})
            report[key]["boot_winner"] = path
            report[key]["boot_value"] = value
    return report


def tuned_profile(fs):
    """The active TuneD profile and the sysctls its tuned.conf sets (None when TuneD is not in use)."""
    name = (fs.read("/etc/tuned/active_profile") or "").strip()
    if not name:
        return None
    values = {}
    for base in ("/etc/tuned", "/usr/lib/tuned", "/etc/tuned/profiles", "/usr/lib/tuned/profiles"):
        text = fs.read("%s/%s/tuned.conf" % (base, name))
        if text is None:
            continue
        section = None
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
            elif section == "sysctl" and "=" in line and not line.startswith("#"):
                key, _sep, value = line.partition("=")
                values[key.strip()] = normalize(value)
        break
    return {"profile": name, "sysctl": values}


def read_runtime(fs, key):
    """(value, reason): the current value, or None and why it cannot be read."""
    text = fs.read(proc_path(key))
    if text is None:
        return None, "not present here (%s)" % proc_path(key)
    return normalize(text), None


_HOST_ONLY = "it is global or hidden in this network namespace or container, and must be set on the host"


def settable(fs, key):
    """None, or why the runtime value cannot be set here, found without writing (so check mode knows it too).

    A key the kernel serves read-only (no write bit, e.g. net.core.rmem_max in a child network namespace) or one on
    a read-only mount (a container's /proc/sys) cannot be set, even by root.
    """
    path = fs.path(proc_path(key))
    try:
        mode = os.stat(path).st_mode
        read_only_mount = os.statvfs(path).f_flag & os.ST_RDONLY
    except (IOError, OSError) as exc:
        return "read-only or absent here (%s): %s" % (os.strerror(exc.errno), _HOST_ONLY)
    if not mode & 0o222:
        return "read-only or absent here (read-only file): %s" % _HOST_ONLY
    if read_only_mount:
        return "read-only or absent here (read-only file system): %s" % _HOST_ONLY
    return None


def write_runtime(fs, key, value):
    """Write a runtime value; returns None or the reason it cannot be set here."""
    path = fs.path(proc_path(key))
    try:
        with open(path, "w") as f:
            f.write(str(value) + "\n")
    except (IOError, OSError) as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
            return "read-only or absent here (%s): %s" % (os.strerror(exc.errno), _HOST_ONLY)
        return "cannot write %s: %s" % (proc_path(key), exc)
    return None


def render_file(settings, header):
    lines = ["# %s" % line for line in header.splitlines()]
    for key in sorted(settings):
        lines.append("%s = %s" % (key, normalize(settings[key])))
    return "\n".join(lines) + "\n"
