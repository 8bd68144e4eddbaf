#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Where each NVIDIA GPU sits - PCIe path, NUMA node, CPUs, nearest NICs, NVLink peers - and bindings
version_added: "0.2.0"
description:
  - Reads, from sysfs under C(root), each GPU's PCIe path from its root port, NUMA node, local CPUs (physical cores
    and their SMT siblings), the NICs and InfiniBand HCAs (C(/sys/class/net), C(/sys/class/infiniband)) and, through
    NVML as M(gpufleet.tuning.gpu_info) does, the GPUs' NVLink state. C(nvidia-smi) is not needed.
  - Returns a matrix in the categories of C(nvidia-smi topo -m) (X, NV#, PIX, PXB, PHB, NODE, SYS) and ready
    bindings - Slurm C(gres.conf) lines, a C(numactl) and a C(taskset) line per GPU, and per GPU the NICs nearest
    first (for C(NCCL_IB_HCA) or a rank-to-NIC map).
  - On a virtual machine whose PCIe tree is flattened (Azure ND, Hyper-V VMBus, a virtual root complex) C(flat) is
    V(true), C(flat_reason) says why, and the categories are from the NUMA nodes alone (NODE, SYS).
  - Without a usable NVML the GPUs come from the PCI bus (no NVLink then). A host without GPUs returns empty lists.
  - This module never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  root:
    description:
      - Root of the file system that C(/sys) and C(/proc) are read from (a fixture tree or a mounted image).
      - NVML always reports the running host.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
  - gpufleet.tuning.gpu_reader
requirements:
  - nvidia-ml-py (C(pynvml)) on the target for NVLink peers; without it the PCI tree is still read.
notes:
  - C(Cores=) in the gres lines are Slurm's logical core indexes (core 0 is the first core of the first socket,
    C(lstopo -l)'s Core L#), as gres.conf(5) asks, not CPU ids; C(Links=) has one number per GPU in C(File) order,
    -1 for the GPU itself, and is written only where NVLink exists.
  - C(Type=) in the gres lines is the GPU's model from the name NVML (or, without NVML, the driver's
    C(/proc/driver/nvidia/gpus/*/information)) gives, lower case, without the maker and product line words
    (NVIDIA, Tesla, GeForce, Quadro) and without what follows from the memory size or form factor on (C(80GB),
    C(SXM4), C(PCIe), C(HBM3)), words joined with C(_) - V(NVIDIA H100 80GB HBM3) is V(h100), V(NVIDIA RTX 6000
    Ada Generation) V(rtx_6000_ada); a table of PCI device ids only when no name is known.
  - A device whose C(numa_node) is -1 (the firmware gives no proximity) is placed on the host's only NUMA node
    when there is exactly one, as C(nvidia-smi topo -m) shows it; with several it stays V(null).
  - NVLink peers on NVSwitch systems (NVSwitches on the PCI bus, or a GPU fabric state) are every other GPU with
    links up, over all of its links, as C(nvidia-smi topo -m) shows them (NV18 between two H100 SXM5). Direct
    GPU-to-GPU links without NVSwitch are not paired yet (C(peers) empty).
seealso:
  - module: gpufleet.tuning.gpu_info
  - name: gres.conf(5)
    description: Slurm's generic resource configuration (Cores, Links, File).
    link: https://slurm.schedmd.com/gres.conf.html
"""

EXAMPLES = r"""
- name: Read where the GPUs sit
  gpufleet.tuning.gpu_topology:
  register: topo

- name: Show the gres.conf lines of this host
  ansible.builtin.debug:
    msg: "{{ topo.topology.gres }}"

# The lines are the host's own account of itself: gpufleet topology --gres
# (/etc/slurm/gres.conf.d/gpufleet.conf) puts NodeName= from the inventory and
# takes from a host only Type, File, Cores, Links and Flags of the shapes this
# module writes. Keep such a check wherever the lines are copied by hand.
- name: Keep each host's lines for a review on the controller (nothing changes on the host)
  ansible.builtin.copy:
    content: |
      {% for line in topo.topology.gres if line is match('^Name=gpu( (Type|File|Cores|Links|Flags)=[^\s#=]+)+$') %}
      {{ line }}
      {% endfor %}
    dest: "{{ playbook_dir }}/reports/gres/{{ inventory_hostname }}.conf"
    mode: "0644"
  delegate_to: localhost
"""

RETURN = r"""
nvml:
  description: Whether NVML (or the nvidia-smi fallback) was usable, as M(gpufleet.tuning.gpu_info) returns it.
  returned: always
  type: dict
  sample: {available: true, source: pynvml, error: null, error_code: null, library: null}
topology:
  description: Where each GPU sits.
  returned: always
  type: dict
  contains:
    available:
      description: V(false) when sysfs has no PCI device directory (nothing else then means anything).
      type: bool
    error:
      description: Why the topology could not be read, V(null) otherwise.
      type: str
    flat:
      description: The PCIe tree is flattened (a VM); categories are from the NUMA nodes alone.
      type: bool
    flat_reason:
      description: Why C(flat) is V(true); V(null) otherwise.
      type: str
    numa_nodes:
      description: NUMA node number (a string) to C(cpus), its CPU list.
      type: dict
      sample: {"0": {cpus: "0-55,112-167"}, "1": {cpus: "56-111,168-223"}}
    gpus:
      description: >-
        One entry per GPU in NVML index order - C(index), C(bus_id), C(name), C(numa_node), C(local_cpus),
        C(cores) (the first thread of each local core), C(siblings) (their SMT siblings), C(path) (PCI functions
        from the root port down to the GPU), C(nvlink) (C(links) up, C(peers) GPU index to link count,
        C(via_nvswitch)).
      type: list
      elements: dict
    nics:
      description: >-
        NICs and HCAs on PCI - C(name) (interface, else RDMA device), C(device) (RDMA device or V(null)),
        C(kind) (V(infiniband) or V(ethernet)), C(bus_id), C(numa_node), C(speed_mbps), C(path).
      type: list
      elements: dict
    matrix:
      description: >-
        Row name to column name to category, GPUs (GPU0...) then NICs (by RDMA device name when they have one):
        X self, NV# NVLinks, PIX at most one PCIe bridge, PXB several bridges, PHB through a host bridge, NODE
        across host bridges in a NUMA node, SYS across NUMA nodes.
      type: dict
      sample: {GPU0: {GPU0: X, GPU1: NV18, mlx5_0: PXB}}
    bindings:
      description: >-
        Per GPU - C(gpu), C(cpus), C(numactl) and C(taskset) command prefixes, C(nics) nearest first (equally near
        ones spread over the GPUs of a node) and C(nic), the first.
      type: list
      elements: dict
      sample: [{gpu: 0, cpus: "0-55,112-167", numactl: "numactl --cpunodebind=0 --membind=0",
                taskset: "taskset -c 0-55,112-167", nics: [mlx5_0, mlx5_1], nic: mlx5_0}]
    gres:
      description: Slurm gres.conf lines, one per GPU.
      type: list
      elements: str
      sample: ["Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55 Links=-1,18,18,18,18,18,18,18"]
"""


from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu, topology
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def main():
    module = AnsibleModule(argument_spec=dict(gpu.READER_SPEC), supports_check_mode=True)
    gpu.check_reader_params(module)
    fs = HostFS(module.params["root"])
    # One read of the GPUs, no error-counter sampling: only identity, NVLink and NUMA are used here.
    facts = gpu.read(module, fs, sample_seconds=0)
    gpus = facts["gpus"] if facts["nvml"]["available"] else []
    module.exit_json(changed=False, nvml=facts["nvml"], topology=topology.collect(fs, gpus, run=module.run_command))


if __name__ == "__main__":
    main()
