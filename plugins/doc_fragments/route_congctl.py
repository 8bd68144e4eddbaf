# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The options of route_congctl and route_follow that route_congctl.ARGUMENT_SPEC declares and
    # route_congctl.validate() checks (module_utils/route_congctl.py).
    DOCUMENTATION = r"""
options:
  prefixes:
    description: Networks (CIDR, IPv4 or IPv6, host bits zero) whose connections get the congestion control.
    type: list
    elements: str
    required: true
  congestion_control:
    description:
      - Congestion control for those networks, as in C(net.ipv4.tcp_available_congestion_control) (e.g. C(bbr)).
      - The kernel must offer it; the module fails naming the ones it offers otherwise.
    type: str
    required: true
  unit_dir:
    description: Directory of the module's systemd unit (see the description).
    type: path
    default: /etc/systemd/system
  available_path:
    description: File listing the available congestion controls (tests point it elsewhere).
    type: path
    default: /proc/sys/net/ipv4/tcp_available_congestion_control
"""
