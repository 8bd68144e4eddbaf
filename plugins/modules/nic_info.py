#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_info
short_description: Gather NIC, TCP stack and InfiniBand state, and optionally measure RTT to peers
version_added: "0.1.0"
description:
  - Reads, for each network interface, the driver, driver and firmware versions and PCI address
    (C(ethtool -i)), ring sizes (C(ethtool -g)), offload features (C(ethtool -k)), interrupt coalescing
    (C(ethtool -c)) and channels (C(ethtool -l)), and from C(/sys/class/net) its speed, duplex, MTU,
    operational state and NUMA node.
  - Reads the receive-ring drop counters of C(ethtool -S) twice, O(stats_interval) seconds apart (one wait
    for all NICs), for the drivers whose counters say "the ring overflowed" (mlx5_core C(rx_out_of_buffer),
    ice C(rx_dropped), ixgbe C(rx_no_dma_resources)/C(rx_missed_errors), igb and e1000e
    C(rx_no_buffer_count)/C(rx_missed_errors), ena C(rx_drops)), with the NIC's other drop counters and ENA's
    C(*_allowance_exceeded) counters apart; C(drops) gives each counter's total and its growth.
  - Reads the TCP stack settings that decide throughput on long links from C(/proc/sys/net)
    (C(tcp_rmem), C(tcp_wmem), C(rmem_max), C(wmem_max), congestion control, C(default_qdisc),
    C(tcp_mtu_probing), C(tcp_slow_start_after_idle)) and the InfiniBand ports under
    C(/sys/class/infiniband).
  - For each subcommand C(ethtool --json) is used when the installed ethtool supports it, the text
    output otherwise; C(source) and C(sources) say which.
  - A value that cannot be read is V(null) and listed with the reason under the C(unsupported) of its
    NIC or of C(tcp). Inside a network namespace some sysctls are hidden; that is a fact, not a failure.
  - A host without ethtool is not a failure either; the ethtool fields are V(null) with the reason.
  - With O(peers), times TCP connects to each peer (the median of 3), for sites whose links are
    measured rather than declared.
  - This module never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  interfaces:
    description:
      - Interfaces to report. An interface that does not exist is reported with C(present=false).
      - By default every physical NIC, that is every entry of C(/sys/class/net) with a C(device)
        link, except C(lo), bridges and veth devices.
      - Names must be 1-15 characters of letters, digits, C(_), C(-), C(.) or C(@), not starting with
        C(-) or C(.); anything else fails the module before any command runs.
    type: list
    elements: str
  root:
    description:
      - Root of the file system that C(/proc) and C(/sys) are read from, for a mounted image or a
        fixture tree. ethtool and O(peers) always concern the running host.
    type: path
    default: /
  ethtool_path:
    description:
      - Path of ethtool. By default it is searched in C(PATH) (and the sbin directories); when it is not
        found the NICs are reported from sysfs alone.
    type: path
  peers:
    description:
      - Hosts to time a TCP connect to. Empty by default.
    type: list
    elements: dict
    suboptions:
      name:
        description: A label for the peer (a site, a host).
        type: str
        required: true
      host:
        description: Host name or address to connect to.
        type: str
        required: true
      port:
        description: TCP port that accepts connections on the peer.
        type: int
        default: 22
  peer_timeout:
    description:
      - Seconds to wait for each connect attempt.
    type: float
    default: 3
  stats_interval:
    description:
      - Seconds between the two C(ethtool -S) readings of the drop counters (one wait for all NICs, only
        when a NIC has such counters). V(0) reads once (C(delta) is null); at most 10.
    type: float
    default: 1
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
requirements:
  - ethtool on the target for driver, ring, offload, coalescing and channel information.
notes:
  - Speeds are in Mb/s, RTT in milliseconds, socket buffer sizes in bytes.
  - A veth or other virtual interface has no rings or coalescing; those are V(null) with the
    ethtool error as the reason.
seealso:
  - name: ethtool(8)
    description: The ethtool manual.
    link: https://man7.org/linux/man-pages/man8/ethtool.8.html
  - name: ip-sysctl
    description: Kernel documentation of the TCP sysctls.
    link: https://docs.kernel.org/networking/ip-sysctl.html
"""

EXAMPLES = r"""
- name: Read every physical NIC and the TCP settings
  gpufleet.tuning.nic_info:
  register: net

- name: Show NICs whose receive ring overflowed between the two ethtool -S readings
  ansible.builtin.debug:
    msg: "{{ item.name }}: {{ item.drops.ring }} in {{ item.drops.interval_s }} s (rx ring {{ item.rings.rx }})"
  loop: "{{ net.network.nics | selectattr('drops') | list }}"
  when: item.drops.ring.values() | map(attribute='delta') | reject('none') | select('gt', 0) | list | length > 0

- name: Two named interfaces, and the RTT to the other sites
  gpufleet.tuning.nic_info:
    interfaces: [ens1f0np0, ens1f1np1]
    peers:
      - {name: eu-west, host: gw.eu-west.example.net}
      - {name: ap-south, host: 203.0.113.10, port: 443}
    peer_timeout: 2
"""

RETURN = r"""
network:
  description: NICs, TCP stack, InfiniBand ports and peer RTTs.
  returned: always
  type: dict
  contains:
    nics:
      description:
        - One entry per interface. Every key is present; a value that cannot be read is V(null) and its
          name is a key of C(unsupported).
      type: list
      elements: dict
      contains:
        name: {description: Interface name., type: str, sample: ens1f0np0}
        present: {description: The interface exists., type: bool}
        driver: {description: Kernel driver (ethtool -i; sysfs when ethtool cannot tell)., type: str, sample: mlx5_core}
        driver_version: {description: Driver version (ethtool -i C(version))., type: str}
        firmware_version: {description: Firmware version., type: str, sample: "28.40.1000 (MT_0000000834)"}
        bus_info: {description: Bus address., type: str, sample: "0000:05:00.0"}
        speed_mbps: {description: Link speed in Mb/s (null when down or unknown)., type: int, sample: 200000}
        duplex: {description: full or half., type: str}
        mtu: {description: MTU in bytes., type: int, sample: 9000}
        operstate: {description: "Operational state (up, down, ...).", type: str}
        numa_node: {description: NUMA node of the device (null for none or -1)., type: int}
        physical: {description: "Backed by a device (not lo, a bridge or a veth).", type: bool}
        rings:
          description: Ring sizes C(rx), C(tx) and their maxima C(rx_max), C(tx_max).
          type: dict
        offloads:
          description: Every ethtool -k feature and sub-feature, V(true) when active.
          type: dict
          sample: {tcp-segmentation-offload: true, generic-receive-offload: true, large-receive-offload: false}
        offloads_fixed:
          description: Features the driver does not let change ("[fixed]").
          type: list
          elements: str
        coalescing:
          description: C(adaptive_rx), C(adaptive_tx), C(rx_usecs), C(tx_usecs), C(rx_frames), C(tx_frames).
          type: dict
        channels:
          description: C(rx), C(tx), C(other), C(combined) and their C(_max).
          type: dict
        drops:
          description:
            - Drop counters of C(ethtool -S) by kind - C(ring) (the receive ring overflowed), C(other) (drops
              elsewhere in the NIC, e.g. mlx5 C(rx_discards_phy), ice C(rx_dropped.nic)), C(allowance) (ENA - the
              instance exceeded its bandwidth/PPS/conntrack allowance, not a ring) - each counter as
              C({total, delta}) (C(delta) null with O(stats_interval=0) or after a counter reset), and
              C(interval_s), the measured time between the readings.
            - V(null) for drivers with no ring-overflow counter (virtio_net, gve, veth, ...), the reason under
              C(unsupported.drops).
          type: dict
          sample: {interval_s: 1.001, ring: {rx_out_of_buffer: {total: 1207310, delta: 3366}},
                   other: {rx_discards_phy: {total: 0, delta: 0}}, allowance: {}}
        source:
          description: V(ethtool-json) when any section came from C(ethtool --json), else V(ethtool-text);
            V(null) when ethtool gave nothing.
          type: str
        sources:
          description: Per section (driver, rings, offloads, coalescing, channels, drops), the format it came from.
          type: dict
        unsupported:
          description: Field or section name to the reason it is null.
          type: dict
    tcp:
      description: >-
        C(rmem), C(wmem) ([min, default, max] bytes), C(rmem_max), C(wmem_max), C(congestion_control),
        C(available_congestion_control), C(allowed_congestion_control), C(default_qdisc), C(mtu_probing),
        C(slow_start_after_idle), and C(unsupported) (sysctl to reason).
      type: dict
      sample:
        rmem: [4096, 131072, 6291456]
        wmem: [4096, 16384, 4194304]
        congestion_control: cubic
        default_qdisc: fq_codel
    infiniband:
      description: InfiniBand ports, C(device), C(port), C(state), C(phys_state), C(rate_gbps), C(link_layer).
      type: list
      elements: dict
      sample: [{device: mlx5_0, port: 1, state: ACTIVE, phys_state: LinkUp, rate_gbps: 400.0, link_layer: InfiniBand}]
    peers:
      description: >-
        Per peer C(name), C(host), C(port), C(rtt_ms) (median TCP connect time, null when not measured)
        and C(error) (why C(rtt_ms) is null). Empty without O(peers).
      type: list
      elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import ifname, links, nic, programs
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def _validate(module):
    params = module.params
    if not os.path.isdir(params["root"]):
        module.fail_json(msg="root: not a directory: %s" % params["root"])
    for name in params["interfaces"] or []:
        why = ifname.interface_name_error(name)
        if why is not None:
            module.fail_json(msg="interfaces: invalid interface name %r: %s; %s" % (name, why, ifname.IFNAME_RULE))
    path = params["ethtool_path"]
    if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        module.fail_json(
            msg="ethtool_path: not an executable file: %s (give the path of ethtool, "
            "or leave it unset to search PATH)" % path
        )
    if params["peer_timeout"] is None or not 0 < params["peer_timeout"] <= 60:
        module.fail_json(
            msg="peer_timeout: must be a number of seconds above 0 and at most 60, got %r" % params["peer_timeout"]
        )
    if params["stats_interval"] is None or not 0 <= params["stats_interval"] <= 10:
        module.fail_json(
            msg="stats_interval: must be a number of seconds from 0 to 10, got %r" % params["stats_interval"]
        )
    for i, peer in enumerate(params["peers"] or []):
        if not (peer.get("name") or "").strip():
            module.fail_json(msg="peers[%d].name: must not be empty" % i)
        if not (peer.get("host") or "").strip():
            module.fail_json(msg="peers[%d].host: must not be empty" % i)
        if not 1 <= int(peer.get("port")) <= 65535:
            module.fail_json(msg="peers[%d].port: must be 1-65535, got %r" % (i, peer.get("port")))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interfaces=dict(type="list", elements="str"),
            root=dict(type="path", default="/"),
            ethtool_path=dict(type="path"),
            peers=dict(
                type="list",
                elements="dict",
                options=dict(
                    name=dict(type="str", required=True),
                    host=dict(type="str", required=True),
                    port=dict(type="int", default=22),
                ),
            ),
            peer_timeout=dict(type="float", default=3.0),
            stats_interval=dict(type="float", default=1.0),
        ),
        supports_check_mode=True,
    )
    _validate(module)
    params = module.params

    ethtool = params["ethtool_path"] or module.get_bin_path("ethtool")
    missing = None if ethtool else "ethtool not found in PATH"

    run = programs.runner(module)

    network = nic.collect(
        HostFS(params["root"]),
        run,
        interfaces=params["interfaces"],
        ethtool=ethtool,
        ethtool_missing=missing,
        stats_interval=params["stats_interval"],
    )
    network["peers"] = links.measure_rtt(params["peers"] or [], timeout=params["peer_timeout"])
    module.exit_json(changed=False, network=network)


if __name__ == "__main__":
    main()
