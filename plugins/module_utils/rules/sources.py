# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The sources the rules rest on, named once: each rule's ``references`` picks from here.

A reference is ``(title, where)``: ``where`` is the vendor's or the kernel's documentation page, or, for a threshold
of our own, the path of the bench script or test in this repository that measured it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# NVIDIA
NVML_QUERIES = (
    "NVML API reference: device queries",
    "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html",
)
NVML_COMMANDS = (
    "NVML API reference: device commands",
    "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceCommands.html",
)
NVML_CLOCK_EVENTS = (
    "NVML API reference: clocks event reasons",
    "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html",
)
NVML_INIT = (
    "NVML API reference: initialization and NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "https://docs.nvidia.com/deploy/nvml-api/group__nvmlInitializationAndCleanup.html",
)
NVML_CHANGE_LOG = (
    "NVML API reference: change log (the driver release that added each function)",
    "https://docs.nvidia.com/deploy/nvml-api/latest/change-log.html",
)
NVML_PYTHON_BINDING = (
    "nvidia-ml-py (pynvml), NVIDIA's Python binding of NVML: release history, one release per driver branch",
    "https://pypi.org/project/nvidia-ml-py/#history",
)
DRIVER_PERSISTENCE = (
    "NVIDIA driver persistence (persistence mode and nvidia-persistenced)",
    "https://docs.nvidia.com/deploy/driver-persistence/index.html",
)
XID_CATALOG = ("NVIDIA Xid errors catalog", "https://docs.nvidia.com/deploy/xid-errors/index.html")
GPU_MEMORY_ERRORS = (
    "NVIDIA GPU memory error management (row remapping, retired pages)",
    "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html",
)
CUDA_COMPAT = (
    "CUDA compatibility (minor-version and forward compatibility, cuda-compat)",
    "https://docs.nvidia.com/deploy/cuda-compatibility/index.html",
)
CUDA_RELEASE_NOTES = (
    "CUDA toolkit release notes: minimum driver per toolkit",
    "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
)
DRIVER_INSTALL = (
    "NVIDIA driver installation guide (kernel modules, branches, Secure Boot)",
    "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html",
)
FABRIC_MANAGER = (
    "NVIDIA fabric manager user guide",
    "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html",
)
CUDA_BEST_PRACTICES_PINNED = (
    "CUDA C++ best practices guide: pinned memory",
    "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#pinned-memory",
)
GPUDIRECT_RDMA = (
    "GPUDirect RDMA: PCIe topology and locality",
    "https://docs.nvidia.com/cuda/gpudirect-rdma/index.html",
)
NVIDIA_SMI = (
    "nvidia-smi documentation (PCIe link, clocks, ECC fields)",
    "https://docs.nvidia.com/deploy/nvidia-smi/index.html",
)
NVML_NVLINK = (
    "NVML API reference: NvLink methods (link state, error counters)",
    "https://docs.nvidia.com/deploy/nvml-api/group__NvLink.html",
)
GPU_RECOVERY_ACTION = (
    "NVIDIA GPU memory error management: error recovery and response flags (NVML GPU recovery action)",
    "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html",
)
DCGM_HEALTH_WATCH = (
    "NVIDIA DCGM health watches, modules/health/DcgmHealthWatch.cpp (NVLink, fabric, PCIe replay, memory, "
    "recovery action)",
    "https://github.com/NVIDIA/DCGM/blob/master/modules/health/DcgmHealthWatch.cpp",
)
DCGM_HW_LIMITS = (
    "NVIDIA DCGM hardware limits, common/DcgmGPUHardwareLimits.h (retired pages, NVLink errors)",
    "https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h",
)
CUDA_MINOR_COMPAT = (
    "CUDA compatibility: minor version compatibility (12.x on driver >= 525, 13.x on >= 580; PTX JIT caveat)",
    "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html",
)
NVIDIA_PCI_TABLE = (
    "NVIDIA open GPU kernel modules: PCI classes the driver claims (GPUs 0x0300/0x0302, NVSwitch 0x0680)",
    "https://github.com/NVIDIA/open-gpu-kernel-modules/blob/main/kernel-open/nvidia/nv-pci-table.c",
)
PCI_IDS = (
    "The PCI ID repository, pci.ids: NVIDIA device ids (GB100 [B200] 0x2901, GB102 [B100] 0x29bc, GB100 [HGX GB200] "
    "0x2941, GH100 [GH200] 0x2342/0x2348)",
    "https://github.com/pciutils/pciids/blob/master/pci.ids",
)
MNNVL_GUIDE = (
    "NVIDIA multi-node NVLink systems (GB200 NVL72) user guide: compute and NVLink switch trays, IMEX",
    "https://docs.nvidia.com/multi-node-nvlink-systems/mnnvl-user-guide/overview.html",
)
IMEX_GUIDE = (
    "NVIDIA IMEX service for NVLink networks user guide",
    "https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/overview.html",
)
IMEX_DEPLOYMENT = (
    "NVIDIA IMEX user guide: deployment models (NVLink domain wide, partition wide, per job)",
    "https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/deployment.html",
)
IMEX_CONFIG = (
    "NVIDIA IMEX service config options: IMEX_NODE_CONFIG_FILE (nodes_config.cfg) and BIND_INTERFACE_IP",
    "https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html",
)

# GPUDirect RDMA prerequisites (NET-GDR-*)
NCCL_ACS = (
    "NCCL troubleshooting: PCI Access Control Services (ACS) - redirects peer traffic to the root complex; "
    "setpci ECAP_ACS+0x6.w=0000, again after each reboot",
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/gpu_troubleshooting.html",
)
NCCL_GPU_TO_NIC = (
    "NCCL troubleshooting: GPU-to-NIC communication - nvidia-peermem loaded at each boot, or DMA-BUF with the open "
    "kernel modules",
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#gpu-direct",
)
NCCL_DMABUF_ENABLE = (
    "NCCL environment variables: NCCL_DMABUF_ENABLE (GPUDirect RDMA registration through Linux DMA-BUF, on by "
    "default where supported)",
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-dmabuf-enable",
)
NVIDIA_PEERMEM = (
    "GPUDirect RDMA: using nvidia-peermem (the peer-memory module shipped with the driver, replaces nv_peer_mem)",
    "https://docs.nvidia.com/cuda/gpudirect-rdma/index.html#using-nvidia-peermem",
)
GPU_OPERATOR_RDMA = (
    "NVIDIA GPU Operator: GPUDirect RDMA prerequisites (DMA-BUF: open kernel modules, CUDA 11.7, Turing or later, "
    "Linux 5.12; legacy nvidia-peermem: MLNX_OFED or DOCA-OFED)",
    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html",
)
KERNEL_PARAMETERS = (
    "Linux kernel command-line parameters: iommu=pt, intel_iommu=, amd_iommu=, iommu.passthrough=, "
    "pci=disable_acs_redir=",
    "https://docs.kernel.org/admin-guide/kernel-parameters.html",
)
KERNEL_IOMMU_GROUPS = (
    "Linux kernel ABI: /sys/kernel/iommu_groups/<n>/type (identity, DMA, DMA-FQ)",
    "https://github.com/torvalds/linux/blob/master/Documentation/ABI/testing/sysfs-kernel-iommu_groups",
)
AZURE_INFINIBAND = (
    "Azure: enable InfiniBand on HPC and GPU VMs (the host owns the PCIe fabric; drivers and nvidia-peermem in the "
    "guest)",
    "https://learn.microsoft.com/en-us/azure/virtual-machines/extensions/enable-infiniband",
)
AWS_EFA_NCCL = (
    "AWS EC2: get started with EFA and NCCL (GPUDirect RDMA on p4d/p5 through the EFA driver in the guest)",
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html",
)

# Linux
KERNEL_VM_SYSCTL = (
    "Linux kernel: /proc/sys/vm (swappiness, overcommit_memory)",
    "https://docs.kernel.org/admin-guide/sysctl/vm.html",
)
KERNEL_THP = (
    "Linux kernel: transparent hugepage support (enabled, defrag)",
    "https://docs.kernel.org/admin-guide/mm/transhuge.html",
)
KERNEL_PSI = ("Linux kernel: pressure stall information", "https://docs.kernel.org/accounting/psi.html")
PROC_VMSTAT = ("proc_vmstat(5): pswpin, pswpout", "https://man7.org/linux/man-pages/man5/proc_vmstat.5.html")
MLOCK = ("mlock(2): RLIMIT_MEMLOCK and CAP_IPC_LOCK", "https://man7.org/linux/man-pages/man2/mlock.2.html")
PROC_PID_STAT = (
    "proc_pid_stat(5): utime, stime, num_threads, processor (the CPU a task last ran on)",
    "https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html",
)
PROC_PID_STATUS = (
    "proc_pid_status(5): Cpus_allowed_list",
    "https://man7.org/linux/man-pages/man5/proc_pid_status.5.html",
)
SCHED_SETAFFINITY = (
    "sched_setaffinity(2): a thread's CPU affinity mask (taskset, numactl, cpusets)",
    "https://man7.org/linux/man-pages/man2/sched_setaffinity.2.html",
)
KERNEL_NUMA_POLICY = (
    "Linux kernel: NUMA memory policy (local allocation, binding to a node)",
    "https://docs.kernel.org/admin-guide/mm/numa_memory_policy.html",
)
LIMITS_CONF = ("limits.conf(5)", "https://man7.org/linux/man-pages/man5/limits.conf.5.html")
SYSTEMD_EXEC = (
    "systemd.exec(5): LimitMEMLOCK=",
    "https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html",
)
KERNEL_CPUFREQ = (
    "Linux kernel: CPU performance scaling (governors)",
    "https://docs.kernel.org/admin-guide/pm/cpufreq.html",
)
KERNEL_INTEL_PSTATE = (
    "Linux kernel: intel_pstate (active mode with HWP, energy-performance preference)",
    "https://docs.kernel.org/admin-guide/pm/intel_pstate.html",
)
KERNEL_AMD_PSTATE = (
    "Linux kernel: amd-pstate (active mode: amd-pstate-epp, energy-performance preference; passive and guided modes)",
    "https://docs.kernel.org/admin-guide/pm/amd-pstate.html",
)
KERNEL_SYSCTL_KERNEL = (
    "Linux kernel: /proc/sys/kernel (numa_balancing)",
    "https://docs.kernel.org/admin-guide/sysctl/kernel.html",
)
KERNEL_IRQ_AFFINITY = ("Linux kernel: SMP IRQ affinity", "https://docs.kernel.org/core-api/irq/irq-affinity.html")
KERNEL_IP_SYSCTL = (
    "Linux kernel: IP sysctl (tcp_rmem, tcp_congestion_control, tcp_mtu_probing, tcp_slow_start_after_idle)",
    "https://docs.kernel.org/networking/ip-sysctl.html",
)
KERNEL_OFFLOADS = (
    "Linux kernel: segmentation offloads",
    "https://docs.kernel.org/networking/segmentation-offloads.html",
)
KERNEL_CHECKSUM_OFFLOADS = (
    "Linux kernel: checksum offloads",
    "https://docs.kernel.org/networking/checksum-offloads.html",
)
ETHTOOL = (
    "ethtool(8): -g/-G rings, -k/-K offloads, -S statistics",
    "https://man7.org/linux/man-pages/man8/ethtool.8.html",
)
KERNEL_SYSFS_PCI = (
    "Linux kernel: accessing PCI device resources through sysfs",
    "https://docs.kernel.org/PCI/sysfs-pci.html",
)
KERNEL_AER = ("Linux kernel: PCI Express advanced error reporting", "https://docs.kernel.org/PCI/pcieaer-howto.html")
IP_ROUTE = ("ip-route(8): congctl", "https://man7.org/linux/man-pages/man8/ip-route.8.html")
MLX5_COUNTERS = (
    "Linux kernel: mlx5 ethtool counters (rx_out_of_buffer, rx_discards_phy)",
    "https://docs.kernel.org/networking/device_drivers/ethernet/mellanox/mlx5/counters.html",
)
ICE_DRIVER = (
    "Linux kernel: ice driver, Rx descriptor ring size (rx_dropped, rx_dropped.nic)",
    "https://docs.kernel.org/networking/device_drivers/ethernet/intel/ice.html",
)

# Networking practice
ESNET_HOST_TUNING = (
    "ESnet fasterdata: Linux host tuning (buffers, BBR, MTU)",
    "https://fasterdata.es.net/host-tuning/linux/",
)
BBR_PAPER = (
    "Cardwell et al., BBR: congestion-based congestion control (ACM Queue 14(5), 2016)",
    "https://queue.acm.org/detail.cfm?id=3022184",
)
RFC4821 = ("RFC 4821: packetization layer path MTU discovery", "https://www.rfc-editor.org/rfc/rfc4821")
RFC8200_MTU = ("RFC 8200 section 5: IPv6 minimum link MTU 1280", "https://www.rfc-editor.org/rfc/rfc8200#section-5")
RFC5681_IDLE = (
    "RFC 5681 section 4.1: restarting idle connections",
    "https://www.rfc-editor.org/rfc/rfc5681#section-4.1",
)
RFC6349_TCP_THROUGHPUT = (
    "RFC 6349: framework for TCP throughput testing (the window a path needs: bandwidth x RTT)",
    "https://www.rfc-editor.org/rfc/rfc6349",
)
AWS_MTU = (
    "AWS EC2: network MTU (9001 in a VPC)",
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/network_mtu.html",
)
GCP_MTU = ("Google Cloud VPC: maximum transmission unit (default 1460)", "https://cloud.google.com/vpc/docs/mtu")
ENA_BEST_PRACTICES = (
    "AWS ENA Linux driver best practices: Rx ring full drops, allowance counters",
    "https://github.com/amzn/amzn-drivers/blob/master/kernel/linux/ena/ENA_Linux_Best_Practices.rst",
)

# Cloud GPU shapes (vCPUs per 8 GPUs: the basis of cpu.min_cpus_per_gpu)
AWS_P5 = ("AWS EC2 P5 instances: p5.48xlarge, 8 x H100, 192 vCPUs", "https://aws.amazon.com/ec2/instance-types/p5/")
GCP_A3 = (
    "Google Cloud accelerator-optimized machines: a3-highgpu-8g, 8 x H100, 208 vCPUs",
    "https://cloud.google.com/compute/docs/accelerator-optimized-machines",
)
AZURE_ND_H100_V5 = (
    "Azure ND H100 v5 series: Standard_ND96isr_H100_v5, 8 x H100, 96 vCPUs",
    "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/nd-h100-v5-series",
)

# Frameworks and schedulers (how GPU jobs use memory and inherit limits)
PYTORCH_CUDA_MEMORY = (
    "PyTorch CUDA semantics: memory management (the caching allocator keeps freed memory reserved)",
    "https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management",
)
TENSORFLOW_GPU_MEMORY = (
    "TensorFlow: use a GPU, limiting GPU memory growth (maps nearly all GPU memory by default)",
    "https://www.tensorflow.org/guide/gpu#limiting_gpu_memory_growth",
)
JAX_GPU_MEMORY = (
    "JAX: GPU memory allocation (preallocates 75% of GPU memory)",
    "https://docs.jax.dev/en/latest/gpu_memory_allocation.html",
)
NVIDIA_DALI = (
    "NVIDIA DALI: the CPU bottleneck of data loading and preprocessing, moved to the GPU",
    "https://docs.nvidia.com/deeplearning/dali/user-guide/docs/index.html",
)
PYTORCH_DATALOADER = (
    "PyTorch data loading: multi-process loading (DataLoader num_workers)",
    "https://docs.pytorch.org/docs/stable/data.html#multi-process-data-loading",
)
SLURM_FAQ_MEMLOCK = (
    "Slurm FAQ: locked memory limit (jobs get slurmd's limit; LimitMEMLOCK=infinity in slurmd.service)",
    "https://slurm.schedmd.com/faq.html#memlock",
)

# Peers' health checks
AZURE_NHC = ("Azure HPC node health checks (azurehpc-health-checks)", "https://github.com/Azure/azurehpc-health-checks")
GCM_HEALTH_CHECKS = (
    "Meta GPU cluster monitoring (GCM) health checks: check-nvidia-smi vbios_mismatch",
    "https://github.com/facebookresearch/gcm",
)

# RDMA ports (NET-RDMA-*)
KERNEL_SYSFS_INFINIBAND = (
    "Linux kernel ABI: /sys/class/infiniband (port state, phys_state, rate, link_layer, counters, gid_attrs/ndevs)",
    "https://github.com/torvalds/linux/blob/master/Documentation/ABI/stable/sysfs-class-infiniband",
)
KERNEL_IB_PMA_WIDTHS = (
    "Linux kernel drivers/infiniband/core/sysfs.c: the width of each PortCounters file (symbol_error and "
    "port_rcv_errors 16 bits, link_downed and link_error_recovery 8, local_link_integrity_errors 4)",
    "https://github.com/torvalds/linux/blob/master/drivers/infiniband/core/sysfs.c",
)
NVIDIA_IB_PORT_COUNTERS = (
    "NVIDIA UFM: InfiniBand port counters (what each error counter counts)",
    "https://docs.nvidia.com/networking/display/ufmsdnappumv4184/InfiniBand+Port+Counters",
)
NVIDIA_NVSENTINEL_LINK_COUNTERS = (
    "NVIDIA NVSentinel NIC health monitor: link counter detection (counters judged by their growth; resets)",
    "https://docs.nvidia.com/nvsentinel/components/nic-health-monitor/link-counter-detection",
)
AZURE_NHC_IB_RATE = (
    "Azure HPC node health checks, ND H100 v5: check_hw_ib 400 for each of mlx5_ib0..7",
    "https://github.com/Azure/azurehpc-health-checks/blob/main/conf/nd96isr_h100_v5.conf",
)
AZURE_NHC_LINK_FLAPPING = (
    "Azure HPC node health checks: azure_ib_link_flapping.nhc (an InfiniBand link that flapped fails the node)",
    "https://github.com/Azure/azurehpc-health-checks/blob/main/customTests/azure_ib_link_flapping.nhc",
)
GPUD_INFINIBAND = (
    "gpud infiniband component (threshold_default.go: H100, H200, B200 and GB200 nodes expect at least 8 ports at "
    "400 Gb/s)",
    "https://github.com/leptonai/gpud/tree/main/components/accelerator/nvidia/infiniband",
)

# Our own measurements: a threshold of ours names the script that measured it
BENCH_WAN = ("gpufleet measurement: bench/wan.py (TCP over an emulated 180 ms link with loss)", "bench/wan.py")
