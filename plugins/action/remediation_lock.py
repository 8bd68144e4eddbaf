# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of gpufleet.tuning.remediation_lock (documentation: plugins/modules/remediation_lock.py).

It names the holder (this controller and its ansible-playbook process), runs the module on the target once per
attempt, and while another run holds the lock, waits and asks again until ``timeout``. A holder that ran on this
same controller and whose process is gone (Ctrl-C, a crash) is taken over at once: only the controller can tell,
the target cannot see its processes.
"""

from __future__ import annotations

import getpass
import os
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.module_utils.lock import DEFAULT_MAX_AGE, DEFAULT_TIMEOUT, token_of

MODULE = "gpufleet.tuning.remediation_lock"
POLL_S = 2.0
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def process_start(pid):
    """A process's start time (clock ticks since boot, /proc/<pid>/stat field 22); None where /proc has none."""
    stat = _read("/proc/%d/stat" % pid)
    if not stat:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def controller_holder(run_id=None):
    """This run as a lock holder: the ansible-playbook process (a worker's parent) on this controller."""
    pid = os.getppid()
    boot_id = (_read(BOOT_ID) or "").strip() or None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    holder = {
        "run_id": run_id,
        "controller": socket.gethostname(),
        "controller_boot_id": boot_id,
        "pid": pid,
        "pid_start": process_start(pid),
        "user": user,
    }
    holder["token"] = token_of(holder)
    return holder


def holder_is_gone(holder, me):
    """True when ``holder`` ran on this controller (same host name and boot) and its process no longer exists."""
    if not isinstance(holder, dict) or not holder.get("pid"):
        return False
    if holder.get("controller") != me["controller"] or holder.get("controller_boot_id") != me["controller_boot_id"]:
        return False  # another controller, or this one before a reboot (age decides)
    try:
        pid = int(holder["pid"])
    except (TypeError, ValueError):
        return False
    if me["controller_boot_id"] is not None:  # Linux: /proc tells, and the start time rules out a reused pid
        start = process_start(pid)
        return start is None or (holder.get("pid_start") is not None and start != str(holder["pid_start"]))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _int(args, key, default):
    value = args.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AnsibleActionFail("%s: %r is not a whole number of seconds" % (key, value)) from None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if "holder" in args or "take_over" in args:
            raise AnsibleActionFail("holder and take_over are set by the action plugin; do not pass them")
        me = controller_holder(args.get("run_id"))
        args["holder"] = me
        if args.get("state", "acquired") == "released":
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
            return result

        timeout = _int(args, "timeout", DEFAULT_TIMEOUT)
        start = time.monotonic()
        take_over = None
        while True:
            attempt = dict(args, take_over=take_over) if take_over else args
            res = self._execute_module(module_name=MODULE, module_args=attempt, task_vars=task_vars)
            res["waited"] = round(time.monotonic() - start, 1)
            if res.get("failed") or res.get("acquired") or "acquired" not in res:
                result.update(res)
                return result
            current = res.get("holder") or {}
            if not take_over and holder_is_gone(current, me):
                take_over = current.get("token")
                continue
            take_over = None
            remaining = start + timeout - time.monotonic()
            if remaining <= 0:
                res.update(failed=True, msg=self._busy_message(res, current, timeout, args))
                result.update(res)
                return result
            time.sleep(min(POLL_S, remaining))

    @staticmethod
    def _busy_message(res, holder, timeout, args):
        age = res.get("age")
        return (
            "remediation lock %s is held by run %s (ansible-playbook pid %s on controller %s, user %s, since %s, "
            "%s s ago); waited %d s (gpufleet_lock_timeout). Another remediation or rollback of this host is in "
            "progress: run again when it has finished. If that run is gone (its controller crashed), the lock is "
            "taken over when it is %s s old (gpufleet_lock_max_age) or after a reboot, or remove %s on the host."
            % (
                res.get("path"),
                holder.get("run_id") or "(no run id)",
                holder.get("pid"),
                holder.get("controller"),
                holder.get("user"),
                holder.get("acquired_at"),
                "?" if age is None else int(age),
                timeout,
                args.get("max_age", DEFAULT_MAX_AGE),
                res.get("path"),
            )
        )
