# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: gpu_boot_config
short_description: Per-GPU settings to re-apply at boot, from gpu_settings results
version_added: "0.1.0"
description:
  - "Merges the C(after) values of registered M(gpufleet.tuning.gpu_settings) results into
    C({gpus: {UUID: {persistence_mode, power_limit_w, compute_mode, application_clocks, locked_clocks}}}),
    on top of an existing configuration, keeping only settings the driver forgets at reboot."
options:
  _input:
    description: The existing configuration (a dict, may be empty).
    type: dict
    required: true
  results:
    description: Registered gpu_settings results (skipped ones are ignored).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Build the boot configuration
  ansible.builtin.set_fact:
    config: "{{ existing | gpufleet.tuning.gpu_boot_config([persistence_result, power_result]) }}"
"""

RETURN = r"""
_value:
  description: The merged configuration.
  type: dict
"""

import copy

from ansible.errors import AnsibleFilterError

# Settings NVML resets at reboot or driver reload; ECC and MIG modes persist on the GPU itself.
VOLATILE = ("persistence_mode", "power_limit_w", "compute_mode", "application_clocks", "locked_clocks")


def gpu_boot_config(existing, results):
    if existing is None:
        existing = {}
    if not isinstance(existing, dict):
        raise AnsibleFilterError("gpu_boot_config: the existing configuration must be a dict")
    config = copy.deepcopy(existing)
    gpus = config.setdefault("gpus", {})
    for res in results or []:
        if not isinstance(res, dict) or res.get("skipped") or "gpus" not in res:
            continue
        for gpu in res["gpus"]:
            entry = gpus.setdefault(str(gpu["uuid"]), {})
            for key, value in (gpu.get("after") or {}).items():
                if key not in VOLATILE:
                    continue
                if key == "locked_clocks" and value == "none":
                    entry.pop(key, None)
                    continue
                entry[key] = value
    config["gpus"] = {uuid: entry for uuid, entry in sorted(gpus.items()) if entry}
    return config


class FilterModule:
    def filters(self):
        return {"gpu_boot_config": gpu_boot_config}
