# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The on-host checker as one self-contained Python zip application, built from the module_utils in this process.

Run inside the ``watch_install`` module, "this process" is the module's AnsiballZ payload: the checker is made of
exactly the module_utils files Ansible shipped for the audit (the readers, the rule catalog, the policy), not of a
copy kept elsewhere. The archive is deterministic (sorted names, fixed timestamps and modes), so installing the same
collection twice writes the same bytes and the module reports no change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import importlib
import io
import sys
import zipfile

# Imported here, not only by name below: Ansible ships a module the module_utils it imports (recursively), so these
# imports are what puts the checker and everything it needs into watch_install's payload.
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import checker, slurm  # noqa: F401

PACKAGE = "ansible_collections.gpufleet.tuning.plugins.module_utils"
ENTRY_MODULES = (checker.__name__, slurm.__name__)
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)

MAIN = '''# gpufleet-watch {version}: built by gpufleet.tuning.watch_install from the collection's module_utils.
import sys

from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import checker

sys.exit(checker.main(version="{version}"))
'''


def _sources():
    """{archive path: source bytes} of every module_utils module the checker imports (itself included)."""
    for name in ENTRY_MODULES:
        importlib.import_module(name)
    files = {}
    for name, module in sorted(sys.modules.items()):
        if module is None or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            continue
        loader = getattr(module, "__loader__", None)
        source = loader.get_source(name) if loader is not None and hasattr(loader, "get_source") else None
        if source is None:
            continue  # a namespace package: an empty __init__.py is added below
        is_package = hasattr(module, "__path__")
        path = name.replace(".", "/") + ("/__init__.py" if is_package else ".py")
        files[path] = source.encode("utf-8")
    # The packages above module_utils as regular packages, so that an Ansible installed on the host (its own
    # ansible_collections) cannot shadow the archive's.
    parts = PACKAGE.split(".")
    for depth in range(1, len(parts) + 1):
        files.setdefault("/".join(parts[:depth]) + "/__init__.py", b"")
    for path in list(files):
        directory = path.rsplit("/", 1)[0]
        while directory:
            files.setdefault(directory + "/__init__.py", b"")
            directory = directory.rsplit("/", 1)[0] if "/" in directory else ""
    return files


def build(python="/usr/bin/python3"):
    """(archive bytes, version): ``#!python`` then the zip; version is ``g`` + 12 hex digits of the sources' digest."""
    files = _sources()
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode("utf-8") + b"\0" + files[path] + b"\0")
    version = "g" + digest.hexdigest()[:12]
    files["__main__.py"] = MAIN.format(version=version).encode("utf-8")
    buf = io.BytesIO()
    buf.write(("#!%s\n" % python).encode("utf-8"))
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[path])
    return buf.getvalue(), version
