# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Interface names: which ones gpufleet accepts.

One rule for every place a name comes from a user or from /sys/class/net: the nic_info, audit and nic_settings
arguments, the /sys paths nic.py reads and the ethtool arguments ethtool.py passes (checked again right before
ethtool runs, so no unchecked name ever reaches a command line).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

IFNAME_MAX = 15  # IFNAMSIZ (16) minus the terminating NUL
IFNAME_RULE = (
    "an interface name is 1-15 characters: letters, digits, '_', '-', '.' or '@', not starting "
    "with '-' or '.' (the kernel also forbids '/', ':' and whitespace; shell characters are refused here)"
)
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_@][A-Za-z0-9_.@-]*$")


class InvalidInterfaceName(ValueError):
    pass


def interface_name_error(name):
    """Why ``name`` is not an acceptable interface name, or None when it is.

    The kernel's own rule (dev_valid_name) is 1-15 bytes, not "." or "..", no '/', ':' or
    whitespace. Names are also used as ethtool arguments and in /sys paths, so this is stricter:
    only letters, digits and ``_ - . @``, and no leading '-' (it would read as an option).
    """
    if not isinstance(name, str) or not name:
        return "empty name"
    if len(name.encode("utf-8")) > IFNAME_MAX:
        return "longer than %d characters" % IFNAME_MAX
    if name in (".", ".."):
        return "'.' and '..' are not interface names"
    if "/" in name:
        return "contains '/'"
    if ":" in name:
        return "contains ':'"
    if any(c.isspace() for c in name):
        return "contains whitespace"
    if name.startswith("-"):
        return "starts with '-'"
    if not _IFNAME_RE.match(name):
        bad = sorted(set(c for c in name if not (c.isalnum() and c.isascii()) and c not in "_.@-"))
        if name.startswith("."):
            return "starts with '.'"
        return "contains %s" % ", ".join(repr(c) for c in bad)
    return None


def check_interface_name(name):
    why = interface_name_error(name)
    if why is not None:
        raise InvalidInterfaceName("invalid interface name %r: %s; %s" % (name, why, IFNAME_RULE))
    return name
