# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The one way gpufleet's readers run external programs on a target (the CLI's subcommands are
``src/gpufleet/commands/``): argument lists, C locale (outputs are parsed),
and a missing or unrunnable binary as an exit status (127/126) instead of a module failure, so a host without
journalctl or ethtool is reported, not lost."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def runner(module):
    """run(argv) -> (rc, stdout, stderr)."""

    def run(argv):
        argv = list(argv)
        binary = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0])
        if binary is None:
            return 127, "", "%s: command not found" % argv[0]
        try:
            return module.run_command([binary] + argv[1:], environ_update={"LC_ALL": "C", "LANG": "C"},
                                      handle_exceptions=False)
        except (IOError, OSError) as exc:
            return 126, "", "%s: %s" % (argv[0], exc)

    return run
