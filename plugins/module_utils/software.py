# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Versions of the NVIDIA software stack that live outside NVML: the loaded kernel module, the installed user-space
library, CUDA toolkits and cuda-compat packages, nvidia-fabricmanager (version and whether it runs), the NVLink
subnet manager (NVLSM, HGX B200 and later) and the IMEX service of multi-node NVLink systems (GB200 NVL72), and the
host's uptime (a GPU fabric still in training means something else ten minutes after boot than ten seconds after).

These are read from files, not from NVML, because NVML cannot start exactly when they matter most: after a driver
upgrade without a reboot the old kernel module stays loaded and ``nvmlInit`` fails with
NVML_ERROR_LIB_RM_VERSION_MISMATCH (NVML API reference, initialization).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders


def kernel_module_version(fs):
    """Version of the loaded nvidia.ko, or None when the module is not loaded."""
    return kernel_module(fs)["version"]


_MODINFO_VERSION = re.compile(r"^(\d+\.\d+(?:\.\d+)?)\s*$")


def kernel_module(fs, module=None):
    """{version, flavour, loaded, source} of the nvidia kernel module.

    The loaded module says ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07 ...`` (proprietary) or
    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15 ...`` (open) in /proc/driver/nvidia/version.
    When neither that file nor /sys/module/nvidia/version can be read and ``module`` is given on the real root,
    ``modinfo -F version nvidia`` gives the version of the module file the running kernel would load
    (``loaded: false``).
    """
    for path in ("/proc/driver/nvidia/version", "/sys/module/nvidia/version"):
        text = fs.read(path)
        version = decoders.parse_kernel_module_version(text)
        if version:
            flavour = None
            if path.startswith("/proc"):
                flavour = "open" if "Open Kernel Module" in text else "proprietary"
            return {"version": version, "flavour": flavour, "loaded": True, "source": path}
    if module is not None and fs.root == "/":
        binary = module.get_bin_path("modinfo")
        if binary:
            rc, out, _err = module.run_command([binary, "-F", "version", "nvidia"])
            m = _MODINFO_VERSION.match((out or "").strip()) if rc == 0 else None
            if m:
                return {"version": m.group(1), "flavour": None, "loaded": False, "source": "modinfo"}
    return {"version": None, "flavour": None, "loaded": False, "source": None}


# Where distributions and NVIDIA's packages and runfile put libnvidia-ml.so.<driver version>.
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
_LIB_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_DRIVER_LIB_PACKAGES = re.compile(
    r"^(libnvidia-compute-\d+(?:-server)?|libnvidia-ml1|nvidia-driver-libs|"
    r"nvidia-driver-cuda-libs)$"
)


def dpkg_packages(fs, pattern):
    """{package: version} of installed dpkg packages whose name matches ``pattern`` (a compiled regex)."""
    out = {}
    for block in (fs.read("/var/lib/dpkg/status", limit=64 * 1024 * 1024) or "").split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith(" "):
                fields[key.strip()] = value.strip()
        name = fields.get("Package")
        if name and pattern.match(name) and fields.get("Status", "").endswith(" installed"):
            out[name] = fields.get("Version")
    return out


def _upstream(version):
    """Debian version "550.90.07-0ubuntu1" / "1:550.90.07-1" -> "550.90.07"."""
    m = re.match(r"^(?:\d+:)?(\d+\.\d+(?:\.\d+)?)", version or "")
    return m.group(1) if m else None


def library_version(fs):
    """{version, versions, source}: the installed user-space driver (libnvidia-ml.so.<version>).

    ``versions`` lists every libnvidia-ml.so.<version> found (more than one: leftovers of another driver);
    ``version`` is the one libnvidia-ml.so.1 points at, else the only or highest one, else the version of the
    dpkg package that ships the library.
    """
    found = {}
    for base in LIBRARY_DIRS:
        for path in fs.glob(base + "/libnvidia-ml.so.*"):
            m = _LIB_VERSION.search(path)
            if m:
                found.setdefault(m.group(1), path)
    versions = sorted(found, key=_numbers)
    for base in LIBRARY_DIRS:
        link = base + "/libnvidia-ml.so.1"
        if fs.exists(link):
            m = _LIB_VERSION.search(fs.realpath(link))
            if m:
                return {"version": m.group(1), "versions": versions, "source": link}
    if versions:
        return {"version": versions[-1], "versions": versions, "source": found[versions[-1]]}
    for name, version in sorted(dpkg_packages(fs, _DRIVER_LIB_PACKAGES).items()):
        if _upstream(version):
            return {"version": _upstream(version), "versions": [], "source": "dpkg:%s" % name}
    return {"version": None, "versions": [], "source": None}


def _numbers(version):
    return tuple(int(p) for p in re.findall(r"\d+", str(version)))


_TXT_VERSION = re.compile(r"CUDA Version\s+(\d+\.\d+(?:\.\d+)?)")


def _toolkit_version(fs, base):
    text = fs.read(base + "/version.json")
    if text:
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        version = (data.get("cuda") or {}).get("version") if isinstance(data, dict) else None
        if version:
            return str(version)
    m = _TXT_VERSION.search(fs.read(base + "/version.txt") or "")
    return m.group(1) if m else None


def cuda_toolkits(fs):
    """Installed CUDA toolkits under /usr/local: [{path, version, default}], newest path last."""
    default = fs.realpath("/usr/local/cuda") if fs.exists("/usr/local/cuda") else None
    toolkits = []
    for base in fs.glob("/usr/local/cuda-*"):
        version = _toolkit_version(fs, base)
        if version is None:
            continue
        toolkits.append({"path": base, "version": version, "default": base == default})
    if not toolkits and default:
        version = _toolkit_version(fs, "/usr/local/cuda")
        if version:
            toolkits.append({"path": "/usr/local/cuda", "version": version, "default": True})
    return toolkits


_COMPAT_LIB = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
_COMPAT_DIR = re.compile(r"/cuda-(\d+\.\d+)/compat$")
_COMPAT_PACKAGE = re.compile(r"^cuda-compat-(\d+)-(\d+)$")


def cuda_compat(fs):
    """Installed CUDA forward-compatibility packages: [{cuda, driver, path}].

    NVIDIA's ``cuda-compat-X-Y`` package (deb or rpm) installs the user-mode driver of a newer branch into
    /usr/local/cuda-X.Y/compat (libcuda.so.<driver version>), which lets CUDA X.Y run on an older kernel driver
    (CUDA compatibility guide, forward compatibility). A dpkg package without its files is listed with path null.
    """
    out = []
    seen = set()
    for path in fs.glob("/usr/local/cuda-*/compat"):
        m = _COMPAT_DIR.search(path)
        if not m:
            continue
        driver = None
        for lib in fs.glob(path + "/libcuda.so.*"):
            found = _COMPAT_LIB.search(lib)
            if found:
                driver = found.group(1)
        if driver:
            out.append({"cuda": m.group(1), "driver": driver, "path": path})
            seen.add(m.group(1))
    for name, version in sorted(dpkg_packages(fs, _COMPAT_PACKAGE).items()):
        m = _COMPAT_PACKAGE.match(name)
        cuda = "%s.%s" % (m.group(1), m.group(2))
        if cuda not in seen:
            out.append({"cuda": cuda, "driver": _upstream(version), "path": None})
    return out


_FM_VERSION = re.compile(r"(\d+\.\d+\.\d+)")
_FM_PACKAGE = re.compile(r"^nvidia-fabricmanager(?:-\d+)?$")
# /proc/<pid>/comm holds at most 15 characters: nv-fabricmanager shows as "nv-fabricmanage".
_FM_COMM = "nv-fabricmanage"


def _process_running(fs, comm):
    """True when a process whose /proc/<pid>/comm starts with ``comm`` runs (the way host_info finds irqbalance)."""
    for path in fs.glob("/proc/[0-9]*/comm"):
        if (fs.read(path) or "").strip().startswith(comm):
            return True
    return False


def fabricmanager_running(fs):
    """True when an nv-fabricmanager process runs."""
    return _process_running(fs, _FM_COMM)


def fabricmanager_version(module, fs):
    """nvidia-fabricmanager version when its binary is installed, else None."""
    binary = None
    if fs.root == "/":
        binary = module.get_bin_path("nv-fabricmanager")
    if binary is None:
        # A mounted image, or a PATH without /usr/bin: we cannot run it, but a package may say.
        for doc in fs.glob("/usr/share/doc/nvidia-fabricmanager*/changelog*"):
            m = _FM_VERSION.search(fs.read(doc) or "")
            if m:
                return m.group(1)
        for _name, version in sorted(dpkg_packages(fs, _FM_PACKAGE).items()):
            if _upstream(version):
                return _upstream(version)
        return None
    rc, out, err = module.run_command([binary, "--version"])
    m = _FM_VERSION.search(out or "") or _FM_VERSION.search(err or "")
    return m.group(1) if rc == 0 and m else None


# NVLSM: NVIDIA's package installs /opt/nvidia/nvlsm/sbin/nvlsm (started by nvidia-fabricmanager-start.sh with
# --config /usr/share/nvidia/nvlsm/nvlsm.conf, as recorded in siderolabs/extensions#893); deb/rpm package "nvlsm".
NVLSM_BINARIES = ("/opt/nvidia/nvlsm/sbin/nvlsm", "/usr/sbin/nvlsm", "/usr/bin/nvlsm")
_NVLSM_PACKAGE = re.compile(r"^nvlsm$")
_NVLSM_COMM = "nvlsm"


def nvlsm(fs):
    """{installed, running} of the NVLink subnet manager that fabric manager needs on HGX B200 and later."""
    installed = any(fs.exists(p) for p in NVLSM_BINARIES) or bool(dpkg_packages(fs, _NVLSM_PACKAGE))
    return {"installed": installed, "running": _process_running(fs, _NVLSM_COMM)}


# IMEX (NVIDIA IMEX service for NVLink networks user guide): the nvidia-imex daemon, its config file and the node
# list that IMEX_NODE_CONFIG_FILE names (default /etc/nvidia-imex/nodes_config.cfg: the IP addresses of the nodes
# of this IMEX domain). With BIND_INTERFACE_IP empty, IMEX binds to the address of that list that one of the host's
# own interfaces has.
IMEX_BINARIES = ("/usr/bin/nvidia-imex", "/usr/sbin/nvidia-imex")
IMEX_CONFIG = "/etc/nvidia-imex/config.cfg"
IMEX_NODES_DEFAULT = "/etc/nvidia-imex/nodes_config.cfg"
_IMEX_PACKAGE = re.compile(r"^nvidia-imex(?:-\d+)?$")
_IMEX_COMM = "nvidia-imex"


def _config_value(text, key):
    for line in (text or "").splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None


def parse_nodes_config(text):
    """IMEX node list -> (addresses, invalid lines): one IP address per line; blank lines and # comments skipped."""
    addresses, invalid = [], []
    for line in (text or "").splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        try:
            addresses.append(str(ipaddress.ip_address(entry)))
        except ValueError:
            invalid.append(entry)
    return addresses, invalid


def local_addresses(fs):
    """The host's own IP addresses: IPv4 from /proc/net/fib_trie ("/32 host LOCAL" leaves), IPv6 from
    /proc/net/if_inet6; None when neither file can be read."""
    trie, inet6 = fs.read("/proc/net/fib_trie"), fs.read("/proc/net/if_inet6")
    if trie is None and inet6 is None:
        return None
    found, last = set(), None
    for line in (trie or "").splitlines():
        text = line.strip()
        if text.startswith("|--"):
            last = text[3:].strip()
        elif last and text.startswith("/32") and text.endswith("LOCAL"):
            found.add(last)
    for line in (inet6 or "").splitlines():
        hexaddr = (line.split() or [""])[0]
        if len(hexaddr) == 32:
            try:
                found.add(str(ipaddress.ip_address(int(hexaddr, 16))))
            except ValueError:
                continue
    return sorted(found)


def imex(fs):
    """{installed, running, config_file, nodes_file, nodes_file_present, nodes, invalid, bind_ip, local_addresses}.

    ``nodes`` are the valid addresses of the node list, ``invalid`` its other lines; ``local_addresses`` (the host's
    own addresses, None when unreadable) are read only where IMEX is installed or configured."""
    config = fs.read(IMEX_CONFIG)
    nodes_file = _config_value(config, "IMEX_NODE_CONFIG_FILE") or IMEX_NODES_DEFAULT
    text = fs.read(nodes_file)
    installed = any(fs.exists(p) for p in IMEX_BINARIES) or bool(dpkg_packages(fs, _IMEX_PACKAGE))
    nodes, invalid = parse_nodes_config(text)
    configured = installed or config is not None or text is not None
    return {
        "installed": installed,
        "running": _process_running(fs, _IMEX_COMM),
        "config_file": IMEX_CONFIG if config is not None else None,
        "nodes_file": nodes_file,
        "nodes_file_present": text is not None,
        "nodes": nodes,
        "invalid": invalid,
        "bind_ip": _config_value(config, "BIND_INTERFACE_IP") or None,
        "local_addresses": local_addresses(fs) if configured else None,
    }


def uptime_seconds(fs):
    """Seconds since boot (/proc/uptime, proc(5)), or None."""
    try:
        return float((fs.read("/proc/uptime") or "").split()[0])
    except (IndexError, ValueError):
        return None
