# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The host's policy layers (policy.LAYERS) as an action plugin hands them to a module: the one place on the
controller that reads them, so no playbook writes the layer list out.

A module that judges (audit, gpu_probe, remediation_targets) takes the list in its ``policy`` option and merges and
validates it on the host with ``policy.from_option``, once per host per play.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import LAYERS
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import plain


def host_values(templar, task_vars, names):
    """``{name: plain value}`` of the host variables ``names`` that are defined, templated."""
    return {name: plain(templar.template(task_vars[name])) for name in names if name in (task_vars or {})}


def layers(templar, task_vars):
    """The host's policy layers, first to last (``{}`` for one that is not defined)."""
    values = host_values(templar, task_vars, LAYERS)
    return [values.get(name) if values.get(name) is not None else {} for name in LAYERS]


class PolicyLayersAction(ActionBase):
    """Runs ``MODULE`` with its ``policy`` option set to the host's layers, unless the task sets it itself."""

    MODULE = None
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def module_args(self, task_vars):
        args = dict(self._task.args)
        if "policy" not in args:
            args["policy"] = layers(self._templar, task_vars)
        return args

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.module_args(task_vars or {})
        result.update(self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars))
        return result
