# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The attributes of gpufleet's modules, written once. Every module takes the default (POSIX targets, with
    # ansible.builtin.action_common_attributes for what each attribute means), then read_only or changing, or its own
    # check_mode/diff_mode entries where it says more.
    DOCUMENTATION = r"""
options: {}
attributes:
  platform:
    platforms: posix
    support: full
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
    details: The module only reads.
"""

    CHANGING = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""
