# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of gpufleet.tuning.remediation_targets (documentation: plugins/modules/remediation_targets.py).

It hands the module the host's policy layers, in policy.LAYERS order, and the roles' public variables that can take a
policy value's place (targets.role_variables), each templated from the host's variables; the module merges and
validates the layers on the host (once per host per play) and computes every role's targets.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.gpufleet.tuning.plugins.module_utils import targets
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.policy_layers import PolicyLayersAction, host_values


class ActionModule(PolicyLayersAction):
    MODULE = "gpufleet.tuning.remediation_targets"

    def module_args(self, task_vars):
        for key in ("policy", "role_vars"):
            if key in self._task.args:
                raise AnsibleActionFail(
                    "%s is filled in by the action plugin from the host's variables; do not pass it" % key
                )
        args = super().module_args(task_vars)
        args["role_vars"] = host_values(self._templar, task_vars, targets.role_variables())
        return args
