# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Options of the modules that read GPU state the way gpufleet.tuning.gpu_info does.
    DOCUMENTATION = r"""
options:
  backend:
    description: Where GPU state is read from (as M(gpufleet.tuning.gpu_info)).
    type: str
    choices: [auto, pynvml, nvidia-smi]
    default: auto
  nvml_library:
    description: Path of C(libnvidia-ml.so.1) when it is outside the loader's search path.
    type: path
  nvidia_smi_path:
    description: Path of C(nvidia-smi) for the fallback backend.
    type: path
"""
