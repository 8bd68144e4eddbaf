# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""One way to read /proc, /sys and /etc, relative to a root.

Every reader of host files goes through HostFS so that tests (and audits of a mounted
image) can point it at a fixture tree: ``HostFS("/srv/image").read("/proc/cmdline")``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

READ_CHUNK = 64 * 1024
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class HostFS:
    def __init__(self, root="/"):
        self.root = os.path.abspath(root or "/")

    def path(self, path):
        """Absolute path of ``path`` (an absolute host path) under the root."""
        if not path.startswith("/"):
            raise ValueError("HostFS paths must be absolute, got %r" % path)
        if self.root == "/":
            return path
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path, limit=1024 * 1024):
        """Text of a file (its first ``limit`` bytes), or None when it does not exist or cannot be read.

        os.read in 64 KiB steps rather than a buffered file's ``read(limit)``, which allocates ``limit`` bytes (1 MiB
        by default: an mmap and munmap) for every read of what is mostly a one-line sysfs file."""
        try:
            fd = os.open(self.path(path), os.O_RDONLY | _CLOEXEC)
        except (IOError, OSError):
            return None
        chunks, left = [], limit
        try:
            while left > 0:
                chunk = os.read(fd, min(READ_CHUNK, left))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except (IOError, OSError):
            return None
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", "replace")

    def exists(self, path):
        return os.path.exists(self.path(path))

    def glob(self, pattern):
        """Host paths (root stripped) matching ``pattern``, sorted."""
        found = sorted(glob.glob(self.path(pattern)))
        if self.root == "/":
            return found
        return ["/" + os.path.relpath(p, self.root) for p in found]

    def realpath(self, path):
        """Host path a link resolves to, staying inside the root."""
        real = os.path.realpath(self.path(path))
        if self.root == "/":
            return real
        return "/" + os.path.relpath(real, self.root)
