# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""One remediation at a time per host: the lock file the remediation_lock module takes and releases.

The lock is a small JSON file, by default ``/run/gpufleet/remediation.lock``: ``/run`` is a tmpfs, so a reboot
clears it (and nothing under ``/etc`` or ``/var/lib/gpufleet`` changes for it). It names its holder: the run id,
the controller (host name, boot id), the ansible-playbook process (pid and start time) and the user; the target's
clock gives its time. Every read-decide-write happens under ``flock`` on the lock's directory, and the file is
written through ``fileio.write_atomic``, so two runs racing for the lock cannot both win and a reader never sees
half a record.

A lock is taken over (stale) when it is older than ``max_age`` seconds, when its file cannot be read, or when the
controller found its holder process gone (``take_over``: the holder's token, compared under the lock so that
only that holder is replaced). Waiting for a busy lock is the action plugin's job (plugins/action).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import time
from contextlib import contextmanager

from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic

DEFAULT_PATH = "/run/gpufleet/remediation.lock"
DEFAULT_TIMEOUT = 300
DEFAULT_MAX_AGE = 3600
HOLDER_KEYS = ("token", "run_id", "controller", "controller_boot_id", "pid", "pid_start", "user")


def token_of(holder):
    """What identifies a holder: the controller, its boot, the ansible-playbook process and its start time."""
    return "%s/%s/%s/%s" % (
        holder.get("controller"),
        holder.get("controller_boot_id"),
        holder.get("pid"),
        holder.get("pid_start"),
    )


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def read(path):
    """The lock record, None when there is no lock, or ``{"unreadable": reason}``."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        return {"unreadable": os.strerror(exc.errno) if exc.errno else str(exc)}
    except ValueError as exc:
        return {"unreadable": "not JSON (%s)" % exc}
    if not isinstance(data, dict):
        return {"unreadable": "not a JSON object"}
    return data


@contextmanager
def _guard(directory):
    """flock on the lock's directory: one read-decide-write at a time on this host."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def age_of(record, now):
    try:
        return max(0.0, now - float(record.get("acquired_epoch")))
    except (TypeError, ValueError):
        return None


def acquire(path, holder, max_age=DEFAULT_MAX_AGE, take_over=None, check_mode=False, now=None):
    """Try once to take the lock for ``holder`` (a dict with HOLDER_KEYS; ``token`` from token_of).

    Returns ``acquired`` (bool), ``holder`` (the record now in force: ours, or the other run's), ``age`` (seconds
    the record in force has been held) and, when a stale lock was replaced, ``previous`` and ``stale_reason``.
    Taking a lock this holder already has keeps its record (re-entrant). In check mode nothing is written.
    """
    now = time.time() if now is None else now
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        if check_mode:
            return {"acquired": True, "holder": None, "age": None, "previous": None, "stale_reason": None}
        os.makedirs(directory, 0o755)
    with _guard(directory):
        current = read(path)
        stale = None
        if current is not None and current.get("token") != holder["token"]:
            age = age_of(current, now)
            if "unreadable" in current:
                stale = "the lock file cannot be read: %s" % current["unreadable"]
            elif age is None:
                stale = "the lock file has no valid time"
            elif age > max_age:
                stale = "held for %d s, more than max_age %d s" % (age, max_age)
            elif take_over and take_over == current.get("token"):
                stale = "its ansible-playbook process (pid %s on %s) is gone" % (
                    current.get("pid"),
                    current.get("controller"),
                )
            else:
                return {"acquired": False, "holder": current, "age": age, "previous": None, "stale_reason": None}
        if current is not None and current.get("token") == holder["token"]:
            record = current
        else:
            record = dict((k, holder.get(k)) for k in HOLDER_KEYS)
            record.update(acquired_at=_iso(now), acquired_epoch=now)
            if not check_mode:
                write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n", mode=0o644)
        return {
            "acquired": True,
            "holder": record,
            "age": age_of(record, now),
            "previous": current if stale else None,
            "stale_reason": stale,
        }


def release(path, token, check_mode=False, now=None):
    """Remove the lock if ``token`` holds it. Returns ``released`` (bool), ``holder`` (the record found) and, when
    released, ``released_epoch`` (the target's clock)."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return {"released": False, "holder": None}
    with _guard(directory):
        current = read(path)
        if current is None or current.get("token") != token:
            return {"released": False, "holder": current}
        if not check_mode:
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        return {"released": True, "holder": current, "released_epoch": time.time() if now is None else now}
