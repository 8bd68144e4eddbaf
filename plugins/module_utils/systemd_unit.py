# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""systemd unit and configuration files: the unit search path, a unit's fragment and drop-ins, the
assignments of a key in a section, and systemd's resource-limit values (systemd.unit(5), systemd.exec(5)).

Files are read through HostFS, so a fixture tree can stand in for the host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# systemd's unit search path for system units, highest priority first (systemd.unit(5)); /lib for split-usr systems.
UNIT_DIRS = (
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5,
                "E": 1024 ** 6}
_SIZE = re.compile(r"^(\d+)\s*([KMGTPE]?)(?:i?B)?$", re.I)


def _systemd_size_kb(text):
    text = text.strip()
    if text.lower() == "infinity":
        return None
    m = _SIZE.match(text)
    if not m:
        raise ValueError("not a size: %r" % text)
    return int(m.group(1)) * _SIZE_SUFFIX[m.group(2).upper()] // 1024


def parse_systemd_limit(value):
    """(soft_kb, hard_kb) of a LimitMEMLOCK= value ("infinity", "64M", "8388608", "soft:hard"; sizes in bytes with
    base-1024 suffixes, systemd.exec(5)); None = unlimited. Raises ValueError on anything else."""
    soft, sep, hard = value.partition(":")
    soft_kb = _systemd_size_kb(soft)
    return soft_kb, (_systemd_size_kb(hard) if sep else soft_kb)


def unit_assignments(text, section, key):
    """The values of ``key=`` in ``[section]`` of a systemd unit or config file, in order (an empty value resets)."""
    out, current = [], None
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        name, sep, value = line.partition("=")
        if sep and current == section and name.strip() == key:
            out.append(value.strip())
    return out


def effective_limit(fs, paths, section, key):
    """{soft_kb, hard_kb, source} of the last valid assignment over ``paths`` (read in order); None when unset."""
    limit = None
    for path in paths:
        for value in unit_assignments(fs.read(path), section, key):
            if not value:
                limit = None  # "LimitMEMLOCK=" resets to the default
                continue
            try:
                soft, hard = parse_systemd_limit(value)
            except ValueError:
                continue  # systemd ignores an invalid assignment and logs it
            limit = {"soft_kb": soft, "hard_kb": hard, "source": path}
    return limit


def unit_file(fs, unit):
    """Path of the unit's fragment (highest-priority unit directory), or None when absent or masked."""
    for directory in UNIT_DIRS:
        path = "%s/%s" % (directory, unit)
        real = fs.path(path)
        if os.path.islink(real) and os.readlink(real) == "/dev/null":
            return None  # masked
        if os.path.isfile(real):
            return path
    return None


def dropins(fs, unit, kind="service"):
    """Drop-in files of a unit (<dir>/<unit>.d/*.conf and the per-type <dir>/service.d/*.conf) in the order systemd
    applies them: by file name; of two with the same name, the one in the higher-priority directory."""
    chosen = {}
    for directory in UNIT_DIRS:
        for sub in (unit + ".d", kind + ".d"):
            for path in fs.glob("%s/%s/*.conf" % (directory, sub)):
                chosen.setdefault(os.path.basename(path), path)
    return [chosen[name] for name in sorted(chosen)]


def parse_unit_file(text):
    """{section: [(key, value), ...]} of a systemd-style ini file (comments '#'/';', backslash continuations)."""
    sections, current, pending = {}, None, ""
    for raw in (text or "").splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), [])
            continue
        if current is None or "=" not in line:
            continue
        key, value = line.split("=", 1)
        current.append((key.strip(), value.strip()))
    return sections
