# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Whether a playbook that changes hosts may change this one: the controller itself.

``ansible-playbook playbooks/remediate.yml`` without ``-i`` runs on ``ansible.cfg``'s inventory, localhost over the
local connection: it would tune the machine Ansible runs on. The changing playbooks (remediate, rollback, watch,
prereqs, execution_node) start with the ``local_guard`` action, which refuses a host reached over the local
connection (``ansible_connection: local``, ``-c local``, the implicit localhost) or at a loopback address (ssh to
localhost, 127.0.0.0/8, ::1) unless the inventory marks it as intended with ``gpufleet_allow_local_changes: true``
(a lab of simulated hosts, the demo). ``gpufleet remediate`` and ``gpufleet rollback`` ask the same question before
anything runs (``gpufleet.preflight``) and exit 3 with the same message.

One home for the decision: the action plugin (plugins/action/local_guard.py) and the CLI both call ``refusal``.
"""

from __future__ import annotations

import ipaddress

# The inventory variable that says "this local host is meant to be changed".
VARIABLE = "gpufleet_allow_local_changes"
ALLOWED_VALUES = "true or false"

# Names of Ansible's local connection plugin (short, FQCN, legacy).
LOCAL_CONNECTIONS = frozenset(("local", "ansible.builtin.local", "ansible.legacy.local"))
LOOPBACK_NAMES = frozenset(("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"))

_TRUE = frozenset(("true", "yes", "on", "1", "y", "t"))
_FALSE = frozenset(("false", "no", "off", "0", "n", "f", ""))


class GuardValueError(ValueError):
    """``gpufleet_allow_local_changes`` holds something that is not a boolean."""


def allowed(value) -> bool:
    """``gpufleet_allow_local_changes`` as a bool: None (unset) is False; booleans and the words Ansible reads as
    booleans (true/false, yes/no, on/off, 1/0) are accepted; anything else raises GuardValueError naming the
    variable and the allowed values."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise GuardValueError("%s: %r is not a boolean; allowed values: %s" % (VARIABLE, value, ALLOWED_VALUES))


def is_local_connection(connection) -> bool:
    """True for Ansible's local connection plugin, by any of its names."""
    return str(connection or "").strip() in LOCAL_CONNECTIONS


def is_loopback(address) -> bool:
    """True when ``address`` names this machine: localhost (and its usual aliases) or a loopback IP address."""
    text = str(address or "").strip().strip("[]").lower()
    if text in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def reached_locally(connection, address) -> str | None:
    """How a host with this ``connection`` plugin and remote ``address`` is the controller itself, in words ("is
    reached over the local connection (local)"), or None when it is another machine."""
    if is_local_connection(connection):
        return "is reached over the local connection (%s)" % connection
    if is_loopback(address):
        return "is reached at the loopback address %s" % address
    return None


def decide(connection, address, allow_value) -> str | None:
    """Why a host may not be changed (``reached_locally``'s words), or None when it may: another machine, or a
    local one whose ``gpufleet_allow_local_changes`` is true. Raises GuardValueError for a value of the variable
    that is not a boolean (also on a host that is not local: bad input is an error wherever it is)."""
    allow = allowed(allow_value)
    how = reached_locally(connection, address)
    return None if how is None or allow else how


def message(refused, what="this playbook") -> str:
    """The refusal for ``refused``, a list of (host, how) pairs from ``decide``; ``what`` names the run (a play, a
    command)."""
    hosts = ", ".join(name for name, _how in refused)
    which = "; ".join("%s %s" % (name, how) for name, how in refused)
    return (
        "refusing to change the machine Ansible runs on (the controller): %s. %s changes the hosts it runs on, and "
        "a run without -i uses ansible.cfg's inventory, localhost: gpufleet does not tune the controller by "
        "accident. Nothing was changed. To run against the hosts you mean, give their inventory (-i); to change "
        "this machine on purpose, set %s: true for %s in the inventory (host or group variables)."
        % (which, what, VARIABLE, hosts)
    )


def refusal(host, connection, address, allow_value, what="this playbook") -> str | None:
    """``message`` for one host, or None when ``decide`` lets it be changed."""
    how = decide(connection, address, allow_value)
    return None if how is None else message([(host, how)], what)
