# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The attributes of gpufleet's modules, written once: read-only modules and modules that change the host.
    # Use with ansible.builtin.action_common_attributes (which defines what each attribute means).
    DOCUMENTATION = r"""
options: {}
"""

    READ_ONLY = r"""
options: {}
attributes:
  platform:
    platforms: posix
    support: full
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
  platform:
    platforms: posix
    support: full
  check_mode:
    support: full
  diff_mode:
    support: full
"""
