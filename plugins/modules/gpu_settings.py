#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_settings
short_description: Set NVIDIA GPU runtime settings through NVML (persistence, power limit, clocks, ECC, MIG)
version_added: "0.1.0"
description:
  - Compares each selected GPU's current settings with the requested ones and changes only what differs.
  - Every request is validated against every selected GPU (power limit range, supported clocks) before anything
    is written, so a bad value never leaves a host half-configured.
  - Power limit, persistence mode, application clocks and locked clocks reset at reboot or driver reload; the
    M(gpufleet.tuning.gpu_runtime) role re-applies them at boot.
  - ECC and MIG modes change the I(pending) mode, which takes effect after a reboot or GPU reset; the module then
    returns C(reboot_required=true).
  - NVML has no getter for locked clocks; what this module applied is recorded in C(state_dir)/locked_clocks.json
    so a second run knows nothing changed. Locks set by other tools are not seen.
author:
  - gpufleet team (!UNKNOWN)
options:
  gpus:
    description: GPUs to configure; C(all), NVML indexes (C("0")) or UUIDs (C(GPU-...)).
    type: list
    elements: str
    default: [all]
  persistence_mode:
    description: Enable or disable persistence mode.
    type: bool
  power_limit:
    description:
      - Power limit as watts (C(350) or C(350W)), percent of the GPU's default (C(90%)), C(default) or C(max).
      - A value outside the GPU's allowed range fails, naming the range.
    type: str
  power_limit_cap:
    description:
      - A declared cap, in watts like C(300) or as C(NN%) of each GPU's default. A O(power_limit) that resolves above
        it on any selected GPU fails before anything is written, naming the GPU and the cap. A cap below a GPU's
        minimum limit counts as that minimum.
      - The M(gpufleet.tuning.gpu_runtime) role passes the policy's C(power.limit_w) or C(power.limit_pct) here.
    type: str
    version_added: "0.2.0"
  power_limit_clamp:
    description:
      - Clamp O(power_limit) to each GPU's allowed range (C(nvmlDeviceGetPowerManagementLimitConstraints)) instead of
        failing, as the audit's rule GPU-PWR-002 does for a declared cap.
    type: bool
    default: false
    version_added: "0.2.0"
  power_limit_at_least:
    description:
      - O(power_limit) is a minimum. A GPU whose limit is already at or above it (and not above O(power_limit_cap))
        keeps its limit, as the audit judges C(power.min_power_limit_pct).
    type: bool
    default: false
    version_added: "0.2.0"
  compute_mode:
    description: Compute mode.
    type: str
    choices: [default, exclusive_process, prohibited]
  application_clocks:
    description:
      - C(default) to reset, or a dict with C(memory_mhz) and C(graphics_mhz) (a pair the GPU supports).
    type: raw
  locked_clocks:
    description:
      - C(none) to remove a lock, or a dict with C(min_mhz) and C(max_mhz) for the graphics clock.
    type: raw
  ecc_mode:
    description: Pending ECC mode (takes effect after a reboot).
    type: bool
  mig_mode:
    description: Pending MIG mode (takes effect after a GPU reset or reboot).
    type: bool
  strict:
    description: Fail when a GPU does not support a requested setting instead of reporting it.
    type: bool
    default: false
  state_dir:
    description: Where gpufleet records what it applied (locked clocks).
    type: path
    default: /var/lib/gpufleet
  nvml_library:
    description: Path of C(libnvidia-ml.so.1) when the driver is outside the loader's search path.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.rollback
attributes:
  platform:
    platforms: posix
    support: full
  check_mode:
    support: full
  diff_mode:
    support: full
requirements:
  - nvidia-ml-py (C(pynvml)) on the target; root (C(become=true)) for every change.
notes:
  - A GPU that reports NotSupported for a setting is listed under its C(unsupported) and skipped unless C(strict).
"""

EXAMPLES = r"""
- name: Persistence on and the power limit back to the default on every GPU
  gpufleet.tuning.gpu_settings:
    persistence_mode: true
    power_limit: default
  become: true

- name: Cap two GPUs at 90 % of their default limit
  gpufleet.tuning.gpu_settings:
    gpus: ["0", "GPU-6f1c2a3b-0d4e-5f60-8a9b-0c1d2e3f4a5b"]
    power_limit: 90%
  become: true

- name: Set the declared cap exactly, clamped to each GPU's range, never above it
  gpufleet.tuning.gpu_settings:
    power_limit: "300"
    power_limit_cap: "300"
    power_limit_clamp: true
  become: true

- name: Raise capped GPUs to their default limit, leave GPUs at or above it alone
  gpufleet.tuning.gpu_settings:
    power_limit: 100%
    power_limit_at_least: true
  become: true

- name: Lock graphics clocks and request ECC on at next boot
  gpufleet.tuning.gpu_settings:
    locked_clocks: {min_mhz: 1410, max_mhz: 1410}
    ecc_mode: true
  become: true
  register: gpu

- name: Tell the operator a reboot is needed
  ansible.builtin.debug:
    msg: "reboot needed for ECC"
  when: gpu.reboot_required
"""

RETURN = r"""
gpus:
  description: Per selected GPU what was found, what is wanted and what was done.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: NVML index., type: int}
    uuid: {description: GPU UUID., type: str}
    before: {description: Current values of the requested settings., type: dict}
    after: {description: Values after the run (or that a run would set in check mode)., type: dict}
    changed: {description: "Settings that differ (changed, or would change in check mode).", type: list}
    unsupported: {description: Setting to NVML reason for settings this GPU does not support., type: dict}
reboot_required:
  description: A pending ECC or MIG mode differs from the current one.
  returned: always
  type: bool
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_settings as gs
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml, rollback


def _clock_pair(module, name, value, keys):
    if not isinstance(value, dict) or set(value) != set(keys):
        return None
    out = {}
    for key in keys:
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, str) and v.isdigit()):
            module.fail_json(msg="%s.%s: must be a whole number of MHz, got %r" % (name, key, v))
        out[key] = int(v)
        if not 0 < out[key] <= 100000:
            module.fail_json(msg="%s.%s: %d MHz is not a plausible clock" % (name, key, out[key]))
    return out


def _wanted(module):
    p = module.params
    want = {
        "persistence_mode": p["persistence_mode"],
        "compute_mode": p["compute_mode"],
        "ecc_mode": p["ecc_mode"],
        "mig_mode": p["mig_mode"],
        "power_limit": None,
        "application_clocks": None,
        "locked_clocks": None,
    }
    if p["power_limit"] is not None:
        try:
            want["power_limit"] = gs.parse_power_limit(p["power_limit"])
        except gs.SettingsError as exc:
            module.fail_json(msg=str(exc))
    if p["power_limit_cap"] is not None:
        try:
            kind, number = gs.parse_power_limit(p["power_limit_cap"])
        except gs.SettingsError as exc:
            module.fail_json(msg=str(exc).replace("power_limit:", "power_limit_cap:", 1))
        if kind not in ("watts", "percent"):
            module.fail_json(msg="power_limit_cap: use watts (300) or a percent of the default (80%%), got %r"
                             % p["power_limit_cap"])
        want["power_limit_cap"] = (kind, number)
        want["power_limit_cap_text"] = p["power_limit_cap"]
    want["power_limit_clamp"] = p["power_limit_clamp"]
    want["power_limit_at_least"] = p["power_limit_at_least"]
    if p["application_clocks"] is not None:
        value = p["application_clocks"]
        if value == "default":
            want["application_clocks"] = "default"
        else:
            want["application_clocks"] = _clock_pair(
                module, "application_clocks", value, ("memory_mhz", "graphics_mhz")
            )
            if want["application_clocks"] is None:
                module.fail_json(
                    msg="application_clocks: use 'default' or {memory_mhz: N, graphics_mhz: N}, got %r" % (value,)
                )
    if p["locked_clocks"] is not None:
        value = p["locked_clocks"]
        if value in ("none", "reset"):
            want["locked_clocks"] = "none"
        else:
            want["locked_clocks"] = _clock_pair(module, "locked_clocks", value, ("min_mhz", "max_mhz"))
            if want["locked_clocks"] is None:
                module.fail_json(msg="locked_clocks: use 'none' or {min_mhz: N, max_mhz: N}, got %r" % (value,))
            if want["locked_clocks"]["min_mhz"] > want["locked_clocks"]["max_mhz"]:
                module.fail_json(
                    msg="locked_clocks: min_mhz %(min_mhz)d is above max_mhz %(max_mhz)d" % want["locked_clocks"]
                )
    return want


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="list", elements="str", default=["all"]),
            persistence_mode=dict(type="bool"),
            power_limit=dict(type="str"),
            power_limit_cap=dict(type="str"),
            power_limit_clamp=dict(type="bool", default=False),
            power_limit_at_least=dict(type="bool", default=False),
            compute_mode=dict(type="str", choices=list(gs.COMPUTE_MODES)),
            application_clocks=dict(type="raw"),
            locked_clocks=dict(type="raw"),
            ecc_mode=dict(type="bool"),
            mig_mode=dict(type="bool"),
            strict=dict(type="bool", default=False),
            state_dir=dict(type="path", default="/var/lib/gpufleet"),
            nvml_library=dict(type="path"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    p = module.params
    rollback.check_params(module)
    want = _wanted(module)

    try:
        nv = nvml.load_pynvml(p["nvml_library"])
    except ImportError:
        module.fail_json(
            msg="pynvml cannot be imported on the target: install nvidia-ml-py (role gpufleet.tuning.prereqs)",
            exception=traceback.format_exc(),
        )
    except OSError as exc:
        module.fail_json(msg="nvml_library: cannot load %s: %s" % (p["nvml_library"], exc))
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        module.fail_json(msg="NVML could not be initialised: %s" % nvml.error_name(exc))

    try:
        locked = gs.load_locked(p["state_dir"])
        try:
            plans = [gs.plan_gpu(nv, i, want, locked) for i in gs.select_gpus(nv, p["gpus"])]
        except nv.NVMLError as exc:
            module.fail_json(msg="reading GPU settings failed: %s" % nvml.error_name(exc))
        if p["strict"]:
            for plan in plans:
                if plan["unsupported"]:
                    module.fail_json(
                        msg="strict: GPU %d does not support %s"
                        % (plan["index"], ", ".join("%s (%s)" % kv for kv in sorted(plan["unsupported"].items())))
                    )
        changed = any(plan["calls"] for plan in plans)
        if changed and not module.check_mode:
            entries = []
            for plan in plans:
                for key, _fn, _args in plan["calls"]:
                    value = plan["before"].get(key)
                    if key in ("ecc_mode", "mig_mode"):
                        value = value["pending"]
                    entries.append({"kind": "gpu", "uuid": plan["uuid"], "setting": key, "value": value,
                                    "state_dir": p["state_dir"]})
            rollback.record_for(module, entries)
            gs.apply(nv, plans, p["strict"])
            if want["locked_clocks"] is not None:
                for plan in plans:
                    if "locked_clocks" in plan.get("applied", []):
                        if want["locked_clocks"] == "none":
                            locked.pop(plan["uuid"], None)
                        else:
                            locked[plan["uuid"]] = want["locked_clocks"]
                gs.save_locked(p["state_dir"], locked)
    except gs.SettingsError as exc:
        module.fail_json(msg=str(exc))
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass

    result_gpus = []
    for plan in plans:
        result_gpus.append(
            {
                "index": plan["index"],
                "uuid": plan["uuid"],
                "before": plan["before"],
                "after": plan["after"],
                "changed": sorted(set(c[0] for c in plan["calls"]) - set(plan["unsupported"])),
                "unsupported": plan["unsupported"],
            }
        )
    reboot_required = any(
        g["after"].get(key, {}).get("pending") != g["after"].get(key, {}).get("current")
        for g in result_gpus
        for key in ("ecc_mode", "mig_mode")
        if key in g["after"]
    )
    changed = any(g["changed"] for g in result_gpus)
    diff = {
        "before": "".join(
            "GPU %d %s: %s\n" % (g["index"], k, g["before"].get(k)) for g in result_gpus for k in g["changed"]
        ),
        "after": "".join(
            "GPU %d %s: %s\n" % (g["index"], k, g["after"].get(k)) for g in result_gpus for k in g["changed"]
        ),
    }
    module.exit_json(changed=changed, gpus=result_gpus, reboot_required=reboot_required, diff=diff)


if __name__ == "__main__":
    main()
