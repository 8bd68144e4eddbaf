# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Compile each file of a module's zip once, not twice.

Ansible sends a module and its module_utils to the host as one zip (AnsiballZ) and Python imports them with
zipimport, which keeps no bytecode: every run compiles every file it imports. CPython's zipimporter (3.10 to 3.13)
compiles each file twice: importlib asks ``get_filename()`` for the module spec's origin, and zipimporter learns the
file name by compiling the source (``_get_module_code``) and dropping the code object; ``exec_module`` then calls
``get_code()``, which compiles it again: for the audit module, twice its ~95 files on every host, every run
(what it costs: docs/benchmarks.md).

``install()`` keeps the code object ``get_filename()`` compiled and hands it to the ``get_code()`` of the same import.
The code objects and file names are the ones zipimport makes; only the second compile is gone. Where zipimport lacks
the private function (another Python or implementation), it changes nothing. It affects only the process that
imports it (the module's own, short-lived) and only imports from zips. Import this first in a module, before its
other module_utils.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    import zipimport
except ImportError:  # pragma: no cover - every CPython has it
    zipimport = None

_MARK = "_gpufleet_compile_once"


def install():
    """Patch zipimport.zipimporter in this process; True when it did (now or before)."""
    cls = getattr(zipimport, "zipimporter", None)
    compile_module = getattr(zipimport, "_get_module_code", None)
    needed = ("get_filename", "get_code", "exec_module")
    if cls is None or compile_module is None or not all(hasattr(cls, name) for name in needed):
        return False  # 3.8 and 3.9 load through load_module, which compiles on its own: nothing to save there
    if getattr(cls, _MARK, False):
        return True
    compiled = {}  # (importer, module name) -> the code object get_filename compiled, until get_code takes it
    original_get_code = cls.get_code

    def get_filename(self, fullname):
        code, _ispackage, modpath = compile_module(self, fullname)
        compiled[(id(self), fullname)] = code
        return modpath

    def get_code(self, fullname):
        code = compiled.pop((id(self), fullname), None)
        return original_get_code(self, fullname) if code is None else code

    try:
        cls.get_filename = get_filename
        cls.get_code = get_code
        setattr(cls, _MARK, True)
    except (AttributeError, TypeError):  # a zipimporter written in C (Python < 3.8): leave it
        return False
    return True


install()
