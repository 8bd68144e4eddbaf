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


def loaded_version(module, fs):
    """(version, nvml facts): the kernel's word first, else the driver version NVML reports (only while loaded)."""
    facts = gpu.read(module, fs)
    version = facts["driver"].get("kernel_module_version")
    if not version and facts["nvml"].get("available"):
        version = facts["driver"].get("version")
    return version or "", facts


def tool(module, name):
    # PATH first, then the sbin directories get_bin_path adds.
    return module.get_bin_path(name, required=True)


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
    fs = HostFS("/")
    before, facts = loaded_version(module, fs)
    result = {"changed": False, "before": before, "after": before}
    if before == want:
        module.exit_json(**result)
    result.update(
        changed=True,
        after=want,
        diff={"before": "nvidia module %s\n" % (before or "not loaded"), "after": "nvidia module %s\n" % want},
    )
    modules = nd.loaded_modules(fs) or (["nvidia"] if before else [])
    result["modules"] = modules
    if module.check_mode:
        result["services"] = []
        module.exit_json(**result)

    processes = None
    if facts["nvml"].get("available"):
        processes = [
            {"gpu": g.get("index"), "pid": p.get("pid")} for g in facts["gpus"] for p in g.get("processes") or []
        ]
    busy = nd.in_use(processes, nd.device_holders(fs)) + nd.module_users(nd.module_refcounts(fs))
    if busy:
        module.fail_json(
            msg="refusing to unload the nvidia modules: the GPUs are in use: %s" % "; ".join(busy), **result
        )

    systemctl = module.get_bin_path("systemctl")
    stopped = []
    if systemctl:
        for unit in module.params["services"]:
            rc, out, err = module.run_command([systemctl, "is-active", unit])
            if out.strip() == "active":
                rc, out, err = module.run_command([systemctl, "stop", unit])
                if rc != 0:
                    module.fail_json(msg="cannot stop %s: %s" % (unit, (err or out).strip()), **result)
                stopped.append(unit)
    result["services"] = stopped

    def restart_services():
        for unit in stopped:
            module.run_command([systemctl, "start", unit])

    modprobe = tool(module, "modprobe")
    if modules:
        rc, out, err = module.run_command([modprobe, "-r"] + modules)
        if rc != 0:
            restart_services()
            module.fail_json(
                msg="modprobe -r %s failed (rc %d): %s; the old module %s stays loaded"
                % (" ".join(modules), rc, (err or out).strip(), before),
                **result,
            )
    for name in reversed(modules or ["nvidia"]):
        rc, out, err = module.run_command([modprobe, name])
        if rc != 0:
            restart_services()
            module.fail_json(
                msg="modprobe %s failed (rc %d): %s (check `dkms status`, `dmesg | grep -i nvidia` and "
                "Secure Boot module signing)" % (name, rc, (err or out).strip()),
                **result,
            )
    restart_services()
    after, facts = loaded_version(module, fs)
    result["after"] = after
    if after != want:
        module.fail_json(
            msg="after the reload the loaded nvidia module is %s, not %s" % (after or "none", want), **result
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
