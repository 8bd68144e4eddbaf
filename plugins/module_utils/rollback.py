# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rollback records: before a gpufleet module changes something, it records the prior value here.

One JSON file per remediation run: ``<dir>/<run_id>.json`` with ``entries`` in the order they were recorded.
The first value recorded for a target wins, so a run that touches a setting twice still restores the value the
host had before the run. Writes are atomic (temp file + rename) under an exclusive lock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import json
import os
import re
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic

DEFAULT_DIR = "/var/lib/gpufleet/rollback"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


def run_id_error(run_id):
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id) or ".." in run_id:
        return "must be 1-100 characters of letters, digits, '_', '.', ':', '-'"
    return None


def _target(entry):
    """What an entry restores: entries with the same target keep the first (oldest) value."""
    kind = entry["kind"]
    if kind in ("file", "sysfs"):
        return (kind, entry["path"])
    if kind == "sysctl":
        return (kind, entry["key"])
    if kind == "gpu":
        return (kind, entry["uuid"], entry["setting"])
    if kind == "nic":
        return (kind, entry["name"], entry["field"])
    if kind == "route":
        # The main table's route to a prefix (route_congctl): 'route' as `ip -j route show exact` printed it, or
        # None when the run created it ('created': the route it was made from).
        return (kind, entry["family"], entry["prefix"])
    if kind == "route_table":
        # gpufleet's own routing table and its rules (route_follow, scope follow): emptied by rollback.
        return (kind, str(entry["table"]))
    raise ValueError("unknown rollback entry kind %r" % kind)


def path_for(directory, run_id):
    return os.path.join(directory, run_id + ".json")


def load(directory, run_id):
    with open(path_for(directory, run_id)) as f:
        return json.load(f)


def latest(directory):
    """The newest run id with a record, or None."""
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".json")]
    except OSError:
        return None
    if not names:
        return None
    names.sort(key=lambda n: os.path.getmtime(os.path.join(directory, n)))
    return names[-1][: -len(".json")]


def record(directory, run_id, entries):
    """Append ``entries`` (dicts with 'kind' and target keys) to the run's record, keeping first values."""
    if not entries:
        return
    why = run_id_error(run_id)
    if why:
        raise ValueError("rollback_run_id: %s" % why)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    lock_path = os.path.join(directory, ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = path_for(directory, run_id)
        try:
            with open(path) as f:
                data = json.load(f)
        except (IOError, OSError, ValueError):
            data = {"run_id": run_id, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "entries": []}
        seen = set(_target(e) for e in data["entries"])
        for entry in entries:
            if _target(entry) not in seen:
                data["entries"].append(entry)
                seen.add(_target(entry))
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True), mode=0o600, dir_mode=0o700)


ARGUMENT_SPEC = dict(
    rollback_run_id=dict(type="str"),
    rollback_dir=dict(type="path", default=DEFAULT_DIR),
)


def check_params(module):
    run_id = module.params.get("rollback_run_id")
    if run_id is not None:
        why = run_id_error(run_id)
        if why:
            module.fail_json(msg="rollback_run_id: %r %s" % (run_id, why))


def record_for(module, entries):
    """Record when the module was given a run id and is about to change something (not in check mode)."""
    run_id = module.params.get("rollback_run_id")
    if run_id and entries and not module.check_mode:
        try:
            record(module.params["rollback_dir"], run_id, entries)
        except (IOError, OSError) as exc:
            module.fail_json(
                msg="rollback_dir: cannot record prior values in %s: %s (nothing was changed)"
                % (module.params["rollback_dir"], exc)
            )
