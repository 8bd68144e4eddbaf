# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The GPU boot configuration: the per-GPU settings the driver forgets at reboot, re-applied at boot.

``gpu_settings`` (option ``config_file``) writes it; ``roles/gpu_runtime/files/gpufleet-gpu-apply`` (run by
``gpufleet-gpu-runtime.service``) reads it. Format (JSON, keys sorted, 4-space indent, final newline)::

    {"gpus": {"<GPU UUID>": {"persistence_mode": true, "power_limit_w": 630, "compute_mode": "default",
                             "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1755},
                             "locked_clocks": {"min_mhz": 1410, "max_mhz": 1410}}}}

Only settings that NVML resets at reboot or driver reload are kept; ECC and MIG modes are pending modes that persist
on the GPU itself (NVML API reference, Device Commands, nvmlDeviceSetPowerManagementLimit: "Limit is not persistent
across reboots or driver unloads"; nvmlDeviceSetEccMode / nvmlDeviceSetMigMode: the mode takes effect after the next
reboot or GPU reset: https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceCommands.html).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

VOLATILE = ("persistence_mode", "power_limit_w", "compute_mode", "application_clocks", "locked_clocks")


class BootConfigError(Exception):
    """The existing file is not a boot configuration; the message names the file."""


def parse(text, path):
    """The configuration held by ``text`` (None: no file yet -> empty). Raises BootConfigError."""
    if text is None or not text.strip():
        return {}
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise BootConfigError("config_file: %s is not valid JSON (%s); fix or remove it" % (path, exc)) from exc
    if not isinstance(config, dict) or not isinstance(config.get("gpus", {}), dict):
        raise BootConfigError('config_file: %s is not a gpufleet GPU boot configuration ({"gpus": {...}})' % path)
    return config


def merge(existing, gpus):
    """``existing`` with the volatile ``after`` values of gpu_settings results (``gpus``) merged in, per UUID.

    A lock removed (locked_clocks 'none') leaves the entry; a GPU with nothing left to re-apply is dropped.
    Other GPUs and other top-level keys are kept as they are.
    """
    config = copy.deepcopy(existing or {})
    entries = config.setdefault("gpus", {})
    for gpu in gpus:
        entry = entries.setdefault(str(gpu["uuid"]), {})
        for key, value in (gpu.get("after") or {}).items():
            if key not in VOLATILE:
                continue
            if key == "locked_clocks" and value == "none":
                entry.pop(key, None)
                continue
            entry[key] = value
    config["gpus"] = dict((uuid, entry) for uuid, entry in sorted(entries.items()) if entry)
    return config


def render(config):
    """The file's text (stable: a second run with the same settings writes the same bytes)."""
    return json.dumps(config, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def changes(before, after):
    """Diff texts of two configurations: one ``<uuid> <setting>: <JSON value>`` line per setting that differs.

    Per setting, not per file: a run's tasks each add their own settings, and a task's diff in check mode (the file
    without the earlier tasks' settings) is then the same as in the real run.
    """
    old_gpus, new_gpus = before.get("gpus") or {}, after.get("gpus") or {}
    lines = {"before": [], "after": []}
    for uuid in sorted(set(old_gpus) | set(new_gpus)):
        old, new = old_gpus.get(uuid) or {}, new_gpus.get(uuid) or {}
        for key in sorted(set(old) | set(new)):
            if key in old and key in new and old[key] == new[key]:
                continue
            for side, entry in (("before", old), ("after", new)):
                if key in entry:
                    lines[side].append("%s %s: %s\n" % (uuid, key, json.dumps(entry[key], sort_keys=True)))
    return "".join(lines["before"]), "".join(lines["after"])
