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
    M(gpufleet.tuning.gpu_runtime) role re-applies them at boot from the file O(config_file) records them in.
  - ECC and MIG modes change the I(pending) mode, which takes effect after a reboot or GPU reset; the module then
    returns C(reboot_required=true).
  - NVML has no getter for locked clocks; what this module applied is recorded in C(state_dir)/locked_clocks.json
    so a second run knows nothing changed. Locks set by other tools are not seen.
author:
  - gpufleet contributors (@gpufleet)
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
  config_file:
    description:
      - The GPU boot configuration (JSON) that C(gpufleet-gpu-apply), run at every boot by the
        M(gpufleet.tuning.gpu_runtime) role's C(gpufleet-gpu-runtime.service), re-applies.
      - The settings of this call that the driver forgets at reboot (persistence mode, power limit, compute mode,
        application and locked clocks) are merged into it per GPU UUID, after they are applied; other GPUs and
        settings in the file are kept. ECC and MIG modes persist on the GPU and are not recorded.
      - Written atomically, only when a setting in it changes (the diff has a line per GPU UUID and setting that
        changes); not written in check mode. A file that holds the same settings in another layout is left alone.
      - Unset (the default) to record nothing.
    type: path
    version_added: "0.2.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
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

- name: Persistence on now and at every boot (the file gpufleet-gpu-apply reads)
  gpufleet.tuning.gpu_settings:
    persistence_mode: true
    config_file: /etc/gpufleet/gpu-runtime.json
  become: true

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
config_changed:
  description: O(config_file) was written (or would be, in check mode) because its content changes.
  returned: when O(config_file) is set
  type: bool
  version_added: "0.2.0"
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_boot_config as boot
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_settings as gs
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml, rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import read_text, write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.nvml_session import NvmlInitError, nvml_session


class GpuSettings(object):
    """Current against wanted per GPU, then ``changed``, then the work (outside check mode), then the result.

    ``want`` is the parsed request (gpu_settings.parse_request); ``nv`` an initialised NVML.
    """

    def __init__(self, module, nv, want):
        self.module = module
        self.params = module.params
        self.nv = nv
        self.want = want

        self.plans = []  # per GPU: before, after and the NVML calls between them
        self.gpus = []  # the per-GPU result
        self.config_before = None  # config_file's text now (None: no file)
        self.config_current = {}  # the configuration it holds
        self.config_wanted = {}  # the configuration after this run
        self.set_gpus = False  # do NVML calls need to run
        self.write_config = False  # does config_file need to be written
        self.changed = False

        self.process()

    def process(self):
        p = self.params

        # What the GPUs hold and what each would need; every request checked on every GPU before any write.
        locked = gs.load_locked(p["state_dir"])
        self.plans = [gs.plan_gpu(self.nv, i, self.want, locked) for i in gs.select_gpus(self.nv, p["gpus"])]
        if p["strict"]:
            gs.check_strict(self.plans)
        existing = {}
        if p["config_file"]:
            self.config_before = read_text(p["config_file"])
            existing = boot.parse(self.config_before, p["config_file"])
        self.set_gpus = any(plan["calls"] for plan in self.plans)

        # Do the work
        if self.set_gpus and not self.module.check_mode:
            rollback.record_for(self.module, gs.rollback_entries(self.plans, p["state_dir"]))
            gs.apply_and_remember(self.nv, self.plans, p["strict"], p["state_dir"])
        self.gpus = gs.results(self.plans)

        # The boot configuration holds what the GPUs now have (or will have, in check mode). It changes when a
        # setting in it changes (a file that only looks different, or an empty configuration, is not written).
        if p["config_file"]:
            self.config_current = boot.merge(existing, [])
            self.config_wanted = boot.merge(existing, self.gpus)
            self.write_config = self.config_wanted != self.config_current
            if self.write_config and not self.module.check_mode:
                self.write_config_file()

        self.changed = self.write_config or any(g["changed"] for g in self.gpus)

    def write_config_file(self):
        path = self.params["config_file"]
        rollback.record_for(self.module, [{"kind": "file", "path": path, "content": self.config_before}])
        try:
            write_atomic(path, boot.render(self.config_wanted))
        except (IOError, OSError) as exc:
            self.module.fail_json(msg="config_file: cannot write %s: %s" % (path, exc))

    def diff(self):
        gpus = gs.diff(self.gpus)
        if not self.params["config_file"]:
            return gpus
        before, after = boot.changes(self.config_current, self.config_wanted)
        config = {
            "before_header": self.params["config_file"],
            "after_header": self.params["config_file"],
            "before": before,
            "after": after,
        }
        return [gpus, config]

    def result(self):
        out = dict(
            changed=self.changed, gpus=self.gpus, reboot_required=gs.reboot_required(self.gpus), diff=self.diff()
        )
        if self.params["config_file"]:
            out["config_changed"] = self.write_config
        return out


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
            config_file=dict(type="path"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    p = module.params
    rollback.check_params(module)
    try:
        want = gs.parse_request(p)
    except gs.SettingsError as exc:
        module.fail_json(msg=str(exc))

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
        with nvml_session(nv):
            result = GpuSettings(module, nv, want).result()
    except NvmlInitError as exc:
        module.fail_json(msg="NVML could not be initialised: %s" % nvml.error_name(exc.error))
    except nv.NVMLError as exc:
        module.fail_json(msg="reading GPU settings failed: %s" % nvml.error_name(exc))
    except (gs.SettingsError, boot.BootConfigError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
