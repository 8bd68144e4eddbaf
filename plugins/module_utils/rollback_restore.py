# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Module rollback's work: find a run's record, put every entry back newest first, mark the record rolled back.

Each ``restore_*`` plans (compares the recorded value with the host's), applies only outside check mode, and says
whether the entry changed (or would). Kept apart from rollback.py, the record itself, which every changing module
imports: this file reaches every kind of setting (files, sysctl/sysfs values, routes, GPUs through NVML, NICs
through ethtool and ip), and only the rollback module needs it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_settings as gs
from ansible_collections.gpufleet.tuning.plugins.module_utils import nic, nic_settings, nvml, programs
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback, route_follow, routes, sysctl
from ansible_collections.gpufleet.tuning.plugins.module_utils.ethtool import Ethtool
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import read_text, write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.nvml_session import NvmlInitError, nvml_session


def load_record(module, directory, run_id):
    """(run id, record) of ``run_id`` ('latest': the newest record in ``directory``; (None, None) when there is none:
    nothing was remediated here, so there is nothing to restore); fails the module naming the field when a named
    run has no record or a record is not JSON."""
    if run_id == "latest":
        run_id = rollback.latest(directory)
        if run_id is None:
            return None, None
    elif rollback.run_id_error(run_id):
        module.fail_json(msg="run_id: %r %s" % (run_id, rollback.run_id_error(run_id)))
    try:
        return run_id, rollback.load(directory, run_id)
    except (IOError, OSError):
        # missing_record: the CLI tells "this run never changed this host" (e.g. interrupted before it got here)
        # from a real failure.
        module.fail_json(msg="run_id: no record %s in %s" % (run_id, directory), missing_record=True)
    except ValueError as exc:
        module.fail_json(msg="run_id: record %s is not valid JSON: %s" % (run_id, exc))


def restore(module, entries, diffs=None):
    """Put ``entries`` back in their order (the caller gives them newest first): files, sysctl and sysfs values and
    routes one by one, then the GPUs in one NVML session, then the NICs. Returns (restored, unchanged) descriptions.
    ``diffs``: a list that gets, for each entry of any kind that changes (or would), Ansible's diff dict (before: the
    host's value now, after: the recorded one; both headers the entry's description)."""
    restored, unchanged = [], []
    for e in entries:
        changed = _restore_entry(module, e, diffs)
        if changed is not None:
            (restored if changed else unchanged).append(_describe(e))
    for kind, restore_kind in (("gpu", _restore_gpus_or_fail), ("nic", restore_nics)):
        r, u = restore_kind(module, [e for e in entries if e["kind"] == kind], diffs)
        restored += r
        unchanged += u
    return restored, unchanged


def mark_rolled_back(directory, run_id, data):
    """Stamp the record with the time it was rolled back."""
    data["rolled_back_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_atomic(rollback.path_for(directory, run_id), json.dumps(data, indent=2, sort_keys=True), mode=0o600)


def _restore_entry(module, e, diffs=None):
    """True/False: a file, sysctl, sysfs or route entry was (would be) restored / already had its value; None for
    the kinds restored together (gpu, nic)."""
    if e["kind"] == "file":
        return restore_file(module, e, diffs)
    if e["kind"] == "sysctl":
        path = HostFS(e.get("root") or "/").path(sysctl.proc_path(e["key"]))
        if e["value"] is None:
            return False
        try:
            return restore_value(module, path, e["value"], diffs, _describe(e))
        except (IOError, OSError) as exc:
            module.fail_json(msg="restoring %s failed: %s" % (e["key"], exc))
    if e["kind"] == "sysfs":
        return restore_value(module, e["path"], e["value"], diffs, _describe(e))
    if e["kind"] == "route":
        return restore_route(module, e, diffs)
    if e["kind"] == "route_table":
        return restore_route_table(module, e, diffs)
    return None


def _restore_gpus_or_fail(module, entries, diffs=None):
    try:
        return restore_gpus(module, entries, diffs)
    except gs.SettingsError as exc:
        module.fail_json(msg="restoring GPU settings failed: %s" % exc)
    except NvmlInitError as exc:
        module.fail_json(
            msg="restoring GPU settings failed: NVML could not be initialised: %s" % nvml.error_name(exc.error)
        )


_C = {"LC_ALL": "C", "LANG": "C"}


def _describe(entry):
    names = ("path", "key", "uuid", "setting", "name", "field", "prefix", "table")
    keys = [entry.get(k) for k in names if entry.get(k) is not None]
    return "%s %s" % (entry["kind"], " ".join(str(k) for k in keys))


def _add_diff(diffs, what, before, after):
    if diffs is not None:
        diffs.append({"before_header": what, "after_header": what, "before": before, "after": after})


def _setting_text(name, value):
    """A GPU or NIC setting as diff lines: ``name: value``; a mapping (a NIC's offloads, rings; a GPU's ECC mode)
    one line per key, ``name.key: value``; a value absent (None) as no line."""
    if isinstance(value, dict):
        return "".join(_setting_text("%s.%s" % (name, k), v) for k, v in sorted(value.items()))
    if value is None:
        return ""
    if isinstance(value, bool):
        value = "on" if value else "off"
    elif not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    return "%s: %s\n" % (name, value)


def restore_file(module, entry, diffs=None):
    path = entry["path"]
    if entry["content"] is None:
        # lexists: a link the run created goes even when its target is already gone; unlink removes the link itself.
        if not os.path.lexists(path):
            return False
        _add_diff(diffs, _describe(entry), read_text(path) or "", "")
        if not module.check_mode:
            os.unlink(path)
        return True
    current = read_text(path)
    if current == entry["content"]:
        return False
    _add_diff(diffs, _describe(entry), current or "", entry["content"])
    if not module.check_mode:
        # The content was read through a link, so it goes back through it (the link stays a link).
        write_atomic(os.path.realpath(path), entry["content"])
    return True


def _route_text(prefix, route):
    """A route as `ip route` shows it (its congctl included), one line; None (no route): no line."""
    if route is None:
        return ""
    return " ".join(routes.route_argv("show", prefix, route, routes.route_congctl_of(route))[2:]) + "\n"


def restore_route(module, entry, diffs=None):
    """Put a route route_congctl changed back as recorded, or delete the one it created. True when it (would) change.
    ``diffs`` gets the route now and as it is restored (nothing, for one the run created)."""
    ip_bin = module.get_bin_path("ip", required=True)
    prefix = entry["prefix"]
    family = "-6" if entry["family"] == "inet6" else "-4"
    shown, why = routes.show_exact(programs.runner(module), prefix, ip_bin, locks=True)
    if shown is None:
        module.fail_json(msg="restoring route %s: cannot read it: %s" % (prefix, why))
    current = shown[0] if shown else None
    was = entry.get("route")
    if was is None:
        created = entry.get("created") or {}
        if current is None:
            return False
        if (current.get("gateway"), current.get("dev")) != (created.get("gateway"), created.get("dev")):
            module.warn(
                "route %s now goes via %s dev %s, not the path this run created it with (via %s dev %s): left alone"
                % (prefix, current.get("gateway"), current.get("dev"), created.get("gateway"), created.get("dev"))
            )
            return False
        argv = routes.route_argv("del", prefix, created, metrics=False)
    else:
        argv = routes.route_argv("replace", prefix, was, routes.route_congctl_of(was))
        if (
            current is not None
            and routes.route_argv("replace", prefix, current, routes.route_congctl_of(current)) == argv
        ):
            return False
    _add_diff(diffs, _describe(entry), _route_text(prefix, current), _route_text(prefix, was))
    if not module.check_mode:
        rc, out, err = module.run_command([ip_bin, family] + argv, environ_update=_C)
        if rc != 0:
            module.fail_json(
                msg="restoring route %s: ip %s failed: %s" % (prefix, " ".join(argv), (err or out).strip())
            )
    return True


def restore_route_table(module, entry, diffs=None):
    """Stop route_follow's service (where systemd runs it: its ExecStopPost empties the table too), then remove the
    rules into gpufleet's table and the routes in it. True when there was (would be) something to remove.
    ``diffs`` gets the rules and routes now and the empty table."""
    ip_bin = module.get_bin_path("ip", required=True)
    unit = entry.get("unit")
    systemctl = module.get_bin_path("systemctl")
    if unit and systemctl and os.path.isdir("/run/systemd/system"):
        rc, _out, _err = module.run_command([systemctl, "is-active", "--quiet", unit])
        if rc == 0 and not module.check_mode:
            module.run_command([systemctl, "stop", unit])
    follower = route_follow.Follower(programs.runner(module), [], "", entry["table"], ip=ip_bin)
    try:
        actions = follower.clear_plan()
    except RuntimeError as exc:
        module.fail_json(msg="restoring route table %s: cannot read it: %s" % (entry["table"], exc))
    if actions:
        # Each `ip ... del` as what it removes: the rule or the route as it is now.
        now = "".join(" ".join(a[:2] + a[3:]) + "\n" for a in actions)
        _add_diff(diffs, _describe(entry), now, "")
    if not module.check_mode:
        for argv in actions:
            rc, out, err = module.run_command([ip_bin] + argv, environ_update=_C)
            if rc != 0:
                module.fail_json(msg="restoring route table %s: ip %s failed: %s"
                                 % (entry["table"], " ".join(argv), (err or out).strip()))  # fmt: skip
    return bool(actions)


def _shown(text):
    """A sysfs/procfs value as the kernel shows it; bracketed choices ("always [madvise] never") -> "madvise"."""
    m = re.search(r"\[([^\]]+)\]", text)
    return sysctl.normalize(m.group(1) if m else text)


def restore_value(module, path, value, diffs=None, what=None):
    current = read_text(path)
    if current is not None and _shown(current) == sysctl.normalize(value):
        return False
    _add_diff(diffs, what or path, (current or "").rstrip("\n") + "\n", str(value) + "\n")
    if not module.check_mode:
        with open(path, "w") as f:
            f.write(str(value) + "\n")
    return True


def restore_gpus(module, entries, diffs=None):
    """Let gpu_settings plan and apply the prior values of GPU entries, in one NVML session. ``diffs`` gets each
    setting that changes (or would): its value now and the recorded one."""
    if not entries:
        return [], []
    nv = nvml.load_pynvml(module.params["nvml_library"])
    plans = []
    with nvml_session(nv):
        done = gs.restore(nv, entries, module.check_mode, plans)
    by_uuid = dict((plan["uuid"], plan) for plan in plans)
    for e, changed in done:
        plan = by_uuid.get(e["uuid"])
        if changed and plan is not None:
            key = e["setting"]
            before, after = plan["before"].get(key), plan["after"].get(key)
            _add_diff(diffs, _describe(e), _setting_text(key, before), _setting_text(key, after))
    return [_describe(e) for e, changed in done if changed], [_describe(e) for e, changed in done if not changed]


def restore_nics(module, entries, diffs=None):
    """Put NIC settings back through nic_settings' plan (ethtool, ip). ``diffs`` gets each field that changes (or
    would): its value now and the recorded one."""
    restored, unchanged = [], []
    by_name = {}
    for e in entries:
        by_name.setdefault(e["name"], []).append(e)
    ethtool_bin = module.params["ethtool_path"] or module.get_bin_path("ethtool")
    ip_bin = module.get_bin_path("ip")

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    for name, items in sorted(by_name.items()):
        current = nic.read_nic(
            HostFS("/"),
            name,
            Ethtool(run, ethtool_bin) if ethtool_bin else None,
            None if ethtool_bin else "ethtool not found",
        )
        want = dict((e["field"], e["value"]) for e in items if e["value"] is not None)
        before, after, steps, _unsupported = nic_settings.plan(current, want)
        changed_fields = set(s[0] for s in steps)
        for e in items:
            field = e["field"]
            (restored if field in changed_fields else unchanged).append(_describe(e))
            if field in changed_fields:
                _add_diff(
                    diffs, _describe(e), _setting_text(field, before.get(field)), _setting_text(field, after.get(field))
                )
        if module.check_mode:
            continue
        for field, argv, tool in steps:
            full = [ethtool_bin if tool == "ethtool" else ip_bin] + argv
            rc, out, err = run(full)
            if rc != 0:
                module.fail_json(msg="restoring %s of %s failed: %s" % (field, name, (err or out).strip()))
    return restored, unchanged
