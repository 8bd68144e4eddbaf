# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The attributes of gpufleet's modules, written once. Every module takes ansible.builtin.action_common_attributes
    # (what each attribute means) and one of these for its kind: READ_ONLY, CHANGING or RECORDING, or DOCUMENTATION
    # (POSIX targets alone) with check_mode/diff_mode entries of its own. A module adds details to an attribute by
    # naming it with `details:` only: Ansible merges an attribute's keys with the fragment's. (ansible-test's
    # yamllint wants each fragment a string literal, so the platform entry stands in each.)
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
  platform:
    platforms: posix
    support: full
"""

    CHANGING = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
    support: full
"""

    # A module whose change is a record, a lock or a report, or values put back from a record: check mode is fully
    # supported; there is no before/after of its own to show as a diff.
    RECORDING = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
    support: full
"""
