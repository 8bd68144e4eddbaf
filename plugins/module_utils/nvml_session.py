# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""One NVML session: ``nvmlInit`` on entry, ``nvmlShutdown`` on exit, whatever happens in between.

NVML counts its initialisations: every successful ``nvmlInit`` must be paired with one ``nvmlShutdown``
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlInitializationAndCleanup.html). Code that opens NVML does it
through this context manager instead of its own init/try/finally/shutdown::

    with nvml_session(nv):
        ...

A failed ``nvmlInit`` raises :class:`NvmlInitError` (the NVML error is its ``error`` attribute, for the caller's
message); an error from ``nvmlShutdown`` is ignored, so that it never hides the outcome of the work done.

This file imports nothing from the collection, so that any reader (nvml.py included) can use it without a cycle.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from contextlib import contextmanager


class NvmlInitError(Exception):
    """``nvmlInit`` failed; ``error`` is the NVMLError it raised."""

    def __init__(self, error):
        super(NvmlInitError, self).__init__(str(error))
        self.error = error


@contextmanager
def nvml_session(nv):
    """Initialise NVML through the bound pynvml module ``nv``; shut it down when the block ends."""
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise NvmlInitError(exc) from exc
    try:
        yield nv
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
