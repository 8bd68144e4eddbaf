# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: linear
short_description: ansible.builtin.linear that sleeps while every fork is busy and forks warm workers
version_added: "0.2.0"
description:
  - Runs a play exactly as C(ansible.builtin.linear) does (tasks in lockstep per batch of hosts, up to C(forks) at
    once), and differs in two things, both in the controller's main process. When every fork is busy, the built-in
    strategy finds the next free fork by checking each worker process in a loop with a 0.1 ms sleep, so the main
    process burns CPU for as long as the hosts take to answer (U(https://github.com/ansible/ansible/issues/85858)).
    This strategy blocks on the worker processes' exit instead (C(multiprocessing.connection.wait) on their
    sentinels) and hands the task to the built-in code as soon as a fork is free.
  - With C(forks) smaller than the number of hosts and modules that take seconds, as a fleet audit is, this is a large
    share of the controller's CPU (measured with C(bench/controller_cost.py); figures in C(docs/benchmarks.md)).
  - Select it in C(ansible.cfg) (C([defaults] strategy = gpufleet.tuning.linear)), with C(ANSIBLE_STRATEGY) or a
    play's C(strategy) keyword. C(gpufleet) (the CLI) runs its playbooks with it, also on execution nodes, unless
    C(ANSIBLE_STRATEGY) names another strategy.
  - A task with C(throttle) is queued by the built-in code alone (it waits on its own subset of the forks).
  - Before a play's first task it loads ansible-core's filter and test plugins and builds the Jinja lexer in the
    controller's main process, and every worker inherits them. Each worker is a fresh fork; without this, the first
    filter it templates (such as C(| default) in a task's arguments) makes it load all of them again and its first
    template builds the lexer, once per host and task (measured with C(bench/controller_cost.py --phases); figures
    in C(docs/benchmarks.md)).
author:
  - gpufleet contributors (@gpufleet)
notes:
  - Subclasses C(ansible.builtin.linear); it follows that plugin's behaviour in the installed ansible-core.
  - ansible-core 2.19 prints a deprecation warning for every strategy plugin outside C(ansible.builtin) (no
    replacement and no removal version announced). Where this plugin cannot be loaded, use C(ansible.builtin.linear)
    instead; the results are the same, only the controller's CPU differs.
"""

import contextlib
from multiprocessing.connection import wait as wait_for_any

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader, test_loader
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.template import Templar

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core 2.18: no data tagging, every string is a template

    def trust_as_template(value):
        return value


# The longest one wait blocks before the forks are looked at again: a worker that exits wakes it at once; this only
# bounds how late a stop of the run (the task queue manager terminated) is noticed.
RECHECK_SECONDS = 1.0


# One plugin of each Jinja plugin loader: looking up any ansible.builtin one loads all of ansible-core's (the loader
# keeps them for the life of the process, so the forks inherit them).
JINJA_PLUGINS = ((filter_loader, "ansible.builtin.to_json"), (test_loader, "ansible.builtin.match"))


def warm_jinja():
    """Load ansible-core's filter and test plugins, and build the Jinja lexer of the default template settings, in
    this process (no-ops once done). Both are kept for the life of the process, so the forks inherit them; without
    this each worker loads the plugins at its first filter and builds the lexer (a dozen regular expressions) at its
    first template. (ansible-core's own note in its Jinja environment: "we should pre-generate the default cached
    lexer before forking".)"""
    # Only a head start for the workers: if any of this fails, the worker that needs it does it itself and reports
    # the error against its task, as without this strategy.
    for loader, name in JINJA_PLUGINS:
        with contextlib.suppress(Exception):
            loader.get(name)
    with contextlib.suppress(Exception):
        Templar(loader=DataLoader()).template(trust_as_template("{{ 0 }}"))


class StrategyModule(LinearStrategyModule):
    def run(self, iterator, play_context):
        warm_jinja()
        return super().run(iterator, play_context)

    def _queue_task(self, host, task, task_vars, play_context):
        if not task.throttle:
            self._wait_for_free_fork()
        return super()._queue_task(host, task, task_vars, play_context)

    def _wait_for_free_fork(self):
        """Return once at least one fork is free (no process, or its process has exited), blocking meanwhile.
        ``_workers`` is ansible-core's name for the fork processes (gpufleet's workers are execution nodes)."""
        forks = getattr(self, "_workers", None)
        while forks and not getattr(self._tqm, "_terminated", False):
            sentinels = []
            for fork in forks:
                if fork is None or not fork.is_alive():
                    return
                try:
                    sentinels.append(fork.sentinel)
                except ValueError:  # a closed process object: its fork is free
                    return
            wait_for_any(sentinels, timeout=RECHECK_SECONDS)
