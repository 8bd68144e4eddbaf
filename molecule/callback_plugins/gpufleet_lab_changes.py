"""Lab callback: log every changed task result, with its diff, as one JSON line per result.

Molecule scenarios enable it (molecule.yml: ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED) so that verify can
hold check mode to its promise: the check step must report, task by task and with the same diff, exactly what
converge then changes. The log is $GPUFLEET_LAB_CHANGES (default: $MOLECULE_EPHEMERAL_DIRECTORY/changes.jsonl);
every ansible-playbook run appends its lines under one run id, with its playbook and whether it ran in check mode.
"""

from __future__ import annotations

import json
import os
import time

from ansible import context
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: gpufleet_lab_changes
type: aggregate
short_description: log changed results and their diffs as JSON lines (gpufleet's Molecule lab)
description:
  - Appends one JSON object per changed task result (or loop item) to the file named by GPUFLEET_LAB_CHANGES,
    else MOLECULE_EPHEMERAL_DIRECTORY/changes.jsonl.
requirements:
  - enable it in the configuration
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_lab_changes"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path = os.environ.get("GPUFLEET_LAB_CHANGES") or os.path.join(
            os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "."), "changes.jsonl"
        )
        self.run = f"{time.time():.6f}-{os.getpid()}"
        self.playbook = ""
        self.check = bool(context.CLIARGS.get("check", False))

    def v2_playbook_on_start(self, playbook):
        self.playbook = os.path.basename(playbook._file_name)

    def _write(self, record: dict) -> None:
        record.update(run=self.run, playbook=self.playbook, check=self.check)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        res = result._result
        if not res.get("changed"):
            return
        base = {"host": result._host.get_name(), "task": result._task.get_name()}
        items = res.get("results")
        if isinstance(items, list):  # a loop: one line per changed item
            for item in items:
                if isinstance(item, dict) and item.get("changed"):
                    label = item.get("_ansible_item_label", item.get("item"))
                    self._write({**base, "item": label, "diff": item.get("diff"), "msg": item.get("msg")})
            return
        self._write({**base, "item": None, "diff": res.get("diff"), "msg": res.get("msg")})
