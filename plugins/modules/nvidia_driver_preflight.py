#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_preflight
short_description: Decide whether and how an NVIDIA driver change may run on a host, before anything changes
version_added: "0.2.0"
description:
  - Reads what a driver change depends on and never changes anything (the role M(gpufleet.tuning.nvidia_driver)
    calls it before its package tasks).
  - The GPUs present and their architecture - through NVML (C(pynvml)) when the driver is loaded, else from the PCI
    devices in C(/sys/bus/pci/devices) (vendor C(0x10de), display class, a table of device id ranges) - and the
    kernel module flavour they need (C(flavour)) - open modules for Blackwell and Grace Hopper and by default from
    branch 560, proprietary for Volta and older; when the architecture cannot be told, the branch's default.
  - The loaded nvidia kernel module's version (C(/proc/driver/nvidia/version), C(/sys/module/nvidia/version), else
    the driver version NVML reports), whether the GPUs are in use (NVML compute processes; processes holding
    C(/dev/nvidia*) open, the driver's own daemons excepted), and Secure Boot (the EFI variable or
    C(mokutil --sb-state)) with whether DKMS's signing key is enrolled (C(mokutil --test-key)) and, when given
    C(kernel), who signed the built module (C(modinfo -F signer)).
  - With C(target_version) (or C(change)), C(plan) says how the change may run - V(none), V(install) (no mismatch
    possible), V(reload) (nothing uses the GPUs, so the modules are reloaded after installing), V(reboot)
    (C(reboot_ok)) or V(blocked) with the reasons in C(plan.blockers). A new user-space driver under an old
    loaded module makes every new CUDA/NVML process fail with "Driver/library version mismatch" until a reload or
    reboot.
  - Whether the driver change moves the NVLink fabric's software with it (C(fabric)) - fabric manager, NSCQ and, where
    installed, IMEX must run at exactly the driver's version (NVIDIA Fabric Manager User Guide - fabric manager aborts
    when the loaded driver's version is not its own). Unless C(fabricmanager) says otherwise, they move when
    NVSwitches are on the PCI bus (NVIDIA functions of class C(0x0680)) or a fabric package is installed. With
    C(fabric_missing) (fabric packages the package sources lack in the driver's version) the change is V(blocked) -
    nothing would be removed or installed.
author:
  - gpufleet contributors (@gpufleet)
options:
  branch:
    description: The driver branch the change targets, e.g. C(550).
    type: int
    required: true
  open:
    description: Kernel module flavour asked for - V(true) open, V(false) proprietary; unset chooses from the GPUs.
    type: bool
  installed_version:
    description: The driver package version installed now (any branch), e.g. C(535.183.01-1); empty when none.
    type: str
    default: ""
  installed_open:
    description: Whether the installed driver is the open flavour; unset when none is installed.
    type: bool
  target_version:
    description:
      - The driver package version the change installs, e.g. C(550.90.07-1); empty when it is not known before
        installing (dnf module streams) or when only C(flavour) is wanted.
    type: str
    default: ""
  change:
    description: Whether the package step changes the driver; unset - it does when C(target_version) differs from
      C(installed_version). Without either, no C(plan) is made.
    type: bool
  fabricmanager:
    description:
      - Whether fabric manager, NSCQ and IMEX (where installed) move with the driver - V(true) or V(false) is the
        owner's choice; unset decides from the host (NVSwitches on the PCI bus, or a fabric package installed).
    type: bool
  installed_packages:
    description: Names of the installed packages (the fabric's - C(nvidia-fabricmanager-*), C(nvidia-fabric-manager),
      C(libnvidia-nscq-*), C(nvidia-imex*) - are looked at).
    type: list
    elements: str
    default: []
  fabric_missing:
    description:
      - Fabric packages the package sources lack in the driver's target version, each as C(name version), e.g.
        C(nvidia-fabricmanager-550 550.90.07). Non-empty - C(plan) is V(blocked) and names them.
    type: list
    elements: str
    default: []
  reboot_ok:
    description: A reboot may finish the change.
    type: bool
    default: false
  reload_ok:
    description: The modules may be unloaded and loaded again when nothing uses the GPUs.
    type: bool
    default: true
  dkms_key:
    description: DKMS's module signing certificate, tested against the MOK list when Secure Boot is on.
    type: path
    default: /var/lib/dkms/mok.pub
  kernel:
    description: Kernel release whose built nvidia module's signer is read (C(modinfo -k)); unset - not read.
    type: str
  root:
    description: Root of the file system C(/proc) and C(/sys) are read from (tests, mounted images); commands
      (C(mokutil), C(modinfo)) run only when it is C(/).
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
  - gpufleet.tuning.gpu_reader
seealso:
  - name: NVIDIA Driver Installation Guide, kernel modules
    description: Open and proprietary kernel modules, which GPUs need which; Secure Boot.
    link: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
"""

EXAMPLES = r"""
- name: How may the driver move from 535 to 550 here?
  gpufleet.tuning.nvidia_driver_preflight:
    branch: 550
    installed_version: 535.183.01-1
    target_version: 550.90.07-1
    reboot_ok: false
  register: preflight

- name: Say why not
  ansible.builtin.debug:
    msg: "{{ preflight.plan.message }}"
  when: preflight.plan.action == 'blocked'
"""

RETURN = r"""
gpus:
  description: The GPUs found, each C(source) (nvml or pci), C(id), C(name), C(pci_device_id), C(architecture).
  returned: always
  type: list
  elements: dict
gpu_source:
  description: Where C(gpus) came from - V(nvml), V(pci) or V(none).
  returned: always
  type: str
flavour:
  description: >-
    C(open) (bool), C(source) (user, gpus, installed, branch_default), C(reason), and C(conflict) (null, or why no
    module of that flavour drives every GPU here).
  returned: always
  type: dict
  sample: {open: false, source: branch_default, reason: "GPUs ampere support both flavours: ...", conflict: null}
loaded:
  description: >-
    The loaded nvidia module - C(version) ('' when not loaded), C(source) and C(modules) (loaded module names).
  returned: always
  type: dict
busy:
  description: Why the GPUs are in use (empty - not in use).
  returned: always
  type: list
  elements: str
processes:
  description: NVML compute processes (C(gpu), C(pid)); null when NVML could not tell.
  returned: always
  type: list
holders:
  description: Processes holding /dev/nvidia* open (C(pid), C(comm), C(path)).
  returned: always
  type: list
secure_boot:
  description: >-
    C(enabled) (true, false, null unknown), C(key_enrolled), C(signer), C(ok) (a new module would load) and C(message).
  returned: always
  type: dict
fabric:
  description: >-
    Whether the NVLink fabric's software moves with the driver - C(managed) (bool), C(source) (user, nvswitch,
    installed, none), C(reason), C(nvswitches) (count on the PCI bus; null when the bus could not be read),
    C(installed) (fabric packages installed now) and C(imex) (an IMEX package is installed).
  returned: always
  type: dict
  sample: {managed: true, source: nvswitch, reason: "4 NVSwitch(es) on the PCI bus: ...", nvswitches: 4,
           installed: [libnvidia-nscq-535, nvidia-fabricmanager-535], imex: false}
plan:
  description: >-
    C(action) (none, install, reload, reboot, blocked), C(blockers) and C(message); null without C(target_version)
    or C(change).
  returned: always
  type: dict
nvml:
  description: NVML's status as M(gpufleet.tuning.gpu_info) returns it.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvidia_driver as nd
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def main():
    argument_spec = dict(gpu.ARGUMENT_SPEC)
    argument_spec.update(
        branch=dict(type="int", required=True),
        open=dict(type="bool"),
        installed_version=dict(type="str", default=""),
        installed_open=dict(type="bool"),
        target_version=dict(type="str", default=""),
        change=dict(type="bool"),
        fabricmanager=dict(type="bool"),
        installed_packages=dict(type="list", elements="str", default=[]),
        fabric_missing=dict(type="list", elements="str", default=[]),
        reboot_ok=dict(type="bool", default=False),
        reload_ok=dict(type="bool", default=True),
        dkms_key=dict(type="path", default="/var/lib/dkms/mok.pub"),
        kernel=dict(type="str"),
        root=dict(type="path", default="/"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    p = module.params
    gpu.check_params(module)
    if p["branch"] < 1:
        module.fail_json(msg="branch: a driver branch such as 550 (got %s)" % p["branch"])
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root: not a directory: %s" % p["root"])
    fs = HostFS(p["root"])
    module.exit_json(changed=False, **nd.preflight(module, fs, gpu.read(module, fs)))


if __name__ == "__main__":
    main()
