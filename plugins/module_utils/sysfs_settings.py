# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The sysfs_settings module's work: validate, plan (what differs, nothing written), apply (outside check mode,
each prior value recorded for rollback first) and diff.

Sysfs values do not survive a reboot: the settings are also recorded in a JSON file that the host_tuning role's
boot unit replays.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

_PATTERN = re.compile(r"^/sys/[A-Za-z0-9_*.:/-]+$")
_BRACKET = re.compile(r"\[([^\]]+)\]")
_VALUE = re.compile(r"^[A-Za-z0-9_.-]+$")


def current_value(text):
    """The value a sysfs file holds; for bracketed choices the chosen one (``always [madvise] never`` is madvise)."""
    if text is None:
        return None
    m = _BRACKET.search(text)
    return m.group(1) if m else text.strip()


def validate(module):
    """{pattern: value} from the module's ``settings``; fails naming the field on bad input."""
    p = module.params
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root: not a directory: %s" % p["root"])
    settings = {}
    for pattern, value in (p["settings"] or {}).items():
        if not _PATTERN.match(pattern) or ".." in pattern:
            module.fail_json(
                msg="settings: %r is not a sysfs path pattern (absolute, under /sys, letters, digits, "
                "'_-.:/*' only)" % pattern
            )
        if value is None or isinstance(value, (dict, list)) or not _VALUE.match(str(value)):
            module.fail_json(msg="settings.%s: value must be a single word, got %r" % (pattern, value))
        settings[pattern] = str(value)
    return settings


def write_value(path, value):
    """Write one sysfs attribute; None, or the reason it cannot be written here."""
    try:
        with open(path, "w") as f:
            f.write(value + "\n")
    except (IOError, OSError) as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            reason += ": /sys is read-only here (container); set it on the host"
        return reason
    return None


class SysfsSettings:
    """plan() reads and compares, apply() writes (never in check mode), diff() and result() report."""

    def __init__(self, module, settings):
        self.module = module
        self.settings = settings
        self.fs = HostFS(module.params["root"])
        self.config_file = module.params["config_file"]
        self.targets = []  # (path, value) in the order they are set
        self.pattern_of = {}  # path -> the first pattern that matched it (the diff groups a glob's files)
        self.files, self.not_settable, self.unmatched = {}, {}, []
        self.config_text = None
        self.config_before = None  # config_file's text before this run (None: no file)
        self.config_changed = False

    def _entry(self, path, value):
        before = current_value(self.fs.read(path))
        return {"before": before, "after": value, "changed": before != value}

    def plan(self):
        for pattern, value in sorted(self.settings.items()):
            paths = self.fs.glob(pattern)
            if not paths:
                self.unmatched.append(pattern)
            for path in paths:
                self.targets.append((path, value))
                self.pattern_of.setdefault(path, pattern)
                self.files[path] = self._entry(path, value)
        if self.config_file:
            self.config_text = json.dumps({"settings": self.settings}, indent=2, sort_keys=True) + "\n"
            self.config_before = self.fs.read(self.config_file)
            self.config_changed = self.config_before != self.config_text

    def apply(self):
        if self.module.check_mode:
            return
        for path, value in self.targets:
            # Read again: two patterns may match one file, and the later one sees what the earlier one wrote.
            entry = self._entry(path, value)
            if entry["changed"]:
                record = {"kind": "sysfs", "path": self.fs.path(path), "value": entry["before"]}
                rollback.record_for(self.module, [record])
                reason = write_value(self.fs.path(path), value)
                if reason is not None:
                    self.not_settable[path] = reason
                    entry.update(after=entry["before"], changed=False)
            self.files[path] = entry
        if self.config_changed:
            old = self.fs.read(self.config_file)
            rollback.record_for(self.module, [{"kind": "file", "path": self.fs.path(self.config_file), "content": old}])
            try:
                write_atomic(self.fs.path(self.config_file), self.config_text)
            except (IOError, OSError) as exc:
                self.module.fail_json(msg="config_file: cannot write %s: %s" % (self.config_file, exc))

    def _changed_lines(self, side):
        """One 'path: value' line per changed file; where a glob matched several files, one 'pattern: value (N
        files)' line per value instead (224 CPUs' governors are one line, not 224)."""
        groups = {}
        for path, entry in sorted(self.files.items()):
            if entry["changed"]:
                key = (self.pattern_of.get(path, path), entry[side])
                groups.setdefault(key, []).append(path)
        lines = []
        for (pattern, value), paths in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
            if len(paths) == 1:
                lines.append("%s: %s\n" % (paths[0], value))
            else:
                lines.append("%s: %s (%d files)\n" % (pattern, value, len(paths)))
        return "".join(lines)

    def diff(self):
        """The sysfs values that change ('path: value', or 'pattern: value (N files)' for a glob's files); with a
        config_file, the file's own diff too (its header the path on the host), so that a run that only records values
        already in effect has one."""
        values = {"before": self._changed_lines("before"), "after": self._changed_lines("after")}
        if not self.config_file:
            return values
        config = {
            "before_header": self.config_file,
            "after_header": self.config_file,
            "before": (self.config_before or "") if self.config_changed else "",
            "after": self.config_text if self.config_changed else "",
        }
        return [values, config]

    def result(self):
        return dict(
            changed=self.config_changed or any(e["changed"] for e in self.files.values()),
            files=self.files,
            not_settable=self.not_settable,
            unmatched=self.unmatched,
            diff=self.diff(),
        )
