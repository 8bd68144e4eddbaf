# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of gpufleet.tuning.gpu_topology (documentation: plugins/modules/gpu_topology.py): the topology
judges nothing and reads no policy, so policy keys given as extra variables of their own (``-e @policy.yml``) stop
the run naming them, as in the playbooks that judge (plugin_utils/policy_layers.py), instead of being ignored."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.policy_layers import refuse_stray_keys


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        refuse_stray_keys(self._loader, reads_policy=False)
        result.update(
            self._execute_module(
                module_name="gpufleet.tuning.gpu_topology", module_args=self._task.args, task_vars=task_vars
            )
        )
        return result
