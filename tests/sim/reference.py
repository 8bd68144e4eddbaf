#!/usr/bin/env python3
"""Simulated reference GPU servers as people rent and run them (issue 13 §4).

Five hosts, each built from its vendor's documented shape and carrying the values the vendor's own image ships, not
values tuned to pass an audit:

  aws-p5            AWS p5.48xlarge, Deep Learning AMI (Ubuntu 22.04): 8 x H100, ENA (MTU 9001) + 32 EFA devices
  gcp-a3-high       Google Cloud a3-highgpu-8g, Ubuntu 22.04: 8 x H100, gVNIC primary NIC at the VPC's 1460 MTU and
                    four GPUDirect-TCPX gVNICs
  azure-nd-h100-v5  Azure Standard_ND96isr_H100_v5, Ubuntu-HPC 22.04: 8 x H100, hv_netvsc + mlx5 VF (accelerated
                    networking), 8 x 400 Gb/s InfiniBand
  dgx-h100          HGX H100 bare metal (DGX H100-like), DGX OS 6 (Ubuntu 22.04): 2 x Xeon 8480C, NVSwitch, fabric
                    manager, ConnectX-7
  pcie-l40s         PCIe server with 4 x L40S (no NVLink, no NVSwitch, no fabric manager), stock Ubuntu 22.04 server

Every value and where it comes from is listed in SOURCES below and in tests/sim/reference/README.md;
tests/integration/test_reference_hosts.py audits the hosts through the real playbook and asserts (a) no failing
finding at medium or above on a healthy host, (b) the right rule for each injected seed mis-tuning (MISTUNINGS).

Every host is a directory ``<out>/<host>/`` laid out as tests/sim/demo.py lays out the demo fleet: ``nvml.state``
(tests/sim/nvml), ``root/`` (tests/sim/host/mkroot.py + netroot.py, plus the files this builder adds: NVIDIA PCI
functions and NVSwitches in /sys/bus/pci, the driver's /proc and library files, fabric manager and persistence
daemon processes, dpkg status, the image's limits files) and ``ethtool/`` (links to the recorded outputs in
tests/fixtures/ethtool, so that recordings added there reach these hosts too).

Library use::

    built = build(tmp / "ref")                           # {host: dir}, the five healthy hosts
    built = build(tmp / "ref", variants=True)            # plus "<host>--m<N>" for each seed mis-tuning N
    inventory(tmp / "hosts.yml", built, sim_dir)         # inventory for playbooks/audit.yml

Command line: ``reference.py [--out DIR] [--variants]``.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ETHTOOL_FIXTURES = REPO / "tests" / "fixtures" / "ethtool"


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Same module names as tests/sim/demo.py: one copy of each tool per process.
profiles = _load("gpufleet_sim_profiles", REPO / "tests/sim/nvml/profiles.py")
mkroot = _load("gpufleet_sim_mkroot", REPO / "tests/sim/host/mkroot.py")
netroot = _load("gpufleet_sim_netroot", REPO / "tests/sim/host/netroot.py")

GIB_MIB = 1024

# --------------------------------------------------------------------------------------------------- sources

AWS_P5 = "https://aws.amazon.com/ec2/instance-types/p5/"
AWS_EFA_P5 = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"
AWS_MTU = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/network_mtu.html"
AWS_DLAMI = (
    "https://docs.amazonaws.cn/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2204-2025-11-10.html "
    "(the Ubuntu 22.04 OSS-driver DLAMI of 2025-10-31; its x86_64 twin for P5 ships the same stack: assumed)"
)
AWS_EFA_LIMITS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html"
GCP_A3 = "https://cloud.google.com/compute/docs/accelerator-optimized-machines"
GCP_MTU = "https://cloud.google.com/vpc/docs/mtu"
GCP_TCPX = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth"
AZURE_ND = "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series"
AZURE_NHC = "https://github.com/Azure/azurehpc-health-checks/blob/main/conf/nd96isr_h100_v5.conf"
AZURE_TOPO = "https://github.com/Azure/azhpc-images/blob/main/topology/ndv5-topo.xml"
AZURE_TUNING = (
    "https://github.com/Azure/azhpc-images/blob/main/components (hpc-tuning.sh, configure_nvidia_persistence.sh)"
)
AZURE_VERSIONS = (
    "https://github.com/Azure/azhpc-images/blob/main/versions.json (nvidia.ubuntu22.04, cuda), "
    "components/install_nvidiagpudriver.sh (A100, H100, H200 use open kernel modules)"
)
AZURE_ACCELNET = "https://learn.microsoft.com/en-us/azure/virtual-network/accelerated-networking-how-it-works"
NV_HGX_RA = "https://docs.nvidia.com/reference-architectures/hgx-ai-factory-h100-h200-b200/components.md"
NV_DRIVER_GUIDE = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html"
DGX_OS = (
    "https://docs.nvda.net.cn/dgx/dgx-os-7-user-guide/appendix_c_dgx_software_stack.html (mirror of the DGX OS 7 "
    "user guide, appendix C: nvidia-system-core packages; DGX OS 6 ships the same meta-package: assumed)"
)
NV_FM = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
MLPERF_DGX = (
    "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/"
    "H200-SXM-141GBx8_TRT_MaxQ.json (2 x Xeon Platinum 8480C, 2 TB, Ubuntu 22.04.4 on the HGX board)"
)
KERNEL_NUMA_BALANCING = (
    "kernel/sched/fair.c check_numabalancing_enable(): on with more than one node when "
    "CONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y (Ubuntu's, like Fedora's and RHEL's, kernel configs)"
)
UBUNTU_DEFAULTS = (
    "Ubuntu 22.04: vm.swappiness 60 (kernel default), THP enabled=madvise defrag=madvise, tcp cubic with the kernel's "
    "buffer defaults, net.core.default_qdisc fq_codel (systemd 50-default.conf), irqbalance running"
)
SLURM_MEMLOCK = (
    "https://slurm.schedmd.com/faq.html#memlock (jobs inherit slurmd's locked-memory limit) and Slurm's "
    "etc/slurmd.service.in (LimitMEMLOCK=infinity)"
)
ETHTOOL_README = "tests/fixtures/ethtool/<driver>/README.md (each recording's source)"

# --------------------------------------------------------------------------------------------------- the hosts

# A training job: the allocator holds nearly all GPU memory (normal without host swapping).
TRAINING_JOB_PCT = 97.0


def hgx_h100(driver: str, bus_ids: list[str]) -> dict[str, Any]:
    """The "gpu" entry of an 8-GPU HGX H100 board as the clouds and DGX ship it: four GPUs on each socket's NUMA
    node (bus_ids in NVML order), the open kernel modules."""
    return {
        "profile": "h100",
        "count": 8,
        "driver": driver,
        "bus_ids": bus_ids,
        "nodes": [0, 0, 0, 0, 1, 1, 1, 1],
        "flavour": "open",
    }


# Ubuntu 22.04 as its images ship it (UBUNTU_DEFAULTS, KERNEL_NUMA_BALANCING): the kernel's swappiness, THP madvise,
# automatic NUMA balancing on (2 nodes), no memlock line in limits.d, so processes get the kernel's 8 MiB. A host
# entry lists what its image changes after these.
UBUNTU_2204: dict[str, Any] = {
    "swappiness": 60,
    "thp_enabled": "madvise",
    "thp_defrag": "madvise",
    "numa_balancing": 1,
    "memlock_kb": None,
    "process_memlock_kb": 8192,
    "os": "ubuntu22.04",
}


# Each entry: gpu (profile, count, driver, NVML bus ids, NUMA node of each GPU, PCI device id, kernel module flavour),
# host (mkroot overrides), nics (netroot NIC specs + "ethtool": recording under tests/fixtures/ethtool, "master":
# the synthetic NIC a VF is enslaved to), infiniband (netroot ports), nvswitches (PCI addresses), fabricmanager,
# files (extra files of the image), toolkits (CUDA, default last), sources (value -> where it comes from).
HOSTS: dict[str, dict[str, Any]] = {
    "aws-p5": {
        "title": "AWS p5.48xlarge, AWS Deep Learning Base OSS Nvidia Driver AMI (Ubuntu 22.04)",
        "gpu_memory_job_pct": TRAINING_JOB_PCT,
        "gpu": hgx_h100(
            "580.95.05",
            [
                "00000000:53:00.0",
                "00000000:64:00.0",
                "00000000:75:00.0",
                "00000000:86:00.0",
                "00000000:97:00.0",
                "00000000:A8:00.0",
                "00000000:B9:00.0",
                "00000000:CA:00.0",
            ],
        ),
        "host": {
            "hostname": "ip-10-0-12-34",
            "sockets": 2,
            "cores_per_socket": 48,
            "threads_per_core": 2,
            "cpu_model": "AMD EPYC 7R13 Processor",
            "cpu_mhz": 2650.0,
            "cpufreq": False,
            "mem_total_mib": 2048 * GIB_MIB,
            "mem_available_mib": 1900 * GIB_MIB,
            "swap_total_mib": 0,
            **UBUNTU_2204,
            # Docker and the NVIDIA container toolkit come with the DLAMI; upstream units set no LimitMEMLOCK, so the
            # daemons run with the kernel's default (8 MiB since Linux 5.16).
            "job_services": [mkroot.job_service("containerd.service"), mkroot.job_service("docker.service")],
            "kernel_release": "6.8.0-1040-aws",
            "kernel_version": "#16~22.04.1-Ubuntu SMP Mon Aug 19 19:38:17 UTC 2024",
        },
        "files": {
            # The EFA installer (part of the DLAMI) lets every user pin memory for RDMA.
            "etc/security/limits.d/01_efa.conf": (
                "* soft memlock unlimited\n* hard memlock unlimited\n* soft nofile 8192\n* hard nofile 8192\n"
            ),
        },
        "nics": [
            {
                "name": "ens5",
                "driver": "ena",
                "mtu": 9001,
                "speed": -1,
                "numa_node": 0,
                "bus_info": "0000:7e:00.0",
                "ethtool": "ena/ens5",
            },
        ],
        # 32 EFA devices of 100 Gb/s (3200 Gbps per instance): RDMA devices with no netdev of their own.
        "infiniband": [
            {"device": f"rdmap{bus}s0", "rate_gbps": 100, "link_layer": "Unspecified"}
            for bus in [*range(79, 95), *range(177, 193)]
        ],
        "nvswitches": ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"],
        "fabricmanager": True,
        "toolkits": ["12.6.3", "12.8.1", "13.0.2", "12.9.1"],
        "sources": {
            "8 x H100 SXM 80 GB, 192 vCPUs (2 x 48-core AMD EPYC 7R13, SMT), 2 TiB": AWS_P5,
            "ENA primary interface ens5, MTU 9001 inside the VPC": AWS_MTU,
            "32 EFA devices, 3200 Gbps; ENA on network card 0": AWS_EFA_P5,
            "memlock unlimited for every user (EFA installer's limits.d file)": AWS_EFA_LIMITS,
            "ENA ring sizes, offloads, driver": ETHTOOL_README + " (ena/ens5)",
            "driver 580.95.05 (open modules), CUDA 12.6-13.0 (default 12.9), kernel 6.8.0-1040-aws, docker": AWS_DLAMI,
            "fabric manager at the driver's version (NVSwitch)": NV_FM,
            "no cpufreq in the guest, no swap, swappiness 60, THP madvise, cubic": UBUNTU_DEFAULTS,
            "kernel.numa_balancing 1 (2 NUMA nodes)": KERNEL_NUMA_BALANCING,
        },
    },
    "gcp-a3-high": {
        "title": "Google Cloud a3-highgpu-8g, Ubuntu 22.04 accelerator image",
        "gpu_memory_job_pct": TRAINING_JOB_PCT,
        "gpu": hgx_h100(
            "580.95.05",
            [
                "00000000:04:00.0",
                "00000000:05:00.0",
                "00000000:0A:00.0",
                "00000000:0B:00.0",
                "00000000:84:00.0",
                "00000000:85:00.0",
                "00000000:8A:00.0",
                "00000000:8B:00.0",
            ],
        ),
        "host": {
            "hostname": "a3-high-0",
            "sockets": 2,
            "cores_per_socket": 52,
            "threads_per_core": 2,
            "cpu_model": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
            "cpu_mhz": 2699.998,
            "cpufreq": False,
            "mem_total_mib": 1872 * GIB_MIB,
            "mem_available_mib": 1780 * GIB_MIB,
            "swap_total_mib": 0,
            **UBUNTU_2204,
            "kernel_release": "6.8.0-1015-gcp",
            "kernel_version": "#17~22.04.1-Ubuntu SMP Tue Sep 10 17:27:37 UTC 2024",
        },
        "files": {},
        "nics": [
            # Primary gVNIC at the VPC's default MTU; four GPU NICs (GPUDirect-TCPX), two per NUMA node, each in a VPC
            # created with MTU 8244. gve has no ethtool recording in tests/fixtures (ethtool facts are then
            # reported unsupported for these NICs).
            {
                "name": "enp0s12",
                "driver": "gve",
                "mtu": 1460,
                "speed": 200000,
                "numa_node": 0,
                "bus_info": "0000:00:0c.0",
            },
            {
                "name": "enp6s0",
                "driver": "gve",
                "mtu": 8244,
                "speed": 200000,
                "numa_node": 0,
                "bus_info": "0000:06:00.0",
            },
            {
                "name": "enp12s0",
                "driver": "gve",
                "mtu": 8244,
                "speed": 200000,
                "numa_node": 0,
                "bus_info": "0000:0c:00.0",
            },
            {
                "name": "enp134s0",
                "driver": "gve",
                "mtu": 8244,
                "speed": 200000,
                "numa_node": 1,
                "bus_info": "0000:86:00.0",
            },
            {
                "name": "enp140s0",
                "driver": "gve",
                "mtu": 8244,
                "speed": 200000,
                "numa_node": 1,
                "bus_info": "0000:8c:00.0",
            },
        ],
        "infiniband": [],
        "nvswitches": ["0000:0e:00.0", "0000:0f:00.0", "0000:10:00.0", "0000:11:00.0"],
        "fabricmanager": True,
        "toolkits": ["12.8.1", "13.0.2"],
        "sources": {
            "8 x H100 80 GB, 208 vCPUs, 1872 GB (A3 High)": GCP_A3,
            "primary NIC MTU 1460 (VPC default; set each NIC to its VPC's MTU)": GCP_MTU,
            "A3 High: 1,000 Gbps, GPUDirect-TCPX: 4 GPU NICs + the primary, 200 Gbps each (gVNIC)": GCP_TCPX,
            "GPU NICs' VPCs created with MTU 8244 (GPUDirect-TCPX setup guide)": "unverified",
            "no cpufreq in the guest, no swap, swappiness 60, THP madvise, cubic": UBUNTU_DEFAULTS,
            "kernel.numa_balancing 1 (2 NUMA nodes)": KERNEL_NUMA_BALANCING,
            "no memlock line in limits.d (stock Ubuntu)": UBUNTU_DEFAULTS,
            "driver 580 with the open modules (the default since 560), CUDA 12.8 and 13.0": NV_DRIVER_GUIDE,
            "NIC names, PCI addresses, kernel build, driver and CUDA patch levels": "illustrative",
        },
    },
    "azure-nd-h100-v5": {
        "title": "Azure Standard_ND96isr_H100_v5, Ubuntu-HPC 22.04 (azhpc-images)",
        "gpu_memory_job_pct": TRAINING_JOB_PCT,
        "gpu": hgx_h100(
            "580.126.16",
            [
                "00000001:00:00.0",
                "00000002:00:00.0",
                "00000003:00:00.0",
                "00000008:00:00.0",
                "00000009:00:00.0",
                "0000000A:00:00.0",
                "0000000B:00:00.0",
                "0000000C:00:00.0",
            ],
        ),
        "host": {
            "hostname": "ndv5-vmss000000",
            "sockets": 2,
            "cores_per_socket": 48,
            "threads_per_core": 1,
            "cpu_model": "Intel(R) Xeon(R) Platinum 8480C",
            "cpu_mhz": 1999.999,
            "cpufreq": False,
            "mem_total_mib": 1915071,
            "mem_available_mib": 1850000,
            "swap_total_mib": 0,
            **UBUNTU_2204,
            "zone_reclaim_mode": 1,
            # azhpc-images installs moby (docker) and enables it; no LimitMEMLOCK in its units, so the daemons run
            # with the 5.15 kernel's default of 64 KiB.
            "job_services": [
                mkroot.job_service("containerd.service", process_memlock_kb=64),
                mkroot.job_service("docker.service", process_memlock_kb=64),
            ],
            "kernel_release": "5.15.0-1073-azure",
            "kernel_version": "#82-Ubuntu SMP Mon Sep 16 17:03:34 UTC 2024",
        },
        "files": {
            # azhpc-images hpc-tuning.sh appends these to limits.conf (written in full below).
            "etc/security/limits.conf": (
                "# /etc/security/limits.conf\n#\n#<domain>      <type>  <item>         <value>\n#\n\n# End of file\n"
                "*               hard    memlock         unlimited\n*               soft    memlock         unlimited\n"
                "*               hard    nofile          65535\n*               soft    nofile          65535\n"
                "*               hard    stack           unlimited\n*               soft    stack           unlimited\n"
            ),
        },
        "nics": [
            # Accelerated networking: the synthetic hv_netvsc NIC carries the IP; the mlx5 VF is its slave and is not
            # configured directly. IPoIB ib0-ib7 on the eight ConnectX-7 HCAs (NUMA as in the NDv5 topology file).
            {
                "name": "eth0",
                "driver": "hv_netvsc",
                "mtu": 1500,
                "speed": 80000,
                "numa_node": None,
                "bus_info": "000d3a6b-6e9c-000d-3a6b-6e9c000d3a6b",
            },
            {
                "name": "enP30832s1",
                "driver": "mlx5_core",
                "mtu": 1500,
                "speed": 80000,
                "numa_node": 0,
                "bus_info": "7870:00:02.0",
                "ethtool": "mlx5_core/eth0",
                "master": "eth0",
            },
            *[
                {
                    "name": f"ib{i}",
                    "driver": "mlx5_core",
                    "mtu": 4092,
                    "speed": 400000,
                    "numa_node": i // 4,
                    "bus_info": f"{0x101 + i:04x}:00:00.0",
                }
                for i in range(8)
            ],
        ],
        "infiniband": [{"device": f"mlx5_ib{i}", "rate_gbps": 400} for i in range(8)],
        "nvswitches": ["0005:00:00.0", "0006:00:00.0", "0007:00:00.0", "0004:00:00.0"],
        "fabricmanager": True,
        "toolkits": ["13.0.2"],
        "sources": {
            "8 x H100, 96 vCPUs (no SMT), 1900 GiB, 8 x 400 Gb/s InfiniBand": AZURE_ND,
            "2 sockets, 96 cores, 96 threads, 1915071 MB, no swap, mlx5_ib0-7 at 400, eth0, ib0-ib7": AZURE_NHC,
            "GPU and HCA PCI addresses and NUMA nodes (0001-0008 node 0, 0009-000c node 1)": AZURE_TOPO,
            "memlock unlimited (limits.conf), zone_reclaim_mode 1, nvidia-persistenced, fabric manager": AZURE_TUNING,
            "driver 580.126.16 with the open modules (H100), CUDA 13.0": AZURE_VERSIONS,
            "hv_netvsc synthetic NIC with an mlx5 VF (accelerated networking)": AZURE_ACCELNET,
            "mlx5 VF rings, offloads": ETHTOOL_README + " (mlx5_core/eth0)",
            "kernel.numa_balancing 1 (azhpc-images turns it off only for GB200 and AMD)": KERNEL_NUMA_BALANCING,
            "IPoIB MTU 4092 (datagram mode on a 4K IB MTU), NIC names, kernel build": "illustrative",
        },
    },
    "dgx-h100": {
        "title": "HGX H100 bare metal (DGX H100-like), DGX OS 6 (Ubuntu 22.04)",
        "gpu_memory_job_pct": TRAINING_JOB_PCT,
        "gpu": hgx_h100(
            "570",
            [
                "00000000:1B:00.0",
                "00000000:43:00.0",
                "00000000:52:00.0",
                "00000000:61:00.0",
                "00000000:9D:00.0",
                "00000000:C3:00.0",
                "00000000:D1:00.0",
                "00000000:DF:00.0",
            ],
        ),
        "host": {
            "hostname": "dgx-h100-01",
            "sockets": 2,
            "cores_per_socket": 56,
            "threads_per_core": 2,
            "cpu_model": "Intel(R) Xeon(R) Platinum 8480C",
            "cpufreq": True,
            "scaling_driver": "intel_pstate",
            # DGX OS's nvidia-system-core: nv-cpu-governor sets the performance governor,
            # nvidia-disable-numa-balancing turns automatic NUMA balancing off.
            "governor": "performance",
            "mem_total_mib": 2048 * GIB_MIB,
            "mem_available_mib": 1950000,
            "swap_total_mib": 0,
            **UBUNTU_2204,
            "numa_balancing": 0,  # DGX OS: nvidia-disable-numa-balancing
            # An HGX node in a cluster runs its jobs under the scheduler: slurmd from Slurm's own unit, which sets
            # LimitMEMLOCK=infinity (etc/slurmd.service.in), so jobs inherit an unlimited memlock limit.
            "job_services": [mkroot.job_service("slurmd.service", "infinity")],
            "kernel_release": "5.15.0-1042-nvidia",
            "kernel_version": "#42-Ubuntu SMP Wed Nov 15 20:28:30 UTC 2023",
        },
        "files": {},
        "nics": [
            # The two dual-port ConnectX-7 cards (storage / in-band), one per socket; the eight compute ConnectX-7
            # ports are InfiniBand (no IP configured: their IPoIB netdevs are down and not listed).
            {
                "name": "enp41s0f0np0",
                "driver": "mlx5_core",
                "mtu": 1500,
                "speed": 200000,
                "numa_node": 0,
                "bus_info": "0000:29:00.0",
                "ethtool": "mlx5_core/ens1f0np0",
            },
            {
                "name": "enp170s0f0np0",
                "driver": "mlx5_core",
                "mtu": 1500,
                "speed": 200000,
                "numa_node": 1,
                "bus_info": "0000:aa:00.0",
                "ethtool": "mlx5_core/ens1f0np0",
            },
        ],
        # The eight compute ConnectX-7s' NDR ports, and RoCE on the storage card: its two ports bonded (mlx5 RoCE
        # LAG: one RDMA device, mlx5_bond_0, over bond0).
        "infiniband": [{"device": f"mlx5_{i}", "rate_gbps": 400} for i in range(8)]
        + [{"device": "mlx5_bond_0", "rate_gbps": 400, "link_layer": "Ethernet", "netdevs": ["bond0"]}],
        "nvswitches": ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"],
        "fabricmanager": True,
        "toolkits": ["12.8.1"],
        "sources": {
            "8 x H100 SXM, 4 NVSwitch, 2 x Xeon Platinum 8480C (112 cores, 224 threads), 2 TB": NV_HGX_RA,
            "2 x 8480C, 2 TB, Ubuntu 22.04.4 on an HGX board": MLPERF_DGX,
            "fabric manager required on NVSwitch systems, version = driver": NV_FM,
            "ConnectX-7 rings, offloads": ETHTOOL_README + " (mlx5_core/ens1f0np0)",
            "performance governor (nv-cpu-governor), NUMA balancing off, nv-limits raises file limits only": DGX_OS,
            "swappiness 60, THP madvise, no memlock line for users (none in DGX OS's list)": UBUNTU_DEFAULTS,
            "slurmd with LimitMEMLOCK=infinity (Slurm's slurmd.service; jobs inherit slurmd's limit)": SLURM_MEMLOCK,
            "driver 570 (open modules), kernel 5.15.0-1042-nvidia, NIC names, PCI addresses": "illustrative (DGX OS 6)",
            "RoCE LAG of the storage card's two ports (mlx5_bond_0 over bond0, 2 x 200 GbE)": "illustrative",
        },
    },
    "pcie-l40s": {
        "title": "PCIe server with 4 x L40S, stock Ubuntu 22.04 server",
        # An inference server: vLLM takes 90 % of GPU memory by default (gpu_memory_utilization 0.9).
        "gpu_memory_job_pct": 90.0,
        "gpu": {
            "profile": "l40s",
            "count": 4,
            "driver": "580.95.05",
            "bus_ids": ["00000000:17:00.0", "00000000:3D:00.0", "00000000:99:00.0", "00000000:BD:00.0"],
            "nodes": [0, 0, 1, 1],
            "flavour": "proprietary",
        },
        "host": {
            "hostname": "l40s-node-01",
            "sockets": 2,
            "cores_per_socket": 32,
            "threads_per_core": 2,
            "cpu_model": "Intel(R) Xeon(R) Gold 6448Y",
            "cpufreq": True,
            "scaling_driver": "intel_pstate",
            "governor": "powersave",
            "mem_total_mib": 512 * GIB_MIB,
            "mem_available_mib": 480 * GIB_MIB,
            # The Ubuntu server installer creates /swap.img (curtin: at most 8 GiB).
            "swap_total_mib": 8192,
            "swap_used_mib": 0,
            **UBUNTU_2204,
            "kernel_release": "5.15.0-125-generic",
            "kernel_version": "#135-Ubuntu SMP Fri Sep 27 13:53:58 UTC 2024",
        },
        "files": {},
        "nics": [
            {
                "name": "ens1f0",
                "driver": "ice",
                "mtu": 1500,
                "speed": 100000,
                "numa_node": 0,
                "bus_info": "0000:e1:00.0",
                "ethtool": "ice/eth0",
            },
        ],
        "infiniband": [],
        "nvswitches": [],
        "fabricmanager": False,
        "toolkits": ["12.8.1", "13.0.2"],
        "sources": {
            "L40S: 48 GB GDDR6, 350 W, PCIe Gen4 x16, no NVLink, no MIG": "tests/sim/nvml/profiles.py (l40s)",
            "no NVSwitch, so no fabric manager": NV_FM,
            "intel_pstate powersave (ondemand.service), 8 GiB /swap.img, swappiness 60, THP madvise": UBUNTU_DEFAULTS,
            "kernel.numa_balancing 1 (2 NUMA nodes)": KERNEL_NUMA_BALANCING,
            "Intel E810 rings, offloads": ETHTOOL_README + " (ice/eth0)",
            "CPU model, memory size, NIC, PCI addresses, driver 580 from Ubuntu's archive": "illustrative",
        },
    },
}

# --------------------------------------------------------------------------------------------------- mis-tunings

# The five seed mis-tunings of the project (README "what it finds"), each injected into every reference host, and the
# rule ids that must fire (fail or warn) on the injected host and not on the healthy one.
MISTUNINGS: dict[int, dict[str, Any]] = {
    1: {"title": "GPU memory at the brim while the host swaps", "expect": ["GPU-MEM-001", "HOST-MEM-001"]},
    2: {"title": "GPUs' CPU affinity on the other socket (NUMA placement)", "expect": ["GPU-NUMA-001"]},
    3: {
        "title": "long links declared, TCP left at defaults (buffers, cubic)",
        "expect": ["NET-TCP-001", "NET-TCP-002"],
    },
    4: {
        "title": "power limit capped, persistence off, thermal slowdown",
        "expect": ["GPU-PWR-001", "GPU-PWR-002", "GPU-PWR-003"],
    },
    5: {"title": "driver upgraded without a reboot: kernel module and library differ", "expect": ["SW-KMOD-001"]},
}

# A fabric fault injected (with ``variants``) into the HGX H100 node as "<host>--rdma": its third InfiniBand port
# Disabled (DOWN), its sixth trained at 2X (half its rate); NET-RDMA-001 and NET-RDMA-002 must name each.
FABRIC_FAULT_HOSTS = ("dgx-h100",)


def _fabric_fault(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    ib = [p for p in spec["infiniband"] if p.get("link_layer", "InfiniBand") == "InfiniBand"]
    ib[2].update(state="DOWN", phys_state="Disabled")
    ib[5].update(rate_gbps=ib[5].get("rate_gbps", 400) // 2, width="2X")
    return spec


# Long links the owner of a mis-tuned host (3) declares: a site pair 160 ms apart at 1 Gbit/s.
LINK_POLICY = {"site": "ref", "sites": {"ref": {"links": {"remote": {"rtt_ms": 160, "bandwidth_gbps": 1}}}}}


def _mistune(spec: dict[str, Any], number: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec, host policy) of ``spec`` with seed mis-tuning ``number`` injected."""
    spec = copy.deepcopy(spec)
    policy: dict[str, Any] = {}
    if number == 1:
        spec["gpu_memory_pct"] = 98.0
        spec["host"].update(
            swap_total_mib=max(spec["host"].get("swap_total_mib", 0), 16384),
            swap_used_mib=12288,
            pswpin=48213771,
            pswpout=73102245,
            psi_memory_some_avg10=38.5,
            psi_memory_full_avg10=21.0,
        )
    elif number == 2:
        spec["gpu"]["nodes_affinity"] = [1 - n for n in spec["gpu"]["nodes"]]
    elif number == 3:
        policy = copy.deepcopy(LINK_POLICY)
    elif number == 4:
        capped = int(profiles.PROFILES[spec["gpu"]["profile"]]["power_default_limit_mw"]) // 2
        spec["gpu_overrides"] = [
            "gpu.*.persistence_mode=0",
            f"gpu.*.power_limit_mw={capped}",
            f"gpu.*.enforced_power_limit_mw={capped}",
            "gpu.*.clocks_event_reasons=0x60",  # SW + HW thermal slowdown
        ]
        spec["temperature"] = int(profiles.PROFILES[spec["gpu"]["profile"]]["temp_slowdown"]) - 1
        spec["persistenced"] = False
    elif number == 5:
        # The library was upgraded (new libnvidia-ml.so, what NVML reports), the loaded kernel module is the old one;
        # the real NVML then refuses to start (NVML_ERROR_LIB_RM_VERSION_MISMATCH).
        previous = {"580": "570.86.15", "570": "550.90.07", "550": "535.183.01"}
        spec["kernel_module_version"] = previous.get(_driver_version(spec).split(".")[0], "525.147.05")
        spec["gpu_overrides"] = ["error.nvmlInitWithFlags=LibRmVersionMismatch"]
    else:
        raise ValueError(f"unknown mis-tuning {number!r} (known: {sorted(MISTUNINGS)})")
    return spec, policy


# --------------------------------------------------------------------------------------------------- writers


def _write(root: Path, rel: str, text: str, mode: int = 0o644, replace: bool = True) -> None:
    dest = root / rel.lstrip("/")
    if dest.exists() and not replace:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    os.chmod(dest, mode)


def _symlink(root: Path, rel: str, target: str) -> None:
    dest = root / rel.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    os.symlink(target, dest)


def _node_cpus(settings: dict[str, Any]) -> dict[int, str]:
    layout = mkroot.cpu_layout(settings)
    return {n: mkroot.cpulist([c["id"] for c in layout if c["node"] == n]) for n in range(settings["numa_nodes"])}


def _busy_gpus(spec: dict[str, Any], state: dict[str, str]) -> dict[str, str]:
    """A training or inference job on every GPU: busy, links at full speed, memory nearly all taken by the
    framework's allocator (normal: no host swapping), clocks held at the power limit on half of them (SW power
    cap, what a fully loaded GPU shows)."""
    profile = profiles.PROFILES[spec["gpu"]["profile"]]
    total = int(profile["memory_total"])
    pct = spec.get("gpu_memory_pct", spec.get("gpu_memory_job_pct", 93.0))
    limit_mw = int(profile["power_default_limit_mw"])
    out = {}
    for g in range(spec["gpu"]["count"]):
        used = int(total * pct / 100)
        out.update(
            {
                f"gpu.{g}.utilization_gpu": str(96 + g % 3),
                f"gpu.{g}.utilization_memory": str(55 + g % 7),
                f"gpu.{g}.memory_used": str(used),
                f"gpu.{g}.power_usage_mw": str(limit_mw - 25000 + (g * 3100) % 20000),
                f"gpu.{g}.clocks_event_reasons": "0x4" if g % 2 else "0x0",
                f"gpu.{g}.temperature": str(spec.get("temperature", 61 + (g * 3) % 7)),
                f"gpu.{g}.pcie_gen_current": state[f"gpu.{g}.pcie_gen_max"],
                f"gpu.{g}.clock_graphics": profile["max_clock_graphics"],
                f"gpu.{g}.clock_sm": profile["max_clock_sm"],
                f"gpu.{g}.processes": f"{41000 + g}:{used - 512 * profiles.MIB}",
            }
        )
    return out


def _driver_version(spec: dict[str, Any]) -> str:
    return profiles.resolve_driver(spec["gpu"]["driver"])["driver_version"]


def _gpu_state(name: str, spec: dict[str, Any], settings: dict[str, Any]) -> dict[str, str]:
    gpu = spec["gpu"]
    state = profiles.build_state(gpu["profile"], gpus=gpu["count"], driver=gpu["driver"], seed=name)
    cpus = _node_cpus(settings)
    affinity = gpu.get("nodes_affinity", gpu["nodes"])
    for g in range(gpu["count"]):
        state[f"gpu.{g}.pci_bus_id"] = gpu["bus_ids"][g]
        state[f"gpu.{g}.numa_node"] = str(gpu["nodes"][g])
        state[f"gpu.{g}.cpu_affinity"] = cpus[affinity[g]]
    state.update(_busy_gpus(spec, state))
    return profiles.apply_overrides(state, spec.get("gpu_overrides", []))


def _nvidia_stack(spec: dict[str, Any], version: str) -> dict[str, Any]:
    """mkroot overrides for what the driver, its packages and daemons leave on the host: the loaded kernel module
    (/proc/driver/nvidia/version), the user-space library, the NVIDIA PCI functions (GPUs, NVSwitches), fabric
    manager installed and running."""
    gpu = spec["gpu"]
    device = "0x" + profiles.PROFILES[gpu["profile"]]["pci_device_id"][2:6].lower()
    pci = mkroot.nvidia_gpus([b.lower()[4:] for b in gpu["bus_ids"]], device=device)  # NVML 8-digit domain -> sysfs
    pci += [
        {**sw, "address": a}
        for sw, a in zip(mkroot.nvswitches(len(spec["nvswitches"])), spec["nvswitches"], strict=True)
    ]
    return {
        "nvidia_kernel_module": spec.get("kernel_module_version", version),
        "nvidia_kernel_module_open": gpu["flavour"] == "open",
        "nvidia_library_version": version,
        "nvidia_pci": pci,
        "fabricmanager": version if spec["fabricmanager"] else None,
        "fabricmanager_running": bool(spec["fabricmanager"]),
    }


def _nvidia_extras(root: Path, spec: dict[str, Any]) -> None:
    """What mkroot does not write: the GPUs' NUMA nodes in sysfs, CUDA toolkits, the persistence daemon."""
    gpu = spec["gpu"]
    for address, node in zip(gpu["bus_ids"], gpu["nodes"], strict=True):
        _write(root, f"sys/devices/pci0000:00/{address.lower()[4:]}/numa_node", f"{node}\n")
    for i, address in enumerate(spec["nvswitches"]):
        _write(root, f"sys/devices/pci0000:00/{address}/numa_node", f"{i * 2 // len(spec['nvswitches'])}\n")
    for toolkit in spec["toolkits"]:
        base = f"usr/local/cuda-{toolkit.rsplit('.', 1)[0]}"
        _write(root, f"{base}/version.json", json.dumps({"cuda": {"name": "CUDA SDK", "version": toolkit}}, indent=3))
    if spec["toolkits"]:
        _symlink(root, "usr/local/cuda", f"cuda-{spec['toolkits'][-1].rsplit('.', 1)[0]}")
    if spec.get("persistenced", True):
        pid, comm = 1733, "nvidia-persiste"  # comm is cut at 15 characters
        _write(root, f"proc/{pid}/comm", comm + "\n")
        _write(
            root, f"proc/{pid}/status", f"Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n"
        )


def _network(root: Path, ethtool_dir: Path, spec: dict[str, Any]) -> None:
    nics = [{k: v for k, v in nic.items() if k not in ("ethtool", "master")} for nic in spec["nics"]]
    netroot.build_netroot(root, nics=nics, tcp=spec.get("tcp") or {}, infiniband=spec["infiniband"])
    ethtool_dir.mkdir(parents=True, exist_ok=True)
    for nic in spec["nics"]:
        if nic.get("ethtool"):
            os.symlink(ETHTOOL_FIXTURES / nic["ethtool"], ethtool_dir / nic["name"])
        if nic.get("master"):
            _symlink(root, f"sys/class/net/{nic['name']}/master", f"../{nic['master']}")


def build_host(host_dir: Path, name: str, spec: dict[str, Any]) -> Path:
    """One simulated host under ``host_dir`` (created; must not exist)."""
    host_dir.mkdir(parents=True)
    version = _driver_version(spec)
    overrides = {**spec["host"], **_nvidia_stack(spec, version)}
    settings = mkroot.settings(overrides)
    profiles.write_state(host_dir / "nvml.state", _gpu_state(name, spec, settings))
    # mkroot's benign boot lines, with the kernel module this host loaded.
    module = overrides["nvidia_kernel_module"]
    overrides["kern_log_lines"] = [line.replace("550.90.07", module) for line in mkroot.benign_kern_log(settings)]
    root = mkroot.build_root(host_dir / "root", overrides)
    _network(root, host_dir / "ethtool", spec)
    _nvidia_extras(root, spec)
    for rel, text in spec.get("files", {}).items():
        _write(root, rel, text)
    return host_dir


def build(out: Path, variants: bool = False, hosts: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Build the reference hosts (and, with ``variants``, one mis-tuned copy per seed mis-tuning, and the fabric
    fault "<host>--rdma" of FABRIC_FAULT_HOSTS) under ``out``.

    Returns {host: {"dir": Path, "policy": host policy, "base": reference host, "mistuning": N or None}}.
    """
    out = Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    built: dict[str, dict[str, Any]] = {}
    for name in hosts or list(HOSTS):
        spec = HOSTS[name]
        built[name] = {"dir": build_host(out / name, name, spec), "policy": {}, "base": name, "mistuning": None}
        if not variants:
            continue
        for number in MISTUNINGS:
            variant, policy = _mistune(spec, number)
            vname = f"{name}--m{number}"
            if variant == spec:  # only the owner's policy differs: audit the healthy host's own files
                built[vname] = {"dir": built[name]["dir"], "policy": policy, "base": name, "mistuning": number}
                continue
            built[vname] = {
                "dir": build_host(out / vname, name, variant),
                "policy": policy,
                "base": name,
                "mistuning": number,
            }
        if name in FABRIC_FAULT_HOSTS:
            vname = f"{name}--rdma"
            built[vname] = {"dir": build_host(out / vname, name, _fabric_fault(spec)), "policy": {}, "base": name,
                            "mistuning": "rdma"}
    return built


def inventory(path: Path, built: dict[str, dict[str, Any]], sim_dir: Path, python: str = sys.executable) -> Path:
    """An inventory for playbooks/audit.yml: every host local, on its own files, with the default policy (no site
    links, no declared MTU) plus what its owner declares (gpufleet_policy_host; only mis-tuning 3 declares links)."""
    hosts = {}
    for name, info in built.items():
        host_dir = Path(info["dir"])
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": python,
            "gpufleet_audit_root": str(host_dir / "root"),
            "gpufleet_ethtool_path": str(ETHTOOL_FIXTURES / "fake-ethtool"),
            "gpufleet_sample_seconds": 0,
            "gpufleet_environment": {
                "LD_LIBRARY_PATH": str(sim_dir),
                "FAKE_NVML_STATE": str(host_dir / "nvml.state"),
                "FAKE_ETHTOOL_DIR": str(host_dir / "ethtool"),
                "GPUFLEET_SIM_HOST": name,  # lets a test count module calls per host (m3 shares its host's files)
            },
            "gpufleet_policy_host": info["policy"],
        }
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=True))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out", default=str(REPO / "build" / "reference"), help="where to build (default: %(default)s)"
    )
    parser.add_argument("--variants", action="store_true", help="also build one host per seed mis-tuning")
    args = parser.parse_args(argv)
    built = build(Path(args.out), variants=args.variants)
    inventory(Path(args.out) / "hosts.yml", built, REPO / "build" / "sim")
    print(f"reference hosts: {len(built)} simulated hosts in {args.out} (inventory: {args.out}/hosts.yml)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
