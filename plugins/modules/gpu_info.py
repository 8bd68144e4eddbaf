#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Gather the state of a host's NVIDIA GPUs and driver stack
version_added: "0.1.0"
description:
  - Reads, through NVML (C(pynvml) from the C(nvidia-ml-py) package), the driver, NVML and CUDA driver
    versions and, for every GPU, identity, memory, utilization, persistence mode, power limits, ECC and memory
    repair counters, clocks and clock event (throttle) reasons, temperatures and thresholds, PCIe link,
    compute and MIG modes, NVLink, CPU affinity and NUMA node, and compute processes.
  - Also reads, from files under C(root), the loaded kernel module's version and flavour
    (C(/proc/driver/nvidia/version); C(modinfo nvidia) when it cannot be read), the installed user-space library
    version (C(libnvidia-ml.so.<version>)), installed CUDA toolkits and C(cuda-compat) packages, the
    nvidia-fabricmanager version and whether it runs, and the NVIDIA GPUs and NVSwitches on the PCI bus
    (C(/sys/bus/pci/devices)). These are read even when NVML cannot start.
  - A field a GPU does not support is V(null) and listed, with the NVML reason, under that GPU's C(unsupported).
    A lost GPU is reported with C(lost=true) while the other GPUs are still read.
  - A host without a usable driver is a fact, not a failure; C(nvml.available) is V(false) and C(gpus) is empty.
  - When C(pynvml) cannot be imported on the target, the module falls back to C(nvidia-smi --query-gpu)
    for the fields it offers (C(source=nvidia-smi)).
  - This module never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  backend:
    description:
      - Where to read GPU state from.
      - V(auto) uses C(pynvml) when it can be imported and C(nvidia-smi) otherwise.
    type: str
    choices: [auto, pynvml, nvidia-smi]
    default: auto
  nvml_library:
    description:
      - Path of C(libnvidia-ml.so.1) for hosts with the driver installed outside the loader's search path.
      - The path must exist; by default the dynamic loader finds the library.
    type: path
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi) for the fallback backend; by default it is searched in C(PATH).
    type: path
  root:
    description:
      - Root of the file system that C(/proc), C(/sys) and C(/usr/local) are read from.
      - Useful to inspect a mounted image; NVML always reports the running host.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the target, or C(nvidia-smi) for the fallback.
notes:
  - Power values are in watts, memory in MiB, clocks in MHz, temperatures in degrees Celsius.
  - An idle GPU lowers its PCIe link generation; compare C(pcie.gen_current) with C(pcie.gen_max) only under load.
seealso:
  - name: NVML API reference
    description: NVIDIA Management Library documentation.
    link: https://docs.nvidia.com/deploy/nvml-api/
"""

EXAMPLES = r"""
- name: Read GPU state
  gpufleet.tuning.gpu_info:
  register: gpu

- name: Show GPUs whose power limit is below the default
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} is capped at {{ item.power.limit_w }} W"
  loop: "{{ gpu.gpus | selectattr('power', 'defined') | list }}"
  when: item.power.limit_w is not none and item.power.limit_w < item.power.default_limit_w

- name: Driver installed in a non-standard place
  gpufleet.tuning.gpu_info:
    nvml_library: /opt/nvidia/lib64/libnvidia-ml.so.1
"""

RETURN = r"""
nvml:
  description: Whether NVML (or the fallback) could be used on this host.
  returned: always
  type: dict
  contains:
    available:
      description: V(true) when GPU state could be read.
      type: bool
    source:
      description: V(pynvml) or V(nvidia-smi); V(null) when nothing could be read.
      type: str
    error:
      description: Why GPU state could not be read, V(null) otherwise.
      type: str
    error_code:
      description: >-
        The NVML error that stopped it, by name (V(LibRmVersionMismatch): the loaded kernel module and the
        library differ; V(DriverNotLoaded), V(NoPermission), ...); V(null) otherwise.
      type: str
    library:
      description: The C(nvml_library) option when given.
      type: str
    binding:
      description: >-
        The Python NVML binding that read the GPUs (V(null) when pynvml was not used). A function the binding lacks
        (older bindings than the driver) makes its field V(null) with the reason C(binding lacks <function>) in the
        GPU's (or the driver's) C(unsupported) map; the fields are gathered here.
      type: dict
      contains:
        module:
          description: The file of the imported C(pynvml) module.
          type: str
        distribution:
          description: >-
            The installed distribution that owns it (V(nvidia-ml-py), V(nvidia-ml-py3), V(pynvml)); V(null) when
            no installed distribution lists the file.
          type: str
        version:
          description: That distribution's version (or the module's C(__version__)); V(null) when unknown.
          type: str
        lacks:
          description: >-
            C({field: [functions]}): every field that some GPU or the driver (C(driver.<field>)) could not read
            because the binding has no function for it; empty when the binding has all gpufleet uses.
          type: dict
  sample: {available: true, source: pynvml, error: null, library: null,
           binding: {module: /opt/gpufleet/venv/lib/python3.11/site-packages/pynvml.py, distribution: nvidia-ml-py,
                     version: 12.570.172, lacks: {}}}
driver:
  description: Versions of the NVIDIA software stack on the host.
  returned: always
  type: dict
  contains:
    version:
      description: Driver version as NVML reports it (or nvidia-smi).
      type: str
      sample: 550.90.07
    branch:
      description: Driver branch (major version).
      type: int
      sample: 550
    nvml_version:
      description: NVML library version.
      type: str
    cuda_driver_version:
      description: Highest CUDA version the driver supports, C(major.minor).
      type: str
      sample: "12.4"
    cuda_driver_version_int:
      description: The same as NVML encodes it (major*1000 + minor*10).
      type: int
      sample: 12040
    kernel_module_version:
      description: >-
        Version of the loaded C(nvidia) kernel module; when it cannot be read, the version C(modinfo) reports
        for the module file (C(kernel_module_loaded) false); V(null) when neither is known.
      type: str
    kernel_module_flavour:
      description: V(open) or V(proprietary) as C(/proc/driver/nvidia/version) says; V(null) when unknown.
      type: str
    kernel_module_loaded:
      description: Whether C(kernel_module_version) is the loaded module's.
      type: bool
    kernel_module_source:
      description: Where the kernel module version was read (a path, or V(modinfo)).
      type: str
    library_version:
      description: >-
        Installed user-space driver version, from the C(libnvidia-ml.so.<version>) file that
        C(libnvidia-ml.so.1) points at (or the dpkg package that ships it); V(null) when not found.
      type: str
      sample: 550.90.07
    library_versions:
      description: Every C(libnvidia-ml.so.<version>) found in the library directories.
      type: list
      elements: str
    library_source:
      description: Where C(library_version) was read.
      type: str
    cuda_compat:
      description: >-
        Installed CUDA forward-compatibility packages, each C(cuda) (X.Y), C(driver) (the user-mode driver it
        ships) and C(path) (C(/usr/local/cuda-X.Y/compat)).
      type: list
      elements: dict
    fabricmanager_running:
      description: Whether an nv-fabricmanager process runs.
      type: bool
    cuda_toolkits:
      description: >-
        CUDA toolkits found under C(/usr/local/cuda-*); the one C(/usr/local/cuda) points at is marked C(default).
      type: list
      elements: dict
    fabricmanager_version:
      description: Version of nvidia-fabricmanager when installed.
      type: str
    nvlsm_installed:
      description: Whether NVLSM, the NVLink subnet manager fabric manager needs on HGX B200 and later, is installed.
      type: bool
    nvlsm_running:
      description: Whether an nvlsm process runs.
      type: bool
    imex:
      description: >-
        The IMEX service of multi-node NVLink systems: C(installed), C(running), C(config_file), C(nodes_file)
        (C(IMEX_NODE_CONFIG_FILE)), C(nodes_file_present), C(nodes) (its IP addresses), C(invalid) (its other
        lines), C(bind_ip) (C(BIND_INTERFACE_IP)) and C(local_addresses) (the host's own addresses; read only where
        IMEX is installed or configured).
      type: dict
    unsupported:
      description: Driver-level fields NVML could not give, with the reason.
      type: dict
pci:
  description: >-
    NVIDIA functions on the PCI bus (C(/sys/bus/pci/devices)): C(gpus) (class 0x0300/0x0302) and C(nvswitches)
    (class 0x0680), each with C(address) (sysfs form), C(device), C(class), C(driver) and C(virtual) (an SR-IOV
    virtual function); C(nvswitch_bridges), the NVSwitch management functions of an HGX B200/B100 baseboard's
    ConnectX-7 bridge (Mellanox functions whose VPD carries SMDL=SW_MNG), each C(address), C(device), C(driver);
    C(vpd_unreadable), Mellanox functions whose VPD could not be read (not root); C(available) false when sysfs has
    no PCI directory.
  returned: always
  type: dict
  sample: {available: true, error: null, gpus: [{address: "0000:18:00.0", device: "0x2330", class: "0x030200",
           driver: nvidia, virtual: false}], nvswitches: [], nvswitch_bridges: [], vpd_unreadable: []}
uptime_s:
  description: Seconds since the host booted (C(/proc/uptime)), read with the GPUs; V(null) when unknown.
  returned: always
  type: float
  sample: 86400.5
gpu_count:
  description: Number of GPUs found.
  returned: always
  type: int
  sample: 8
gpus:
  description:
    - One entry per GPU, in NVML index order. Every key is present; a value NVML cannot give is V(null)
      and its dotted name is a key of C(unsupported).
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: NVML index., type: int}
    name: {description: Product name., type: str, sample: NVIDIA H100 80GB HBM3}
    uuid: {description: GPU UUID., type: str}
    pci_bus_id: {description: PCI bus id as NVML reports it., type: str, sample: "00000000:18:00.0"}
    pci_device_id: {description: Combined PCI device and vendor id., type: str, sample: "0x233010DE"}
    architecture: {description: "Architecture name (ampere, ada, hopper, ...).", type: str}
    memory:
      description: Frame buffer memory in MiB (C(total_mib), C(used_mib), C(free_mib)) and C(used_pct).
      type: dict
    persistence_mode: {description: Persistence mode enabled., type: bool}
    utilization:
      description: >-
        Percent of the last sample period the GPU was busy (C(gpu_pct)) and its memory was read or written
        (C(memory_pct)).
      type: dict
    power:
      description: >-
        C(usage_w), C(limit_w), C(default_limit_w), C(min_limit_w), C(max_limit_w), C(enforced_limit_w), in watts.
      type: dict
    ecc:
      description: >-
        C(current) and C(pending) ECC mode, C(volatile_uncorrected), C(aggregate_uncorrected),
        C(volatile_corrected), C(aggregate_corrected) error counts.
      type: dict
    remapped_rows:
      description: Row remapping (Ampere and later) C(corrected), C(uncorrected), C(pending), C(failure).
      type: dict
    retired_pages:
      description: Page retirement (before Ampere) C(single_bit), C(double_bit), C(pending).
      type: dict
    clocks:
      description: >-
        MHz: C(graphics), C(sm), C(mem) current; C(max_*); application C(app_graphics), C(app_mem);
        C(default_app_graphics), C(default_app_mem).
      type: dict
    clock_event_reasons:
      description: >-
        C(mask) (hex), C(active) reason names, and C(throttling), the subset that means power or thermal throttling.
      type: dict
    temperature: {description: "C(gpu) now and the C(slowdown), C(shutdown), C(gpu_max) thresholds.", type: dict}
    pcie:
      description: >-
        C(gen_current), C(width_current), C(gen_max), C(width_max); C(replay_count) (cumulative PCIe replays),
        C(replay_increase) over C(sample_seconds) between two readings (null with a single reading).
      type: dict
    compute_mode: {description: "default, exclusive_process or prohibited.", type: str}
    mig: {description: MIG mode C(current) and C(pending)., type: dict}
    nvlink:
      description: >-
        NVLink links C(up) of C(total) and the C(down) link numbers; C(remote), link number to the PCI bus id at
        the far end of that link (an NVSwitch or the peer GPU; null when NVML cannot say); C(errors) (CRC flit, CRC
        data, replay, recovery counts summed over the links; a counter NVML does not return is null with its reason in
        C(unsupported)) and C(errors_increase) over C(sample_seconds) between two readings. C(count_source):
        V(field) when the number of links is NVML's link-count field (NVML_FI_DEV_NVLINK_LINK_COUNT),
        V(probe) where that field is not supported and links were probed one by one, V(nvidia-smi) when a binding
        without NVML's NVLink calls read the states from C(nvidia-smi nvlink --status).
      type: dict
    fabric:
      description: >-
        GPU fabric probe on NVSwitch systems (nvmlDeviceGetGpuFabricInfoV) - C(state) (not_started, in_progress,
        completed), C(status) (once completed), C(health_mask), C(health_problems); null where not supported.
      type: dict
    recovery_action:
      description: >-
        The recovery NVML asks for (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), e.g. none, gpu_reset, node_reboot,
        drain_p2p, drain_and_reset; null on drivers without the field.
      type: str
    vbios_version: {description: VBIOS version., type: str, sample: "96.00.5E.00.01"}
    cpu_affinity: {description: CPUs close to the GPU in cpulist form., type: str, sample: "0-55,112-167"}
    numa_node: {description: NUMA node of the GPU., type: int}
    processes: {description: "Compute processes, C(pid) and C(used_memory_mib).", type: list}
    lost: {description: The GPU fell off the bus (NVML GpuIsLost)., type: bool}
    unsupported: {description: Dotted field name to the reason it is null., type: dict}
    source: {description: Where the values came from (pynvml or nvidia-smi)., type: str}
    sources:
      description: >-
        Only with C(source=pynvml), and only when the Python binding has no NVML function for a health fact
        (V(remapped_rows), V(mig), V(fabric), V(nvlink); nvidia-smi gives no fabric health mask): that field, read from
        nvidia-smi instead, mapped to V(nvidia-smi).
      type: dict
      returned: when a field was read from nvidia-smi
"""


from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def main():
    module = AnsibleModule(argument_spec=dict(gpu.READER_SPEC), supports_check_mode=True)
    gpu.check_reader_params(module)
    facts = gpu.read(module, HostFS(module.params["root"]))
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
