"""A healthy, fully-populated facts dict (8x H100 host, tuned for a 180 ms link) for rule unit tests.

Rule tests start from this and change one thing; the shapes are those gpu_info, host_info and nic_info return.
"""

from __future__ import annotations

import copy

NODE_CPUS = ["0-55,112-167", "56-111,168-223"]


def gpu(i: int) -> dict:
    node = 0 if i < 4 else 1
    return {
        "index": i,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-0000000{i}-0000-0000-0000-000000000000",
        "pci_bus_id": f"00000000:{['18', '2A', '3A', '5D', '9A', 'AB', 'BA', 'DB'][i]}:00.0",
        "architecture": "hopper",
        "memory": {"total_mib": 81559, "used_mib": 40000, "free_mib": 41559, "used_pct": 49.0},
        "utilization": {"gpu_pct": 90, "memory_pct": 40},
        "persistence_mode": True,
        "power": {
            "usage_w": 500.0,
            "limit_w": 700.0,
            "default_limit_w": 700.0,
            "min_limit_w": 200.0,
            "max_limit_w": 700.0,
            "enforced_limit_w": 700.0,
        },
        "ecc": {
            "current": True,
            "pending": True,
            "volatile_uncorrected": 0,
            "aggregate_uncorrected": 0,
            "volatile_corrected": 0,
            "aggregate_corrected": 0,
        },
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "retired_pages": None,
        "clocks": {"graphics": 1980, "sm": 1980, "mem": 2619},
        "clock_event_reasons": {"mask": "0x0000000000000000", "active": [], "throttling": []},
        "temperature": {"gpu": 60, "slowdown": 89, "shutdown": 92, "gpu_max": 87},
        # Error counters are read twice by gpu_info (nvml.SAMPLE_SECONDS apart): totals and their increase.
        "pcie": {
            "gen_current": 5,
            "width_current": 16,
            "gen_max": 5,
            "width_max": 16,
            "replay_count": 0,
            "replay_increase": 0,
            "sample_seconds": 1.0,
        },
        "compute_mode": "default",
        "mig": {"current": False, "pending": False},
        "nvlink": {
            "up": 18,
            "total": 18,
            "down": [],
            "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
            "errors_increase": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
            "sample_seconds": 1.0,
        },
        # HGX H100: NVSwitch fabric registered by the fabric manager.
        "fabric": {"state": "completed", "status": "Success", "health_mask": "0x00000000", "health_problems": []},
        "recovery_action": "none",
        "vbios_version": "96.00.5E.00.01",
        "cpu_affinity": NODE_CPUS[node],
        "numa_node": node,
        "processes": [],
        "lost": False,
        "unsupported": {},
        "source": "pynvml",
    }


def rdma_port(device: str, rate: float = 400.0, link_layer: str = "InfiniBand", netdevs=None) -> dict:
    """One ACTIVE, LinkUp RDMA port as module_utils/rdma.py reports it, its error counters read twice, still."""
    width, speed = ("4X", "NDR") if rate == 400.0 else ("2X", "NDR")
    counters = dict.fromkeys(("link_downed", "symbol_error", "link_error_recovery", "port_rcv_errors",
                              "local_link_integrity_errors", "excessive_buffer_overrun_errors"), 0)
    return {
        "name": f"{device}/1", "device": device, "port": 1, "state": "ACTIVE", "state_code": 4,
        "phys_state": "LinkUp", "phys_state_code": 5, "rate": f"{rate:g} Gb/sec ({width} {speed})", "rate_gbps": rate,
        "width": width, "speed": speed, "link_layer": link_layer, "netdevs": netdevs or [],
        "netdev_up": True if link_layer == "Ethernet" else None, "counters": counters, "deltas": {},
        "saturated": [], "reset": [], "unreadable": {}, "hw_counters": {}, "hw_deltas": {},
        "hca_type": "MT4129", "board_id": "MT_0000000838", "fw_ver": "28.41.1000",
    }


HEALTHY = {
    "gpu": {
        "nvml": {
            "available": True,
            "source": "pynvml",
            "error": None,
            "library": None,
            "binding": {
                "module": "/opt/gpufleet/venv/lib/python3.11/site-packages/pynvml.py",
                "distribution": "nvidia-ml-py",
                "version": "12.570.172",
                "lacks": {},
            },
        },
        "driver": {
            "version": "550.90.07",
            "branch": 550,
            "nvml_version": "12.550.90.07",
            "cuda_driver_version": "12.4",
            "cuda_driver_version_int": 12040,
            "kernel_module_version": "550.90.07",
            "kernel_module_flavour": "open",
            "kernel_module_loaded": True,
            "library_version": "550.90.07",
            "cuda_toolkits": [{"path": "/usr/local/cuda-12.4", "version": "12.4.1", "default": True}],
            "cuda_compat": [],
            "fabricmanager_version": "550.90.07",
            "fabricmanager_running": True,
            # HGX H100: NVSwitches on the PCI bus, no NVLSM (HGX B200 and later) and no IMEX (multi-node NVLink).
            "nvlsm_installed": False,
            "nvlsm_running": False,
            "imex": {
                "installed": False,
                "running": False,
                "config_file": None,
                "nodes_file": "/etc/nvidia-imex/nodes_config.cfg",
                "nodes_file_present": False,
                "nodes": [],
                "invalid": [],
                "bind_ip": None,
                "local_addresses": None,
            },
            "unsupported": {},
        },
        "uptime_s": 86400.0,
        "gpu_count": 8,
        "gpus": [gpu(i) for i in range(8)],
        # HGX H100: 8 GPUs and 4 NVSwitches on the PCI bus (NVIDIA functions of class 0x0302 and 0x0680).
        "pci": {
            "available": True,
            "error": None,
            "gpus": [
                {
                    "address": f"0000:{b.lower()}:00.0",
                    "device": "0x2330",
                    "class": "0x030200",
                    "driver": "nvidia",
                    "virtual": False,
                }
                for b in ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
            ],
            "nvswitches": [
                {
                    "address": f"0000:{b}:00.0",
                    "device": "0x22a3",
                    "class": "0x068000",
                    "driver": "nvidia",
                    "virtual": False,
                }
                for b in ["05", "06", "07", "08"]
            ],
            "nvswitch_bridges": [],
            "vpd_unreadable": [],
        },
    },
    "host": {
        "cpu": {
            "model": "Intel(R) Xeon(R) Platinum 8480+",
            "sockets": 2,
            "cores": 112,
            "threads": 224,
            "governors": {"performance": "0-223"},
            "scaling_driver": "intel_pstate",
            "freq_mhz": {"min": 800, "max": 3800, "current_avg": 3000},
            "boost": True,
        },
        "numa": {
            "nodes": [
                {"id": 0, "cpus": NODE_CPUS[0], "memory_total_mib": 1048576, "memory_free_mib": 900000},
                {"id": 1, "cpus": NODE_CPUS[1], "memory_total_mib": 1048576, "memory_free_mib": 900000},
            ],
            "balancing": False,
        },
        "memory": {
            "total_mib": 2097152,
            "available_mib": 1800000,
            "swap_total_mib": 0,
            "swap_used_mib": 0,
            "swap_in_per_s": 0.0,
            "swap_out_per_s": 0.0,
            "sample_seconds": 1.0,
            "psi_some_avg10": 0.0,
            "psi_full_avg10": 0.0,
        },
        "vm": {
            "swappiness": 10,
            "overcommit_memory": 0,
            "overcommit_ratio": 50,
            "min_free_kbytes": 1048576,
            "zone_reclaim_mode": 0,
            "max_map_count": 1048576,
        },
        "thp": {"enabled": "madvise", "defrag": "madvise"},
        "hugepages": {"total": 0, "free": 0, "size_kb": 2048},
        "memlock": {
            "process_soft_kb": None,
            "process_hard_kb": None,
            "configured": [
                {"path": "/etc/security/limits.d/90-gpu.conf", "domain": "*", "type": "-", "value_kb": None}
            ],
        },
        "irqbalance": {"installed": True, "running": True},
        "irq": {"devices": 10, "irqs": 200, "pinned": [], "driver_set": 0, "unreadable": 0},
        "kernel": {"release": "5.15.0-105-generic", "version": None},
        "os": {"id": "ubuntu", "version_id": "22.04", "pretty_name": "Ubuntu 22.04.4 LTS"},
        "kernel_log": {
            "source": "file",
            "error": None,
            "lines_scanned": 120,
            "xid": [],
            "aer": {"corrected": 0, "uncorrected": 0, "fatal": 0, "last": None},
            "sxid": [],
        },
        "unsupported": {},
    },
    "network": {
        "nics": [
            {
                "name": f"ens{n}",
                "present": True,
                "driver": "mlx5_core",
                "speed_mbps": 400000,
                "mtu": 9000,
                "operstate": "up",
                "numa_node": node,
                "physical": True,
                "rings": {"rx": 8192, "tx": 8192, "rx_max": 8192, "tx_max": 8192},
                # nic_info's two ethtool -S readings of the ring-drop counters, one second apart.
                "drops": {
                    "interval_s": 1.0,
                    "ring": {"rx_out_of_buffer": {"total": 0, "delta": 0}},
                    "other": {"rx_discards_phy": {"total": 0, "delta": 0}},
                    "allowance": {},
                },
                "offloads": {
                    "tcp-segmentation-offload": True,
                    "generic-segmentation-offload": True,
                    "generic-receive-offload": True,
                    "rx-checksumming": True,
                    "tx-checksumming": True,
                    "scatter-gather": True,
                    "large-receive-offload": False,
                },
                "offloads_fixed": [],
                "coalescing": None,
                "channels": None,
                "source": "ethtool-json",
                "unsupported": {},
            }
            for n, node in ((1, 0), (2, 1))
        ],
        "tcp": {
            "rmem": [4096, 131072, 134217728],
            "wmem": [4096, 16384, 134217728],
            "rmem_max": 134217728,
            "wmem_max": 134217728,
            "congestion_control": "bbr",
            "available_congestion_control": ["reno", "cubic", "bbr"],
            "allowed_congestion_control": ["reno", "cubic", "bbr"],
            "default_qdisc": "fq",
            "mtu_probing": 1,
            "slow_start_after_idle": 0,
            "unsupported": {},
        },
        # An HGX H100 node's compute fabric: eight ConnectX-7 HCAs, one 400 Gb/s NDR port each.
        "infiniband": [
            {
                "device": f"mlx5_{i}",
                "port": 1,
                "state": "ACTIVE",
                "phys_state": "LinkUp",
                "rate_gbps": 400.0,
                "link_layer": "InfiniBand",
            }
            for i in range(8)
        ],
        "peers": [],
    },
    # The RDMA ports (module_utils/rdma.py): the eight compute HCAs' InfiniBand ports at 400 Gb/s NDR and the
    # storage RoCE LAG (two 100 GbE ports bonded: mlx5_bond_0 over bond0), counters still over the sample window.
    "rdma": {
        "available": True,
        "reason": None,
        "interval_s": 1.0,
        "ports": [rdma_port(f"mlx5_{i}", netdevs=[f"ibp{i}s0"]) for i in range(8)]
        + [rdma_port("mlx5_bond_0", rate=200.0, link_layer="Ethernet", netdevs=["bond0"])],
    },
    # GPUDirect RDMA prerequisites (module_utils/gpudirect.py): bare metal, nvidia_peermem loaded, each GPU two PCIe
    # switch levels below the switch of its ConnectX-7 (the DGX H100 layout) with ACS redirect off on every bridge,
    # the IOMMU in passthrough.
    "gpudirect": {
        "applies": True,
        "reason": None,
        "rdma_devices": [{"device": f"mlx5_{i}", "address": f"0000:{b}:00.0"} for i, b in enumerate(
            ["19", "2b", "3b", "5e", "9b", "ac", "bb", "dc"])],
        "gpus": 8,
        "peer_memory": {
            "loaded": ["nvidia_peermem"],
            "installed": {"nvidia_peermem": True, "nv_peer_mem": False},
            "dmabuf": {
                "open_kernel_module": True,
                "kernel_5_12": True,
                "driver_515": True,
                "kernel": "5.15.0-105-generic",
                "driver": "550.90.07",
                "flavour": "open",
                "available": True,
                "missing": [],
            },
            "available": True,
            "modules_readable": True,
        },
        "acs": [
            {
                "gpu": i,
                "bus_id": f"0000:{b:02x}:00.0",
                "nic": f"mlx5_{i}",
                "nic_bus_id": f"0000:{b + 1:02x}:00.0",
                "category": "PXB",
                "bridges": [
                    {"bdf": f"0000:{b - n:02x}:00.0", "readable": True, "present": True, "capability": "0x005f",
                     "control": "0x0000", "enabled": [], "redirect": False}
                    for n in (4, 3, 2, 1)
                ],
            }
            for i, b in enumerate([0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB])
        ],
        "iommu": {
            "units": ["dmar0", "dmar1"],
            "cmdline": {"intel_iommu": "on", "iommu": "pt"},
            "groups": {f"0000:{b}:00.0": "identity" for b in ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]},
            "mode": "passthrough",
        },
        "virtualization": {"virtual": False, "reason": None, "cloud": None, "vendor": "NVIDIA", "product": "DGXH100",
                           "arch": "x86", "cpu_vendor": "GenuineIntel"},
    },
    "links": {"source": "declared", "peers": [{"site": "eu_west", "rtt_ms": 180.0, "bandwidth_gbps": 1.0}]},
    # What `gpufleet links` measured from this host (link_measure at both ends, rules/measured.py): the declared
    # 1 Gbit/s, 180 ms link to eu_west delivering 930 Mbit/s with 4 streams, 64 MiB buffers, BBR.
    "link_measurements": [
        {
            "site": "ap_southeast",
            "peer_site": "eu_west",
            "declared_gbps": 1.0,
            "rtt_ms": 180.4,
            "single_mbps": 702.0,
            "multi_mbps": 931.0,
            "streams": 4,
            "sender_wmem_max": 67108864,
            "receiver_rmem_max": 67108864,
            "congestion_control": "bbr",
            "error": None,
        }
    ],
    # The balance probe's sample (gpu_probe, module_utils/probe.py): one training process per GPU, bound to 14 of
    # its NUMA node's CPUs, GPUs busy, loaders keeping up, no swapping.
    "probe": {
        "available": True,
        "error": None,
        "sample_seconds": 5.0,
        "reads": 5,
        "cpus_online": 224,
        "numa_nodes": {"0": NODE_CPUS[0], "1": NODE_CPUS[1]},
        "gpus": [
            {
                "index": i,
                "bus_id": f"0000:{['18', '2a', '3a', '5d', '9a', 'ab', 'ba', 'db'][i]}:00.0",
                "lost": False,
                "error": None,
                "numa_node": 0 if i < 4 else 1,
                "local_cpus": NODE_CPUS[0 if i < 4 else 1],
                "local_cpus_busy_pct": 35.0,
                "utilization": {"gpu_pct": 92.0, "memory_pct": 41.0, "reads": 5},
                "processes": [1000 + i],
                "unsupported": {},
            }
            for i in range(8)
        ],
        "processes": [
            {
                "pid": 1000 + i,
                "visible": True,
                "name": "python3",
                "state": "R",
                "threads": 24,
                "cpu_pct": 620.0,
                "busiest_thread_pct": 85.0,
                "allowed_cpus": f"{(i % 4) * 14 + (0 if i < 4 else 56)}-{(i % 4) * 14 + (13 if i < 4 else 69)}",
                "allowed_count": 14,
                "pinned": True,
                "allowed_busy_pct": 48.0,
                "own_share_pct": 44.3,
                "saturation_pct": 48.0,
                "last_cpu": {
                    str((i % 4) * 14 + (0 if i < 4 else 56) + t): {"threads": 2, "cpu_pct": 51.6} for t in range(12)
                },
                "gpus": [i],
                "used_memory_mib": 39000,
            }
            for i in range(8)
        ],
        "memory": {
            "swap_in_per_s": 0.0,
            "swap_out_per_s": 0.0,
            "swap_total_mib": 0,
            "swap_used_mib": 0,
            "psi_some_avg10": 0.0,
        },
    },
}


def probe_job(name: str) -> dict:
    """One GPU process as probe.collect samples it (module_utils/probe.py's shape): PID 700, named ``name``, pinned to
    CPU 0 and saturating it with 2 threads, on GPU 0 - what test_probe.py's simulated host gives, and the job of the
    hostile-terminal tests' sample."""
    return {
        "pid": 700,
        "visible": True,
        "name": name,
        "state": "R",
        "threads": 2,
        "cpu_pct": 100.0,
        "busiest_thread_pct": 95.0,
        "allowed_cpus": "0",
        "allowed_count": 1,
        "pinned": True,
        "allowed_busy_pct": 100.0,
        "own_share_pct": 100.0,
        "saturation_pct": 100.0,
        "last_cpu": {"0": {"threads": 2, "cpu_pct": 100.0}},
        "gpus": [0],
        "used_memory_mib": 2048,
    }


def healthy() -> dict:
    return copy.deepcopy(HEALTHY)


def hgx_b200(f: dict) -> dict:
    """The healthy host as an HGX B200: 8 B200 (PCI 0x2901, NVML "NVIDIA B200"), no NVSwitch PCI functions but
    the NVSwitch management LPFs of the baseboard's ConnectX-7 bridge, fabric manager and NVLSM running."""
    g = f["gpu"]
    for gpu_ in g["gpus"]:
        gpu_.update(name="NVIDIA B200", architecture="blackwell")
    for p in g["pci"]["gpus"]:
        p["device"] = "0x2901"
    g["pci"]["nvswitches"] = []
    g["pci"]["nvswitch_bridges"] = [
        {"address": f"0000:c1:00.{fn}", "device": "0x1021", "driver": "mlx5_core"} for fn in (1, 3)
    ]
    g["driver"].update(nvlsm_installed=True, nvlsm_running=True)
    return f


def gb200_tray(f: dict, imex_running: bool = True) -> dict:
    """The healthy host as a GB200 NVL72 compute tray: 4 GB200 GPUs (PCI 0x2941) in the rack's NVLink fabric, no
    NVSwitch on its own PCI bus, no fabric manager, nvidia-imex with an 18-tray node list that holds this host."""
    g = f["gpu"]
    g["gpus"] = g["gpus"][:4]
    g["gpu_count"] = 4
    for gpu_ in g["gpus"]:
        gpu_.update(name="NVIDIA GB200", architecture="blackwell")
    g["pci"]["gpus"] = [dict(p, device="0x2941") for p in g["pci"]["gpus"][:4]]
    g["pci"]["nvswitches"] = []
    g["driver"].update(fabricmanager_version=None, fabricmanager_running=False)
    g["driver"]["imex"].update(
        installed=True,
        running=imex_running,
        config_file="/etc/nvidia-imex/config.cfg",
        nodes_file_present=True,
        nodes=[f"10.114.0.{n}" for n in range(1, 19)],
        local_addresses=["10.114.0.7", "127.0.0.1"],
    )
    f["probe"]["gpus"] = f["probe"]["gpus"][:4]
    return f


def b200_fm_stopped(f: dict) -> dict:
    """The HGX B200 an hour after boot with fabric manager and NVLSM stopped: every GPU's fabric still in training."""
    hgx_b200(f)
    f["gpu"]["driver"].update(fabricmanager_running=False, nvlsm_running=False)
    for g in f["gpu"]["gpus"]:
        g["fabric"].update(state="in_progress", status=None)
    f["gpu"]["uptime_s"] = 3600.0
    return f


def h100_pcie(f: dict) -> dict:
    """The healthy host as 8 H100 PCIe cards (PCI 0x2331): no NVSwitch, no fabric."""
    for g in f["gpu"]["gpus"]:
        g.update(name="NVIDIA H100 PCIe", fabric=None)
        g["unsupported"] = {"fabric": "NotSupported"}
    for p in f["gpu"]["pci"]["gpus"]:
        p["device"] = "0x2331"
    f["gpu"]["pci"]["nvswitches"] = []
    return f


def gh200(f: dict) -> dict:
    """The healthy host as one GH200 (PCI 0x2342) outside any NVLink switch domain: no fabric."""
    f["gpu"]["gpus"] = f["gpu"]["gpus"][:1]
    f["gpu"]["gpu_count"] = 1
    g = f["gpu"]["gpus"][0]
    g.update(name="NVIDIA GH200 480GB", fabric=None)
    g["unsupported"] = {"fabric": "NotSupported"}
    f["gpu"]["pci"]["gpus"] = [dict(f["gpu"]["pci"]["gpus"][0], device="0x2342")]
    f["gpu"]["pci"]["nvswitches"] = []
    return f


def single_gpu(f: dict) -> dict:
    """The healthy host with one H100 and no NVSwitch."""
    f["gpu"]["gpus"] = f["gpu"]["gpus"][:1]
    f["gpu"]["gpus"][0].update(fabric=None)
    f["gpu"]["gpu_count"] = 1
    f["gpu"]["pci"]["gpus"] = f["gpu"]["pci"]["gpus"][:1]
    f["gpu"]["pci"]["nvswitches"] = []
    return f
