# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Everything gpu_info returns, for any module that needs it (gpu_info, audit): pynvml first, nvidia-smi
when pynvml cannot be imported, plus the versions that live outside NVML."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import traceback

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, nvidia_smi, nvml, pci, software

# Options shared by every module that reads GPUs.
ARGUMENT_SPEC = dict(
    backend=dict(type="str", default="auto", choices=["auto", "pynvml", "nvidia-smi"]),
    nvml_library=dict(type="path"),
    nvidia_smi_path=dict(type="path"),
)


# A read-only GPU module's options: the backend's and the root the host is read under.
READER_SPEC = dict(ARGUMENT_SPEC, root=dict(type="path", default="/"))


def check_reader_params(module):
    """check_params, and ``root`` must be a directory."""
    check_params(module)
    if not os.path.isdir(module.params["root"]):
        module.fail_json(msg="root: not a directory: %s" % module.params["root"])


def check_params(module):
    """Operator errors in the shared options: fail naming the option."""
    params = module.params
    if params.get("nvml_library") and not os.path.isfile(params["nvml_library"]):
        module.fail_json(msg="nvml_library: no such file: %s (give the path of libnvidia-ml.so.1)"
                         % params["nvml_library"])
    if params.get("nvidia_smi_path") and not os.path.isfile(params["nvidia_smi_path"]):
        module.fail_json(msg="nvidia_smi_path: no such file: %s" % params["nvidia_smi_path"])


def _read_pynvml(module, fs, library, sample_seconds, meanwhile=None):
    try:
        nv = nvml.load_pynvml(library)
    except OSError as exc:
        module.fail_json(msg="nvml_library: cannot load %s: %s" % (library, exc))
    found = {}

    def inside():
        # Inside the error counters' sample window (or, NVML failing, right after): which binding this is (its
        # distribution's metadata), then the caller's reads.
        if "binding" not in found:
            found["binding"] = nvml.binding_info(nv)
            if meanwhile is not None:
                meanwhile()

    try:
        driver, gpus = nvml.collect(nv, fs, sample_seconds=sample_seconds, meanwhile=inside)
    except nvml.NvmlUnavailable as exc:
        inside()
        binding = found["binding"]
        # The NVML error's name (LibRmVersionMismatch, DriverNotLoaded, ...) is a finding of its own (SW-KMOD-001).
        cause = exc.__cause__
        code = nvml.error_name(cause) if isinstance(cause, nv.NVMLError) else None
        binding["lacks"] = {}
        return ({"available": False, "source": "pynvml", "error": str(exc), "error_code": code, "binding": binding},
                {}, [])
    inside()
    binding = found["binding"]
    for gpu in gpus:
        gpu["source"] = "pynvml"
    _essential_from_nvidia_smi(module, gpus)
    binding["lacks"] = binding_lacks(driver, gpus)
    return {"available": True, "source": "pynvml", "error": None, "binding": binding}, driver, gpus


# The pynvml field (in ``unsupported``) behind each of nvidia_smi.ESSENTIAL's fields.
_ESSENTIAL_KEYS = {
    "remapped_rows": ("remapped_rows",),
    "mig": ("mig.current", "mig.pending"),
    "fabric": ("fabric",),
    "nvlink": ("nvlink",),
}


def _nvlink_from_nvidia_smi(gpu, links):
    """NVLink states from ``nvidia-smi nvlink --status`` for a binding without NVML's NVLink calls; the error
    counters stay unknown (the binding cannot read them, nvidia-smi's status has none)."""
    gpu["unsupported"].pop("nvlink", None)
    names = [name for name, _counter in nvml.NVLINK_COUNTERS]
    for name in names:
        gpu["unsupported"]["nvlink.errors." + name] = nvml.binding_lacks("nvmlDeviceGetNvLinkErrorCounter")
    gpu["nvlink"] = dict(
        links,
        remote=None,
        count_source="nvidia-smi",
        errors=dict((name, None) for name in names),
        errors_increase=dict((name, None) for name in names),
        sample_seconds=None,
    )
    gpu.setdefault("sources", {})["nvlink"] = "nvidia-smi"


def _essential_from_nvidia_smi(module, gpus):
    """Health facts the binding has no function for (nvidia_smi.ESSENTIAL) come from nvidia-smi, which reads them
    through the driver's own NVML; each GPU's ``sources`` names the fields read that way. Without nvidia-smi they
    stay null with the binding's reason."""
    wanted = sorted(
        field for field, keys in _ESSENTIAL_KEYS.items()
        if any((g.get("unsupported") or {}).get(keys[0], "").startswith(nvml.LACKS) for g in gpus)
    )
    if not wanted:
        return
    binary = module.params.get("nvidia_smi_path") or module.get_bin_path("nvidia-smi")
    if not binary or not os.access(binary, os.X_OK):
        return
    values = nvidia_smi.essential_fields(module, binary, [f for f in wanted if f != "nvlink"])
    links = nvidia_smi.nvlink_status(module, binary) if "nvlink" in wanted else {}
    for gpu in gpus:
        if gpu.get("uuid") in links and (gpu.get("unsupported") or {}).get("nvlink", "").startswith(nvml.LACKS):
            _nvlink_from_nvidia_smi(gpu, links[gpu["uuid"]])
        found = values.get(nvidia_smi.bus_key(gpu.get("pci_bus_id"))) or {}
        for field in wanted:
            if field == "nvlink":
                continue
            keys = _ESSENTIAL_KEYS[field]
            if field in found and (gpu.get("unsupported") or {}).get(keys[0], "").startswith(nvml.LACKS):
                for key in keys:
                    gpu["unsupported"].pop(key, None)
                if found[field] == nvidia_smi.NO_FABRIC:
                    gpu[field] = None
                    gpu["unsupported"][field] = "NotSupported"
                else:
                    gpu[field] = found[field]
                gpu.setdefault("sources", {})[field] = "nvidia-smi"


def binding_lacks(driver, gpus):
    """{field: [functions]} of every field some GPU (or the driver) could not read because the binding has no
    function for it (their ``unsupported`` reasons name the functions); GPU fields as in the GPU's map, driver
    fields as ``driver.<field>``."""
    out = {}

    def add(field, reason):
        if not isinstance(reason, str) or nvml.LACKS not in reason:
            return
        names = [part.strip()[len(nvml.LACKS):] for part in reason.split(";") if part.strip().startswith(nvml.LACKS)]
        out.setdefault(field, [])
        out[field] = sorted(set(out[field]) | set(names))

    for field, reason in ((driver or {}).get("unsupported") or {}).items():
        add("driver." + field, reason)
    for gpu in gpus:
        for field, reason in (gpu.get("unsupported") or {}).items():
            add(field, reason)
    return out


def _read_nvidia_smi(module, binary, pynvml_error=None):
    binary = binary or module.get_bin_path("nvidia-smi")
    prefix = "%s; " % pynvml_error if pynvml_error else ""
    if not binary:
        return {"available": False, "source": None, "error": prefix + "nvidia-smi not found in PATH"}, {}, []
    if not os.access(binary, os.X_OK):
        module.fail_json(msg="nvidia_smi_path: %s is not an executable file" % binary)
    try:
        version, gpus = nvidia_smi.collect(module, binary)
    except nvidia_smi.NvidiaSmiError as exc:
        # nvidia-smi says "Failed to initialize NVML: Driver/library version mismatch" where nvmlInit returns
        # NVML_ERROR_LIB_RM_VERSION_MISMATCH.
        code = "LibRmVersionMismatch" if "version mismatch" in str(exc).lower() else None
        return {"available": False, "source": "nvidia-smi", "error": prefix + str(exc), "error_code": code}, {}, []
    return ({"available": True, "source": "nvidia-smi", "error": None},
            {"version": version, "unsupported": {"nvml_version": "not available from nvidia-smi",
                                                 "cuda_driver_version": "not available from nvidia-smi"}},
            gpus)


def _outside_nvml(module, fs):
    """The driver's facts that live outside NVML (kernel module, library, toolkits, fabric manager, NVLSM, IMEX),
    the PCI scan and the uptime."""
    kmod = software.kernel_module(fs, module)
    lib = software.library_version(fs)
    nvlsm = software.nvlsm(fs)
    driver = {
        "kernel_module_version": kmod["version"],
        "kernel_module_flavour": kmod["flavour"],
        "kernel_module_loaded": kmod["loaded"],
        "kernel_module_source": kmod["source"],
        "library_version": lib["version"],
        "library_versions": lib["versions"],
        "library_source": lib["source"],
        "cuda_toolkits": software.cuda_toolkits(fs),
        "cuda_compat": software.cuda_compat(fs),
        "fabricmanager_version": software.fabricmanager_version(module, fs),
        "fabricmanager_running": software.fabricmanager_running(fs),
        "nvlsm_installed": nvlsm["installed"],
        "nvlsm_running": nvlsm["running"],
        "imex": software.imex(fs),
    }
    return {"driver": driver, "pci": pci.scan(fs), "uptime_s": software.uptime_seconds(fs)}


def read(module, fs, sample_seconds=nvml.SAMPLE_SECONDS, meanwhile=None):
    """{nvml, driver, gpus, gpu_count} as gpu_info documents them. ``sample_seconds``: the time between the two
    readings of the GPUs' error counters (0: one reading, no increase).

    ``meanwhile`` (a callable, optional) is called once, in this thread, inside the counters' sample window when
    NVML is read (else before the reads that live outside NVML return): the caller's own reads share the wait, as
    the facts outside NVML (kernel module, library, toolkits, PCI scan) do."""
    params = module.params
    backend = params["backend"]
    outside = {}

    def inside():
        if not outside:
            outside.update(_outside_nvml(module, fs))
            if meanwhile is not None:
                meanwhile()

    if backend == "nvidia-smi":
        status, driver, gpus = _read_nvidia_smi(module, params["nvidia_smi_path"])
    else:
        try:
            status, driver, gpus = _read_pynvml(module, fs, params["nvml_library"], sample_seconds, meanwhile=inside)
        except ImportError:
            if outside:  # raised by the reads inside the sample window, not by importing pynvml
                raise
            if backend == "pynvml":
                module.fail_json(msg="backend=pynvml but pynvml cannot be imported on the target "
                                     "(install nvidia-ml-py, or use backend=auto for the nvidia-smi fallback)",
                                 exception=traceback.format_exc())
            status, driver, gpus = _read_nvidia_smi(module, params["nvidia_smi_path"], "pynvml not importable")
    inside()
    status["library"] = params["nvml_library"]
    status.setdefault("error_code", None)
    status.setdefault("binding", None)

    driver = dict(driver or {})
    for key in ("version", "nvml_version", "cuda_driver_version", "cuda_driver_version_int"):
        driver.setdefault(key, None)
    driver.setdefault("unsupported", {})
    driver["branch"] = decoders.driver_branch(driver["version"])
    driver.update(outside["driver"])
    return {"nvml": status, "driver": driver, "gpus": gpus, "gpu_count": len(gpus), "pci": outside["pci"],
            "uptime_s": outside["uptime_s"]}
