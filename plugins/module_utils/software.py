# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Versions of the NVIDIA software stack that live outside NVML: the loaded kernel module,
installed CUDA toolkits and nvidia-fabricmanager."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders


def kernel_module_version(fs):
    """Version of the loaded nvidia.ko, or None when the module is not loaded."""
    for path in ("/proc/driver/nvidia/version", "/sys/module/nvidia/version"):
        version = decoders.parse_kernel_module_version(fs.read(path))
        if version:
            return version
    return None


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


_FM_VERSION = re.compile(r"(\d+\.\d+\.\d+)")


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
        return None
    rc, out, err = module.run_command([binary, "--version"])
    m = _FM_VERSION.search(out or "") or _FM_VERSION.search(err or "")
    return m.group(1) if rc == 0 and m else None
