# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the software area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    _driver,
    _version_tuple,
    result,
    skip,
)


def check_driver_version(facts, pol):
    version = _driver(facts).get("version")
    if not version:
        return skip("driver version not available")
    minimum = pol["software"]["driver_min_version"]
    branch = pol["software"]["driver_branch"]
    problems = []
    if minimum and _version_tuple(version) < _version_tuple(minimum):
        problems.append("older than %s" % minimum)
    actual_branch = decoders.driver_branch(version)
    if branch is not None and actual_branch != branch:
        problems.append("outside pinned branch %s" % branch)
    expected = {"min_version": minimum, "branch": branch}
    if problems:
        return result("fail", version, expected, "driver %s is %s" % (version, " and ".join(problems)))
    return result("pass", version, expected, "driver %s meets policy" % version)


def check_cuda_toolkit(facts, pol):
    drv = _driver(facts)
    supported = drv.get("cuda_driver_version")
    toolkits = drv.get("cuda_toolkits")
    if not supported:
        return skip("the driver's CUDA version is not available")
    if not toolkits:
        return skip("no CUDA toolkit installed under /usr/local")
    too_new = [t for t in toolkits if _version_tuple(t["version"])[:2] > _version_tuple(supported)[:2]]
    observed = {"driver_cuda": supported, "toolkits": [t["version"] for t in toolkits]}
    if too_new:
        return result(
            "fail",
            observed,
            "toolkits <= CUDA %s" % supported,
            "CUDA toolkit(s) %s are newer than the driver supports (CUDA %s): kernels built with them may "
            "fail to load or fall back to slow paths" % ([t["version"] for t in too_new], supported),
            items=too_new,
        )
    return result("pass", observed, "toolkits <= CUDA %s" % supported, "toolkits match the driver")


def check_kernel_module(facts, pol):
    drv = _driver(facts)
    user, kmod = drv.get("version"), drv.get("kernel_module_version")
    if not user or not kmod:
        return skip("driver or kernel module version not available")
    observed = {"driver": user, "kernel_module": kmod}
    if user != kmod:
        return result(
            "fail",
            observed,
            "equal",
            "kernel module %s and user-space driver %s differ (reboot or reload "
            "the module after a driver upgrade)" % (kmod, user),
        )
    return result("pass", observed, "equal", "kernel module matches the driver")


def check_fabricmanager(facts, pol):
    drv = _driver(facts)
    user, fm = drv.get("version"), drv.get("fabricmanager_version")
    if not fm:
        return skip("nvidia-fabricmanager not installed")
    if not user:
        return skip("driver version not available")
    observed = {"driver": user, "fabricmanager": fm}
    if fm != user:
        return result(
            "fail",
            observed,
            "equal",
            "fabric manager %s does not match driver %s: it refuses to start and "
            "NVSwitch systems cannot use their GPUs" % (fm, user),
        )
    return result("pass", observed, "equal", "fabric manager matches the driver")


RULES = (
    Rule(
        "SW-DRV-001",
        "software",
        "high",
        "Driver below minimum or outside the pinned branch",
        "Old drivers miss fixes and performance work; a node outside the fleet's pinned branch behaves "
        "differently from the others.",
        check_driver_version,
        role="nvidia_driver",
        references=(sources.DRIVER_INSTALL,),
    ),
    Rule(
        "SW-CUDA-001",
        "software",
        "high",
        "CUDA toolkit newer than the driver supports",
        "Code built with a newer CUDA toolkit than the driver supports can fail to load (PTX JIT errors) or "
        "fall back to slower paths.",
        check_cuda_toolkit,
        role="nvidia_driver",
        manual="Upgrade the driver to a branch that supports the toolkit, or install a matching toolkit.",
        references=(sources.CUDA_COMPAT, sources.CUDA_RELEASE_NOTES),
    ),
    Rule(
        "SW-KMOD-001",
        "software",
        "critical",
        "Kernel module and driver versions differ",
        "After a driver upgrade without a reboot the old kernel module stays loaded; NVML and CUDA then fail with "
        "'driver/library version mismatch'.",
        check_kernel_module,
        role="nvidia_driver",
        manual="Reboot, or unload and reload the nvidia modules when no process uses the GPUs.",
        references=(sources.NVML_INIT, sources.DRIVER_INSTALL),
    ),
    Rule(
        "SW-FM-001",
        "software",
        "critical",
        "Fabric manager version differs from the driver",
        "nvidia-fabricmanager must match the driver exactly; otherwise it does not start and NVSwitch-based "
        "systems (HGX) cannot run multi-GPU jobs.",
        check_fabricmanager,
        role="nvidia_driver",
        references=(sources.FABRIC_MANAGER,),
    ),
)
