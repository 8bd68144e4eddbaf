# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of gpufleet.tuning.local_guard (documentation: plugins/modules/local_guard.py).

Runs entirely on the controller: nothing is sent to the host. It reads the connection this task really uses
(the plugin Ansible loaded for it, so ``ansible_connection`` in the inventory, ``connection:`` on the play, ``-c
local`` on the command line and the implicit localhost all count) and the address it connects to, and fails the
host when that is the controller itself and the inventory does not say ``gpufleet_allow_local_changes: true``.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import local_guard


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset()

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        if self._task.args:
            raise AnsibleActionFail(
                "local_guard takes no options (got %s); it reads %s from the host's variables"
                % (", ".join(sorted(self._task.args)), local_guard.VARIABLE)
            )
        host = task_vars.get("inventory_hostname", "?")
        connection = getattr(self._connection, "transport", None) or self._play_context.connection
        address = self._play_context.remote_addr
        raw = task_vars.get(local_guard.VARIABLE)
        try:
            value = self._templar.template(raw) if raw is not None else None
            message = local_guard.refusal(
                host, connection, address, value, what="The play '%s'" % task_vars.get("ansible_play_name", "?")
            )
        except local_guard.GuardValueError as exc:
            raise AnsibleActionFail(str(exc)) from None
        result.update(
            changed=False,
            connection=connection,
            address=address,
            local=local_guard.reached_locally(connection, address) is not None,
            allowed=message is None,
        )
        if message:
            result.update(failed=True, msg=message)
        else:
            result["msg"] = "%s may be changed (%s)" % (
                host,
                "the inventory sets %s: true" % local_guard.VARIABLE if result["local"] else "not the controller",
            )
        return result
