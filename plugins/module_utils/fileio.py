# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Atomic file writes for everything gpufleet writes on a target: temp file in the same directory, fsync,
chmod, rename. A reader never sees a half-written file, and a failure leaves the old file in place. And the read
of the JSON records gpufleet keeps there (the watch's state and baseline)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile


def read_record(path, version):
    """The JSON object at ``path`` when its ``version`` is ``version``; None when the file is missing, unreadable,
    not JSON, not an object, or of another version (a record gpufleet wrote in another format is not read)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == version else None


def write_atomic(path, text, mode=0o644, dir_mode=0o755):
    """Write ``text`` (str, or bytes as they are) to ``path``."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, dir_mode)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
