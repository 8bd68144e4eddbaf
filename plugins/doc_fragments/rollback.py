# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  rollback_run_id:
    description:
      - When set, the prior value of everything the module changes is recorded in
        C(rollback_dir)/<run id>.json before the change, for M(gpufleet.tuning.rollback).
      - "Letters, digits, C(_ . : -); the remediation playbook sets one per run."
    type: str
  rollback_dir:
    description: Where rollback records are kept.
    type: path
    default: /var/lib/gpufleet/rollback
"""
