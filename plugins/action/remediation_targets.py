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
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, targets
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import plain

MODULE = "gpufleet.tuning.remediation_targets"


def host_values(templar, task_vars, names):
    """``{name: plain value}`` of the host variables ``names`` that are defined (templated)."""
    out = {}
    for name in names:
        if name in task_vars:
            out[name] = plain(templar.template(task_vars[name]))
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        for key in ("policy", "role_vars"):
            if key in args:
                raise AnsibleActionFail("%s is filled in by the action plugin from the host's variables; do not pass it"
                                        % key)
        layers = host_values(self._templar, task_vars, policy.LAYERS)
        args["policy"] = [layers.get(name) or {} for name in policy.LAYERS]
        args["role_vars"] = host_values(self._templar, task_vars, targets.role_variables())
        result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        return result
