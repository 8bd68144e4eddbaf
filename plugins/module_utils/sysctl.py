# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Kernel parameters: runtime values under /proc/sys, the drop-in files that set them at boot, and who else
sets the same key.

Boot order follows systemd-sysctl / ``sysctl --system``: every ``*.conf`` in /etc/sysctl.d, /run/sysctl.d,
/usr/local/lib/sysctl.d, /usr/lib/sysctl.d and /lib/sysctl.d, one file per basename (the first directory wins),
applied in lexical order of basename, then /etc/sysctl.conf (procps). The last assignment of a key wins.

``SysctlSettings`` is the sysctl_settings module's work: plan (the file, the runtime values, who else sets the keys;
nothing written), apply (outside check mode, prior values recorded for rollback first) and diff.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

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


DEFAULT_HEADER = "Managed by gpufleet (gpufleet.tuning). Local changes will be overwritten."


def validate(module):
    """{key: normalized value} from the module's ``settings``; fails naming the field on bad input."""
    p = module.params
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root: not a directory: %s" % p["root"])
    if not p["file"].endswith(".conf") or not p["file"].startswith("/"):
        module.fail_json(msg="file: must be an absolute path ending in .conf, got %s" % p["file"])
    settings = {}
    for key, value in (p["settings"] or {}).items():
        why = key_error(key)
        if why:
            module.fail_json(msg="settings: %r is %s" % (key, why))
        if value is None or isinstance(value, dict) or "\n" in str(value):
            module.fail_json(msg="settings.%s: value must be a number, a string or a list, got %r" % (key, value))
        settings[key] = normalize(value)
    for option in ("at_least", "at_most"):
        unknown = sorted(set(p[option]) - set(settings))
        if unknown:
            module.fail_json(
                msg="%s: %s not in settings (keys: %s)" % (option, ", ".join(unknown), ", ".join(sorted(settings)))
            )
    both = sorted(set(p["at_least"]) & set(p["at_most"]))
    if both:
        module.fail_json(msg="at_least and at_most: %s is in both (a key is a minimum or a maximum)" % ", ".join(both))
    return settings


def overridden_at_boot(report, settings, own):
    """Keys whose boot value comes from a file applied after ``own`` (or /etc/sysctl.conf) with another value."""
    overridden = {}
    for key, info in report.items():
        if info["boot_winner"] and info["boot_winner"] != own and info["boot_value"] != settings[key]:
            # gpufleet's file will be written; does a file applied after it set the key differently?
            if (
                sorted([os.path.basename(own), os.path.basename(info["boot_winner"])])[-1] != os.path.basename(own)
                or info["boot_winner"] == SYSCTL_CONF
            ):
                overridden[key] = {"by": info["boot_winner"], "value": info["boot_value"]}
    return overridden


class SysctlSettings:
    """plan() reads and compares, apply() writes (never in check mode), diff() and result() report."""

    def __init__(self, module, settings):
        self.module = module
        self.settings = dict(settings)
        self.fs = HostFS(module.params["root"])
        self.own = module.params["file"]
        self.kept, self.runtime, self.not_settable = {}, {}, {}
        self.text = self.current_text = self.tuned = None
        self.file_changed = False
        self.others, self.overridden = {}, {}

    def plan(self):
        p = self.module.params
        for option, keep in (("at_least", at_least), ("at_most", at_most)):
            for key in p[option]:
                running, _reason = read_runtime(self.fs, key)
                value = keep(self.settings[key], running)
                if value != self.settings[key]:
                    self.kept[key] = {"wanted": self.settings[key], "running": running, "kept": value}
                    self.settings[key] = value
        self.text = render_file(self.settings, p["header"])
        self.current_text = self.fs.read(self.own)
        self.file_changed = self.current_text != self.text
        report = who_sets(self.fs, list(self.settings), self.own)
        self.others = dict((k, v["set_by"]) for k, v in report.items() if v["set_by"])
        self.overridden = overridden_at_boot(report, self.settings, self.own)
        tuned = tuned_profile(self.fs)
        if tuned is not None:
            conflicts = dict((k, v) for k, v in tuned["sysctl"].items() if k in self.settings and v != self.settings[k])
            self.tuned = {"profile": tuned["profile"], "conflicts": conflicts}
        self._warn()
        for key in sorted(self.settings):
            self.runtime[key], why = self._runtime_entry(key)
            if why is not None:
                self.not_settable[key] = why

    def _warn(self):
        for key, info in sorted(self.overridden.items()):
            self.module.warn(
                "%s: %s sets %s after gpufleet's %s, so it wins at boot" % (key, info["by"], info["value"], self.own)
            )
        if self.tuned and self.tuned["conflicts"]:
            self.module.warn(
                "TuneD profile %s also sets %s: it re-applies its values when it starts; put gpufleet's values in "
                "a TuneD profile or stop TuneD" % (self.tuned["profile"], ", ".join(sorted(self.tuned["conflicts"])))
            )

    def _runtime_entry(self, key):
        """(entry, why it cannot be set here or None); entry["changed"] when a write is due. Nothing is written:
        what cannot be set is known before any write, so that check mode predicts what the real run can set."""
        wanted = self.settings[key]
        before, reason = read_runtime(self.fs, key)
        entry = {"before": before, "after": wanted if reason is None else before, "changed": False}
        if reason is not None:
            return entry, reason + ": must be set on the host"
        if self.module.params["apply"] and before != wanted:
            blocked = settable(self.fs, key)
            if blocked is not None:
                entry["after"] = before
                return entry, blocked
            entry["changed"] = True
        return entry, None

    def apply(self):
        if self.module.check_mode:
            return
        if self.file_changed:
            record = {"kind": "file", "path": self.fs.path(self.own), "content": self.current_text}
            rollback.record_for(self.module, [record])
        self.runtime, self.not_settable = {}, {}
        for key in sorted(self.settings):
            # Read again: a write can change another key (net.ipv4.ip_forward and net.ipv4.conf.all.forwarding).
            entry, why = self._runtime_entry(key)
            if why is not None:
                self.not_settable[key] = why
            elif entry["changed"]:
                record = {"kind": "sysctl", "key": key, "value": entry["before"], "root": self.module.params["root"]}
                rollback.record_for(self.module, [record])
                failure = write_runtime(self.fs, key, self.settings[key])
                if failure is not None:
                    self.not_settable[key] = failure
                    entry.update(after=entry["before"], changed=False)
                else:
                    entry["after"], _error = read_runtime(self.fs, key)
            self.runtime[key] = entry
        if self.file_changed:
            try:
                write_atomic(self.fs.path(self.own), self.text)
            except (IOError, OSError) as exc:
                self.module.fail_json(msg="file: cannot write %s: %s" % (self.own, exc))

    def diff(self):
        changed = [(key, entry) for key, entry in sorted(self.runtime.items()) if entry["changed"]]
        own = self.own
        return [
            {"before_header": own, "after_header": own, "before": self.current_text or "", "after": self.text},
            {
                "before_header": "runtime",
                "after_header": "runtime",
                "before": "".join("%s = %s\n" % (key, entry["before"]) for key, entry in changed),
                "after": "".join("%s = %s\n" % (key, self.settings[key]) for key, entry in changed),
            },
        ]

    def result(self):
        return dict(
            changed=self.file_changed or any(v["changed"] for v in self.runtime.values()),
            file={"path": self.own, "changed": self.file_changed},
            runtime=self.runtime,
            not_settable=self.not_settable,
            others=self.others,
            overridden=self.overridden,
            tuned=self.tuned,
            kept=self.kept,
            diff=self.diff(),
        )
