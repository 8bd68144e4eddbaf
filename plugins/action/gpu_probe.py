# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of gpufleet.tuning.gpu_probe (documentation: plugins/modules/gpu_probe.py): hands the module the
host's policy layers (policy.LAYERS) when the task does not set ``policy`` itself."""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.plugin_utils.policy_layers import PolicyLayersAction


class ActionModule(PolicyLayersAction):
    MODULE = "gpufleet.tuning.gpu_probe"
