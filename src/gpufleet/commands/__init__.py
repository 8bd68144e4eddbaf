"""The `gpufleet` commands, one module each. A module has ``register(subparsers)``, which adds its sub-command(s)
and sets ``func`` to the function that runs it (``args -> exit code``); options several commands share are defined
once in ``options``."""

from __future__ import annotations

from gpufleet.commands import audit, catalog, links, probe, remediate, report, rollback, topology

COMMANDS = (audit, remediate, rollback, report, topology, probe, links, catalog)  # in `gpufleet --help` order
