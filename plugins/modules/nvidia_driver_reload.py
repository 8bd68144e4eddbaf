#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_reload
short_description: Load a newly installed NVIDIA kernel module in place of the old one, when nothing uses the GPUs
version_added: "0.2.0"
description:
  - After a driver upgrade the old kernel module stays loaded and every new CUDA/NVML process fails with
    "Driver/library version mismatch" until the module is reloaded or the host reboots. This module does the reload.
  - Does nothing when the loaded module already is C(version).
  - Checks again, right before unloading, that no compute process runs (NVML) and that no process holds
    C(/dev/nvidia*) open (the driver's own daemons excepted); fails without touching anything otherwise.
  - Stops the C(services) that are running (they hold the device files), unloads the driver's modules
    (C(modprobe -r), dependants first - nvidia_peermem, nvidia_uvm, nvidia_drm, nvidia_modeset, nvidia), loads them
    again (C(modprobe)), starts the services again, and fails unless the loaded module is then C(version).
author:
  - gpufleet contributors (@gpufleet)
options:
  version:
    description: The driver version the loaded module must have afterwards, e.g. C(550.90.07) (a package revision
      such as C(-1) is ignored).
    type: str
    required: true
  services:
    description: systemd units holding the device files that are stopped for the reload and started again.
    type: list
    elements: str
    default: [nvidia-persistenced.service, nvidia-fabricmanager.service, nvidia-imex.service]
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes
  - gpufleet.tuning.gpu_reader
attributes:
  check_mode:
    support: full
    details: Reports the reload it would do.
  diff_mode:
    support: full
    details: The loaded module version before and after.
seealso:
  - module: gpufleet.tuning.nvidia_driver_preflight
"""

EXAMPLES = r"""
- name: Load the 550.90.07 module now (the role does this when nothing uses the GPUs)
  gpufleet.tuning.nvidia_driver_reload:
    version: 550.90.07
"""

RETURN = r"""
before:
  description: The loaded module's version before ('' when none was loaded).
  returned: always
  type: str
after:
  description: The loaded module's version afterwards (in check mode, the one it would be).
  returned: always
  type: str
modules:
  description: The kernel modules unloaded and loaded again.
  returned: changed
  type: list
  elements: str
services:
  description: The services stopped and started again.
  returned: changed
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvidia_driver as nd
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def main():
    argument_spec = dict(gpu.ARGUMENT_SPEC)
    argument_spec.update(
        version=dict(type="str", required=True),
        services=dict(
            type="list",
            elements="str",
            default=["nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-imex.service"],
        ),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    gpu.check_params(module)
    want = nd.upstream(module.params["version"])
    if not want or nd.branch_of(want) is None:
        module.fail_json(msg="version: a driver version such as 550.90.07 (got %r)" % module.params["version"])
    driver = nd.DriverReload(module, HostFS("/"), want, lambda fs: gpu.read(module, fs))
    result = driver.plan()
    if result["changed"] and module.check_mode:
        result["services"] = []  # the services stopped are those active at the time: not known in check mode
    elif result["changed"]:
        driver.apply()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
