# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Desired-vs-current GPU settings through NVML: plan every change first, then apply.

Nothing is written until every selected GPU's plan is valid, so a bad value never leaves a host
half-configured. NVML has no getter for locked clocks: what was applied is recorded in a JSON file
(``<state_dir>/locked_clocks.json``) so that a second run can tell nothing changed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.nvml import error_name

COMPUTE_MODES = {"default": 0, "exclusive_process": 3, "prohibited": 2}
COMPUTE_NAMES = dict((v, k) for k, v in COMPUTE_MODES.items())
LOCKED_FILE = "locked_clocks.json"


class SettingsError(Exception):
    """A request that cannot be applied; the message names the option."""


class NeedsRoot(SettingsError):
    pass


def parse_power_limit(value):
    """'default' | 'max' | '<watts>' | '<watts>W' | '<percent>%' -> ('default'|'max'|'watts'|'percent', number)."""
    text = str(value).strip().lower()
    if text in ("default", "max"):
        return text, None
    m = re.match(r"^(\d+(?:\.\d+)?)\s*(%|w)?$", text)
    if not m:
        raise SettingsError(
            "power_limit: %r is not valid (use watts like 350, a percent of the default like 90%%, "
            "'default' or 'max')" % (value,)
        )
    number = float(m.group(1))
    if m.group(2) == "%":
        if not 0 < number <= 100:
            raise SettingsError(
                "power_limit: %s%% must be above 0 and at most 100 (percent of the default limit)" % m.group(1)
            )
        return "percent", number
    if number <= 0:
        raise SettingsError("power_limit: %s W must be above 0" % m.group(1))
    return "watts", number


def _clock_pair(name, value, keys):
    """{key: MHz} for a dict with exactly ``keys``; None for any other shape. Raises SettingsError for a bad number."""
    if not isinstance(value, dict) or set(value) != set(keys):
        return None
    out = {}
    for key in keys:
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, str) and v.isdigit()):
            raise SettingsError("%s.%s: must be a whole number of MHz, got %r" % (name, key, v))
        out[key] = int(v)
        if not 0 < out[key] <= 100000:
            raise SettingsError("%s.%s: %d MHz is not a plausible clock" % (name, key, out[key]))
    return out


def parse_application_clocks(value):
    """'default' or {memory_mhz, graphics_mhz} -> 'default' or a checked dict."""
    if value == "default":
        return "default"
    pair = _clock_pair("application_clocks", value, ("memory_mhz", "graphics_mhz"))
    if pair is None:
        raise SettingsError("application_clocks: use 'default' or {memory_mhz: N, graphics_mhz: N}, got %r" % (value,))
    return pair


def parse_locked_clocks(value):
    """'none' (or 'reset') or {min_mhz, max_mhz} -> 'none' or a checked dict."""
    if value in ("none", "reset"):
        return "none"
    pair = _clock_pair("locked_clocks", value, ("min_mhz", "max_mhz"))
    if pair is None:
        raise SettingsError("locked_clocks: use 'none' or {min_mhz: N, max_mhz: N}, got %r" % (value,))
    if pair["min_mhz"] > pair["max_mhz"]:
        raise SettingsError("locked_clocks: min_mhz %(min_mhz)d is above max_mhz %(max_mhz)d" % pair)
    return pair


def parse_request(params):
    """The settings a gpu_settings call asks for (its module parameters) -> the ``want`` that plan_gpu takes.

    Raises SettingsError naming the option for a value that can never be applied; checks that depend on a GPU
    (allowed power range, supported clocks) are plan_gpu's.
    """
    want = {
        "persistence_mode": params.get("persistence_mode"),
        "compute_mode": params.get("compute_mode"),
        "ecc_mode": params.get("ecc_mode"),
        "mig_mode": params.get("mig_mode"),
        "power_limit": None,
        "application_clocks": None,
        "locked_clocks": None,
        "power_limit_clamp": bool(params.get("power_limit_clamp")),
        "power_limit_at_least": bool(params.get("power_limit_at_least")),
    }
    if params.get("power_limit") is not None:
        want["power_limit"] = parse_power_limit(params["power_limit"])
    if params.get("power_limit_cap") is not None:
        try:
            kind, number = parse_power_limit(params["power_limit_cap"])
        except SettingsError as exc:
            raise SettingsError(str(exc).replace("power_limit:", "power_limit_cap:", 1)) from exc
        if kind not in ("watts", "percent"):
            raise SettingsError(
                "power_limit_cap: use watts (300) or a percent of the default (80%%), got %r"
                % params["power_limit_cap"]
            )
        want["power_limit_cap"] = (kind, number)
        want["power_limit_cap_text"] = params["power_limit_cap"]
    if params.get("application_clocks") is not None:
        want["application_clocks"] = parse_application_clocks(params["application_clocks"])
    if params.get("locked_clocks") is not None:
        want["locked_clocks"] = parse_locked_clocks(params["locked_clocks"])
    return want


def resolve_power_limit(kind, number, default, maximum):
    """Milliwatts for one GPU from a parsed power limit (see parse_power_limit) and its default and maximum (mW)."""
    if kind == "default":
        return int(default)
    if kind == "max":
        return int(maximum)
    if kind == "watts":
        return int(round(number * 1000))
    return int(round(int(default) * number / 100.0))


def select_gpus(nv, selectors):
    """Handles for 'all', indexes and UUIDs. Raises SettingsError for a GPU that does not exist."""
    count = int(nv.nvmlDeviceGetCount())
    chosen = []
    for sel in selectors or ["all"]:
        sel = str(sel).strip()
        if sel == "all":
            indexes = list(range(count))
        elif sel.isdigit():
            if int(sel) >= count:
                raise SettingsError(
                    "gpus: index %s does not exist (this host has %d GPU(s): 0-%d)" % (sel, count, count - 1)
                )
            indexes = [int(sel)]
        elif re.match(r"^(GPU|MIG)-[0-9a-fA-F-]+$", sel):
            try:
                handle = nv.nvmlDeviceGetHandleByUUID(sel)
                indexes = [int(nv.nvmlDeviceGetIndex(handle))]
            except nv.NVMLError as exc:
                raise SettingsError("gpus: no GPU with UUID %s (%s)" % (sel, error_name(exc))) from exc
        else:
            raise SettingsError("gpus: %r is not 'all', a GPU index or a GPU UUID" % sel)
        for i in indexes:
            if i not in chosen:
                chosen.append(i)
    return sorted(chosen)


def _read(nv, fn, *args):
    try:
        return fn(*args), None
    except nv.NVMLError as exc:
        return None, error_name(exc)


def load_locked(state_dir):
    try:
        with open(os.path.join(state_dir, LOCKED_FILE)) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (IOError, OSError, ValueError):
        return {}


def save_locked(state_dir, data):
    """Atomic write of the locked-clock record."""
    write_atomic(os.path.join(state_dir, LOCKED_FILE), json.dumps(data, indent=2, sort_keys=True))


def plan_gpu(nv, index, want, locked_record):
    """Current values, desired values and the NVML calls that take one to the other, for one GPU."""
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    uuid = nv.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    before, after, calls, unsupported = {}, {}, [], {}

    if want.get("persistence_mode") is not None:
        cur, err = _read(nv, nv.nvmlDeviceGetPersistenceMode, handle)
        if err:
            unsupported["persistence_mode"] = err
        else:
            before["persistence_mode"] = bool(cur)
            after["persistence_mode"] = bool(want["persistence_mode"])
            if before["persistence_mode"] != after["persistence_mode"]:
                mode = nv.NVML_FEATURE_ENABLED if want["persistence_mode"] else nv.NVML_FEATURE_DISABLED
                calls.append(("persistence_mode", nv.nvmlDeviceSetPersistenceMode, (handle, mode)))

    if want.get("power_limit") is not None:
        kind, number = want["power_limit"]
        cur, err = _read(nv, nv.nvmlDeviceGetPowerManagementLimit, handle)
        limits, err2 = _read(nv, nv.nvmlDeviceGetPowerManagementLimitConstraints, handle)
        default, err3 = _read(nv, nv.nvmlDeviceGetPowerManagementDefaultLimit, handle)
        if err or err2 or err3:
            unsupported["power_limit"] = err or err2 or err3
        else:
            lo, hi = int(limits[0]), int(limits[1])
            target = resolve_power_limit(kind, number, int(default), hi)
            if want.get("power_limit_clamp"):
                target = min(max(target, lo), hi)
            if not lo <= target <= hi:
                raise SettingsError(
                    "power_limit: %s W is outside GPU %d's allowed range %s-%s W" % (_w(target), index, _w(lo), _w(hi))
                )
            if want.get("power_limit_cap") is not None:
                # The cap as NVML can enforce it: a cap below the GPU's minimum means the minimum.
                cap_kind, cap_number = want["power_limit_cap"]
                cap = min(max(resolve_power_limit(cap_kind, cap_number, int(default), hi), lo), hi)
                if target > cap:
                    raise SettingsError(
                        "power_limit: %s W for GPU %d is above the declared cap of %s W "
                        "(power_limit_cap %s): an owner's cap is kept; lower power_limit or change "
                        "the cap" % (_w(target), index, _w(cap), want["power_limit_cap_text"])
                    )
            if (
                want.get("power_limit_at_least")
                and int(cur) >= target
                and (want.get("power_limit_cap") is None or int(cur) <= cap)
            ):
                target = int(cur)  # a minimum: a GPU already at or above it keeps its limit
            before["power_limit_w"] = _w(cur)
            after["power_limit_w"] = _w(target)
            if int(cur) != target:
                calls.append(("power_limit_w", nv.nvmlDeviceSetPowerManagementLimit, (handle, target)))

    if want.get("compute_mode") is not None:
        cur, err = _read(nv, nv.nvmlDeviceGetComputeMode, handle)
        if err:
            unsupported["compute_mode"] = err
        else:
            before["compute_mode"] = COMPUTE_NAMES.get(int(cur), "unknown_%d" % int(cur))
            after["compute_mode"] = want["compute_mode"]
            if before["compute_mode"] != after["compute_mode"]:
                calls.append(
                    ("compute_mode", nv.nvmlDeviceSetComputeMode, (handle, COMPUTE_MODES[want["compute_mode"]]))
                )

    if want.get("application_clocks") is not None:
        _plan_app_clocks(nv, handle, index, want["application_clocks"], before, after, calls, unsupported)

    if want.get("locked_clocks") is not None:
        wanted = want["locked_clocks"]
        current = locked_record.get(uuid) or "none"
        before["locked_clocks"] = current
        after["locked_clocks"] = wanted
        if wanted != current:
            if wanted == "none":
                calls.append(("locked_clocks", nv.nvmlDeviceResetGpuLockedClocks, (handle,)))
            else:
                max_gr, err = _read(nv, nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_GRAPHICS)
                if err is None and wanted["max_mhz"] > int(max_gr):
                    raise SettingsError(
                        "locked_clocks: max_mhz %d is above GPU %d's maximum graphics clock %d MHz"
                        % (wanted["max_mhz"], index, int(max_gr))
                    )
                calls.append(
                    ("locked_clocks", nv.nvmlDeviceSetGpuLockedClocks, (handle, wanted["min_mhz"], wanted["max_mhz"]))
                )

    for key, getter, setter in (
        ("ecc_mode", nv.nvmlDeviceGetEccMode, nv.nvmlDeviceSetEccMode),
        ("mig_mode", nv.nvmlDeviceGetMigMode, nv.nvmlDeviceSetMigMode),
    ):
        if want.get(key) is None:
            continue
        pair, err = _read(nv, getter, handle)
        if err:
            unsupported[key] = err
            continue
        current, pending = bool(int(pair[0])), bool(int(pair[1]))
        before[key] = {"current": current, "pending": pending}
        after[key] = {"current": current, "pending": bool(want[key])}
        if pending != bool(want[key]):
            mode = nv.NVML_FEATURE_ENABLED if want[key] else nv.NVML_FEATURE_DISABLED
            calls.append((key, setter, (handle, mode)))
    return {"index": index, "uuid": uuid, "before": before, "after": after, "calls": calls, "unsupported": unsupported}


def _w(milliwatts):
    value = int(milliwatts) / 1000.0
    return int(value) if value == int(value) else value


def _plan_app_clocks(nv, handle, index, wanted, before, after, calls, unsupported):
    mem, err = _read(nv, nv.nvmlDeviceGetApplicationsClock, handle, nv.NVML_CLOCK_MEM)
    gr, err2 = _read(nv, nv.nvmlDeviceGetApplicationsClock, handle, nv.NVML_CLOCK_GRAPHICS)
    if err or err2:
        unsupported["application_clocks"] = err or err2
        return
    before["application_clocks"] = {"memory_mhz": int(mem), "graphics_mhz": int(gr)}
    if wanted == "default":
        dmem, err = _read(nv, nv.nvmlDeviceGetDefaultApplicationsClock, handle, nv.NVML_CLOCK_MEM)
        dgr, err2 = _read(nv, nv.nvmlDeviceGetDefaultApplicationsClock, handle, nv.NVML_CLOCK_GRAPHICS)
        if err or err2:
            unsupported["application_clocks"] = err or err2
            return
        target = {"memory_mhz": int(dmem), "graphics_mhz": int(dgr)}
        call = ("application_clocks", nv.nvmlDeviceResetApplicationsClocks, (handle,))
    else:
        target = dict(wanted)
        mems, err = _read(nv, nv.nvmlDeviceGetSupportedMemoryClocks, handle)
        if err is None:
            if target["memory_mhz"] not in [int(m) for m in mems]:
                raise SettingsError(
                    "application_clocks.memory_mhz: %d is not supported by GPU %d (supported: %s)"
                    % (target["memory_mhz"], index, ", ".join(str(int(m)) for m in mems))
                )
            grs, err = _read(nv, nv.nvmlDeviceGetSupportedGraphicsClocks, handle, target["memory_mhz"])
            if err is None and target["graphics_mhz"] not in [int(g) for g in grs]:
                raise SettingsError(
                    "application_clocks.graphics_mhz: %d is not supported by GPU %d at memory %d MHz "
                    "(%d-%d MHz in steps)" % (target["graphics_mhz"], index, target["memory_mhz"], min(grs), max(grs))
                )
        call = (
            "application_clocks",
            nv.nvmlDeviceSetApplicationsClocks,
            (handle, target["memory_mhz"], target["graphics_mhz"]),
        )
    after["application_clocks"] = target
    if target != before["application_clocks"]:
        calls.append(call)


def apply(nv, plans, strict):
    """Run the planned calls. Returns per-GPU applied/failed lists; raises NeedsRoot on NoPermission."""
    for plan in plans:
        plan["applied"] = []
        for key, fn, args in plan["calls"]:
            try:
                fn(*args)
            except nv.NVMLError as exc:
                reason = error_name(exc)
                if reason == "NoPermission":
                    raise NeedsRoot("GPU %d: setting %s needs root (become: true)" % (plan["index"], key)) from exc
                if reason == "NotSupported" and not strict:
                    plan["unsupported"][key] = reason
                    plan["after"][key] = plan["before"].get(key)
                    continue
                raise SettingsError("GPU %d: setting %s failed: %s" % (plan["index"], key, reason)) from exc
            plan["applied"].append(key)
    return plans


def check_strict(plans):
    """strict: a setting a selected GPU does not support fails the whole request (before anything is written)."""
    for plan in plans:
        if plan["unsupported"]:
            raise SettingsError(
                "strict: GPU %d does not support %s"
                % (plan["index"], ", ".join("%s (%s)" % kv for kv in sorted(plan["unsupported"].items())))
            )


def rollback_entries(plans, state_dir):
    """Rollback entries (module_utils/rollback.py, kind 'gpu') with the value each planned call will replace."""
    entries = []
    for plan in plans:
        for key, _fn, _args in plan["calls"]:
            value = plan["before"].get(key)
            if key in ("ecc_mode", "mig_mode"):
                value = value["pending"]
            entries.append(
                {"kind": "gpu", "uuid": plan["uuid"], "setting": key, "value": value, "state_dir": state_dir}
            )
    return entries


def remember_locked(locked_record, plans):
    """Update the locked-clock record (uuid -> {min_mhz, max_mhz}) with the locks ``apply`` set or removed.

    Returns True when the record changed (then save_locked it)."""
    changed = False
    for plan in plans:
        if "locked_clocks" not in plan.get("applied", []):
            continue
        wanted = plan["after"]["locked_clocks"]
        if wanted == "none":
            changed = locked_record.pop(plan["uuid"], None) is not None or changed
        else:
            locked_record[plan["uuid"]] = wanted
            changed = True
    return changed


def apply_and_remember(nv, plans, strict, state_dir):
    """apply() the plans, then record the locked clocks they set (NVML has no getter for them)."""
    locked = load_locked(state_dir)
    apply(nv, plans, strict)
    if remember_locked(locked, plans):
        save_locked(state_dir, locked)
    return plans


def results(plans):
    """What the module returns per GPU: before, after, the settings that differ and the unsupported ones."""
    return [
        {
            "index": plan["index"],
            "uuid": plan["uuid"],
            "before": plan["before"],
            "after": plan["after"],
            "changed": sorted(set(c[0] for c in plan["calls"]) - set(plan["unsupported"])),
            "unsupported": plan["unsupported"],
        }
        for plan in plans
    ]


def reboot_required(gpus):
    """A pending ECC or MIG mode differs from the current one on any GPU (``results`` entries)."""
    return any(
        gpu["after"].get(key, {}).get("pending") != gpu["after"].get(key, {}).get("current")
        for gpu in gpus
        for key in ("ecc_mode", "mig_mode")
        if key in gpu["after"]
    )


def diff(gpus):
    """Ansible's diff for the settings that change: one 'GPU <index> <setting>: <value>' line each."""
    return {
        "before": "".join("GPU %d %s: %s\n" % (g["index"], k, g["before"].get(k)) for g in gpus for k in g["changed"]),
        "after": "".join("GPU %d %s: %s\n" % (g["index"], k, g["after"].get(k)) for g in gpus for k in g["changed"]),
    }


def restore(nv, entries, check_mode, plans=None):
    """Put back the prior values of rollback entries of kind 'gpu', through the same plan and apply as a change.

    ``nv`` is an initialised NVML. Returns ``[(entry, changed)]``; outside check mode the changes are applied.
    ``plans``: a list that gets each GPU's plan (``uuid``, ``before``: its values now, ``after``: the restored ones).
    """
    by_uuid = {}
    for entry in entries:
        by_uuid.setdefault(entry["uuid"], []).append(entry)
    out = []
    for uuid, items in sorted(by_uuid.items()):
        want = {}
        for entry in items:
            key, value = entry["setting"], entry["value"]
            if key == "power_limit_w":
                want["power_limit"] = ("watts", float(value))
            elif key == "locked_clocks":
                want["locked_clocks"] = value if isinstance(value, dict) else "none"
            else:
                want[key] = value
        try:
            handle = nv.nvmlDeviceGetHandleByUUID(uuid)
            index = int(nv.nvmlDeviceGetIndex(handle))
        except nv.NVMLError as exc:
            raise SettingsError("GPU %s: not found (%s)" % (uuid, error_name(exc))) from exc
        state_dir = items[0].get("state_dir") or "/var/lib/gpufleet"
        plan = plan_gpu(nv, index, want, load_locked(state_dir))
        if plans is not None:
            plans.append(plan)
        planned = set(call[0] for call in plan["calls"])
        out.extend((entry, entry["setting"] in planned) for entry in items)
        if plan["calls"] and not check_mode:
            apply_and_remember(nv, [plan], False, state_dir)
    return out
