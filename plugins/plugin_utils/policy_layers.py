# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The host's policy layers (policy.LAYERS) as an action plugin hands them to a module: the one place on the
controller that reads them, so no playbook writes the layer list out.

A module that judges (audit, gpu_probe, remediation_targets) takes the list in its ``policy`` option and merges and
validates it on the host with ``policy.from_option``, once per host per play.

The policy file a playbook run takes is ``gpufleet_policy_file`` (a path on the controller: the YAML file
``gpufleet --policy`` takes), read here and merged into the last layer under ``gpufleet_policy_overrides``. Policy
keys given as extra variables of their own (``-e @policy.yml`` sets ``min_severity``, ``power``, ... at the top
level) are read by nothing: the run fails naming them and what to use instead.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import LAYERS
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import plain

# The variable naming a playbook run's policy file; its content is merged under the last layer (LAYERS[-1]).
FILE_VARIABLE = "gpufleet_policy_file"


class PolicyFileError(ValueError):
    """A policy file that cannot be read or used; the message names the file."""


def host_values(templar, task_vars, names):
    """``{name: plain value}`` of the host variables ``names`` that are defined, templated."""
    return {name: plain(templar.template(task_vars[name])) for name in names if name in (task_vars or {})}


def read_policy_file(path):
    """The policy file at ``path`` (relative to the current directory), a mapping of policy keys, validated (rule
    ids against the catalog). PolicyFileError names the file and the key."""
    import yaml
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    where = "%s %s" % (FILE_VARIABLE, path)
    if not isinstance(path, str) or not path:
        raise PolicyFileError("%s: expected the path of a YAML policy file, got %r" % (FILE_VARIABLE, path))
    try:
        with open(os.path.abspath(path)) as stream:
            data = yaml.safe_load(stream)
    except OSError as exc:
        raise PolicyFileError("%s: %s" % (where, exc.strerror)) from exc
    except yaml.YAMLError as exc:
        raise PolicyFileError("%s: not valid YAML: %s" % (where, exc)) from exc
    data = data or {}
    if not isinstance(data, dict):
        raise PolicyFileError("%s: expected a mapping of policy keys, got %s" % (where, type(data).__name__))
    try:
        policy.validate(data, known_rules=rules.BY_ID)
    except policy.PolicyError as exc:
        raise PolicyFileError("%s: %s" % (where, exc)) from exc
    return data


def named_layers(values, read_file=read_policy_file):
    """``[(name, mapping)]`` of the host's policy layers, first to last, from its templated variables ``values``
    (LAYERS and FILE_VARIABLE): LAYERS with the policy file's layer (named ``gpufleet_policy_file``) before the
    last one. A layer that is not set is ``{}``; FILE_VARIABLE is a path, or the file's content (a mapping)."""
    out = [(name, values.get(name) if values.get(name) is not None else {}) for name in LAYERS]
    path = values.get(FILE_VARIABLE)
    if path is not None:
        # A mapping is the file's content, read on the controller: what gpufleet's workers ship to a region's node.
        out.insert(len(LAYERS) - 1, (FILE_VARIABLE, path if isinstance(path, dict) else read_file(path)))
    return out


def layers(templar, task_vars, read_file=read_policy_file):
    """The host's policy layers, first to last (``{}`` for one that is not defined), as a module's ``policy``
    option takes them (LAYERS): the policy file's content is merged under the last layer."""
    return as_option(named_layers(host_values(templar, task_vars, LAYERS + (FILE_VARIABLE,)), read_file))


def as_option(named):
    """``named_layers``' list as a module's ``policy`` option: one layer per name of LAYERS, the policy file's
    merged under the last (its dotted keys expanded first, so the last layer wins however either writes a key)."""
    if len(named) == len(LAYERS):
        return [pair[1] for pair in named]
    last = policy.merge(policy.expand_dotted(named[-2][1]), policy.expand_dotted(named[-1][1]))
    return [pair[1] for pair in named[:-2]] + [last]


def stray_keys(extra_vars):
    """The policy's top-level keys (policy.SPEC) among ``extra_vars``: set that way, nothing reads them."""
    return sorted(name for name in (extra_vars or {}) if name in policy.SPEC)


def stray_message(names, reads_policy=True):
    """Why a run with policy keys among its extra variables stops; ``reads_policy`` False: a playbook that judges
    nothing (topology), which takes no policy at all."""
    given = (
        "policy keys given as extra variables are read by nothing: %s (-e @policy.yml sets each key of the file as a "
        "variable of its own)" % ", ".join(names)
    )
    if not reads_policy:
        return given + (
            ". This playbook reads no policy: leave them out (the playbooks that judge - audit, watch, probe, "
            "remediate - take the policy file as -e %s=policy.yml)" % FILE_VARIABLE
        )
    return given + (
        ". Give the policy file as -e %s=policy.yml (the file `gpufleet --policy` takes), or its keys under %s"
        % (FILE_VARIABLE, LAYERS[-1])
    )


def refuse_stray_keys(loader, reads_policy=True):
    """AnsibleActionFail (stray_message) when the run's extra variables hold policy keys of their own."""
    from ansible.utils.vars import load_extra_vars

    stray = stray_keys(load_extra_vars(loader))
    if stray:
        raise AnsibleActionFail(stray_message(stray, reads_policy))


class PolicyLayersAction(ActionBase):
    """Runs ``MODULE`` with its ``policy`` option set to the host's layers, unless the task sets it itself."""

    MODULE = None
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def module_args(self, task_vars):
        refuse_stray_keys(self._loader)
        args = dict(self._task.args)
        if "policy" not in args:
            try:
                args["policy"] = layers(self._templar, task_vars)
            except (PolicyFileError, policy.PolicyError) as exc:
                raise AnsibleActionFail(str(exc)) from exc
        return args

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.module_args(task_vars or {})
        result.update(self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars))
        return result
