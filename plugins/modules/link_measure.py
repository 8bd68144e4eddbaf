#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: link_measure
short_description: One end of a measured long-haul link - an iperf3 server or client, bounded in time
version_added: "0.2.0"
description:
  - Measures the throughput and TCP round-trip time of a link between two hosts with iperf3, one end per call, as
    C(gpufleet links) (C(playbooks/links.yml)) runs it for each declared site pair, one pair at a time.
  - O(state=server) starts C(timeout -k 2 SECONDS iperf3 -s -p PORT) detached, in a session of its own, and
    returns its PID once the port listens; the server can never outlive O(server_seconds).
  - O(state=client) runs C(iperf3 -c ADDRESS -p PORT -t SECONDS -O OMIT -P N -J) for each stream count in
    O(streams), each bounded by C(timeout), and returns each run's goodput (Mbit/s, the receiver's count), retransmits,
    the sender's congestion control and the TCP round-trip time the kernel measured (TCP_INFO, iperf3's C(min_rtt)).
  - O(state=stop) ends the server's process group (SIGTERM, then SIGKILL) by the PID O(state=server) returned,
    and only when that PID is still an iperf3 server on O(port) leading its own process group.
  - Every state also returns the host's TCP settings (C(tcp)) - C(tcp_rmem), C(tcp_wmem) and
    C(tcp_congestion_control) of the network namespace it runs in - from which the window, and so the bandwidth a
    stream can reach over the measured RTT, is bounded.
  - It changes no setting of the host; the server it starts is transient (stopped by O(state=stop) or its bound).
author:
  - gpufleet contributors (@gpufleet)
options:
  state:
    description: Which end, or stopping the server.
    type: str
    choices: [server, client, stop]
    required: true
  port:
    description: TCP port of the iperf3 server (1024 to 65535).
    type: int
    default: 5201
  server_seconds:
    description: O(state=server) - the server's bound in seconds (10 to 900); it is killed then, measured or not.
    type: int
    default: 120
  address:
    description: O(state=client) - the server host's address, as the inventory gives it. Required with client.
    type: str
  seconds:
    description: O(state=client) - seconds each client run measures, after O(omit) (1 to 60).
    type: int
    default: 10
  omit:
    description: O(state=client) - seconds of TCP slow start left out of each run's result (0 to 10).
    type: int
    default: 2
  streams:
    description: O(state=client) - one run per entry, with that many parallel TCP streams (1 to 64 each).
    type: list
    elements: int
    default: [1, 4]
  pid:
    description: O(state=stop) - the PID O(state=server) returned. Required with stop.
    type: int
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is started, run or stopped; the result says what would run (C(argv)).
  diff_mode:
    support: none
  platform:
    platforms: posix
requirements:
  - iperf3 and coreutils C(timeout) on both hosts.
notes:
  - iperf3 missing on a host fails the task with a message saying how to install it.
  - The client reaches only the address it is given; C(gpufleet links) gives the server host's inventory address
    (C(gpufleet_link_address), else C(ansible_host), else its inventory name).
seealso:
  - name: iperf3
    description: iperf3's options and its JSON output.
    link: https://software.es.net/iperf/invoking.html
  - name: ESnet fasterdata - network tuning and testing
    description: Host tuning, and why a long path needs windows of a bandwidth-delay product.
    link: https://fasterdata.es.net/host-tuning/linux/
"""

EXAMPLES = r"""
- name: Start the iperf3 server on the receiving host
  gpufleet.tuning.link_measure:
    state: server
    port: 5201
    server_seconds: 60
  register: server

- name: Measure from the sending host, 1 and 4 streams, 5 s each after 2 s of slow start
  gpufleet.tuning.link_measure:
    state: client
    address: 198.51.100.7
    port: 5201
    seconds: 5
    streams: [1, 4]
  register: measured

- name: Stop the server
  gpufleet.tuning.link_measure:
    state: stop
    port: 5201
    pid: "{{ server.pid }}"
"""

RETURN = r"""
state:
  description: The state the module ran in.
  returned: always
  type: str
  sample: client
tcp:
  description: This host's TCP settings (tcp_rmem and tcp_wmem as [min, default, max] in bytes, null if unreadable).
  returned: always
  type: dict
  sample: {"rmem": [4096, 131072, 6291456], "wmem": [4096, 16384, 4194304], "congestion_control": "cubic"}
pid:
  description: The server's process (group) id; null in check mode.
  returned: state is server or stop
  type: int
  sample: 41234
stopped:
  description: Whether the server was running and is now gone.
  returned: state is stop
  type: bool
runs:
  description:
    - One entry per O(streams) entry - C(mbps) (goodput), C(sent_mbps), C(retransmits), C(congestion_control),
      C(min_rtt_ms), C(mean_rtt_ms), C(streams), C(requested_streams), C(rc) - or C(error) when the run failed.
  returned: state is client
  type: list
  elements: dict
  sample: [{"requested_streams": 1, "streams": 1, "mbps": 141.3, "min_rtt_ms": 180.4, "congestion_control": "cubic"}]
argv:
  description: The server's command line.
  returned: state is server
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import link_measure


def check_params(module):
    """Ranges and the options each state needs: a failure names the option and what it accepts."""
    p = module.params
    bounds = {"port": (1024, 65535), "server_seconds": (10, 900), "seconds": (1, 60), "omit": (0, 10)}
    for name, (low, high) in bounds.items():
        if not low <= p[name] <= high:
            module.fail_json(msg="%s: must be between %d and %d, got %d" % (name, low, high, p[name]))
    if not p["streams"] or any(not 1 <= n <= 64 for n in p["streams"]):
        module.fail_json(msg="streams: one or more stream counts, each between 1 and 64, got %s" % p["streams"])
    if p["state"] == "client" and not p["address"]:
        module.fail_json(msg="address: required with state=client (the server host's address)")
    if p["state"] == "stop" and not p["pid"]:
        module.fail_json(msg="pid: required with state=stop (the pid state=server returned)")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=list(link_measure.STATES)),
            port=dict(type="int", default=5201),
            server_seconds=dict(type="int", default=120),
            address=dict(type="str"),
            seconds=dict(type="int", default=10),
            omit=dict(type="int", default=2),
            streams=dict(type="list", elements="int", default=[1, 4]),
            pid=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    check_params(module)
    iperf3 = None
    if module.params["state"] != "stop":
        iperf3 = module.get_bin_path("iperf3")
        if not iperf3:
            module.fail_json(msg=link_measure.MISSING, iperf3_missing=True)
    timeout_bin = module.get_bin_path("timeout", required=True)
    result = link_measure.LinkEnd(module, iperf3, timeout_bin).run()
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
