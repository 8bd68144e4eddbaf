#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_settings
short_description: Set a NIC's MTU, offloads, rings, coalescing and channels, and keep them across reboots
version_added: "0.1.0"
description:
  - Reads the NIC like M(gpufleet.tuning.nic_info), changes only what differs with C(ip link) and C(ethtool),
    and writes the settings where the host manages links so they survive a reboot.
  - Persistence, by C(persist_method=auto), in this order - NetworkManager (C(nmcli connection modify)) when it
    manages the device; a systemd C(.link) file when systemd-udevd runs (it applies .link files at boot, with or
    without systemd-networkd); otherwise a udev rule that replays the commands.
  - A value the driver does not support (rings or coalescing on veth, a fixed feature) is reported under
    C(unsupported), not failed, unless C(strict).
  - B(Uplink guard.) The module refuses (fails, nothing changed, not even a file) to change a NIC that is on the
    path that reaches the host, unless O(allow_uplink=true). A NIC is an uplink when it, or a bond, bridge, team,
    VLAN or macvlan stacked on it (sysfs C(upper_*) links and C(master), recursively), carries an IPv4 or IPv6
    default route (C(/proc/net/route), C(/proc/net/ipv6_route), and C(ip -j route show table all) for
    policy-routing tables; reject routes do not count), or has the local address of the current SSH connection
    (the third field of C(SSH_CONNECTION), from the module's environment or, because C(become) resets it, from the
    nearest ancestor process that has it). A bond member under a bond that carries the default route is an uplink.
    The refusal happens in check mode too, so check mode predicts the failure. RV(uplink) is returned always.
    When the NIC is already as asked there is nothing to refuse and the module returns C(ok).
  - B(.link files never rename NICs.) The file matches the NIC on C(PermanentMACAddress=) (the burnt-in MAC from
    C(ethtool -P); the current MAC in sysfs C(address) is shared by all members of a bond) plus C(Driver=); when
    the NIC has no permanent MAC (veth, many VFs), or systemd is older than v245 (no C(PermanentMACAddress=)), on
    C(OriginalName=) plus C(Driver=), with a warning. It never chooses a name - no C(Name=) or C(NamePolicy=) of
    its own. Because systemd-udevd applies only the first matching C(.link) file (systemd.link(5)), our file takes
    the place of the one that names the NIC today (usually C(99-default.link) with C(NamePolicy=)); its C([Link])
    settings other than ours are carried over unchanged (RV(persisted.replaces)) - without them the NIC would get
    its kernel name (C(eth0)) at the next boot.
  - The file is C(90-gpufleet-<name>.link), sorting after files an administrator, netplan (C(10-netplan-*.link))
    or cloud-init wrote, and before C(99-default.link). An earlier file that matches the same NIC makes ours a
    no-op at boot; the module warns and returns it as RV(link_shadowed_by). Our own file of older releases,
    C(60-gpufleet-<name>.link) (matched on the current MAC and set C(Name=)), is removed.
  - B(udev rule.) C(90-gpufleet-<name>.rules) sorts after C(80-net-setup-link.rules), which renames NICs, and
    matches C(NAME==) (the name the NIC was given, udev(7)), or C(KERNEL==) when nothing renamed it. Our rule of
    older releases, C(60-gpufleet-<name>.rules) (C(KERNEL==) only, which a renamed NIC never matched), is removed.
author:
  - gpufleet contributors (@gpufleet)
options:
  name:
    description: Interface name (1-15 characters of letters, digits, C(_ . @ -)).
    type: str
    required: true
  mtu:
    description: MTU in bytes (68-65535).
    type: int
  offloads:
    description: Feature name (as C(ethtool -k) prints it, or a short alias such as C(gro), C(tso)) to on/off.
    type: dict
  rings:
    description: C(rx) and C(tx) ring sizes, numbers or C(max).
    type: dict
  coalescing:
    description: C(adaptive_rx), C(adaptive_tx) (booleans), C(rx_usecs), C(tx_usecs) (numbers).
    type: dict
  channels:
    description: C(combined), C(rx), C(tx) channel counts, numbers or C(max).
    type: dict
  persist:
    description: Keep the settings across reboots.
    type: bool
    default: true
  persist_method:
    description: How to keep them; C(auto) detects what manages the link.
    type: str
    choices: [auto, networkmanager, link, udev, none]
    default: auto
  link_dir:
    description: Directory for the systemd C(.link) file.
    type: path
    default: /etc/systemd/network
  link_search_dirs:
    description:
      - Directories systemd-udevd reads C(.link) files from, highest priority first (a file name in an earlier
        directory hides the same name in later ones). They are read to find an earlier file that shadows ours and
        the file ours takes the place of. O(link_dir) is always searched first.
    type: list
    elements: path
    default: [/etc/systemd/network, /run/systemd/network, /usr/local/lib/systemd/network, /usr/lib/systemd/network,
              /lib/systemd/network]
  allow_uplink:
    description:
      - Change the NIC even when it carries a default route or the current SSH connection (directly or through a
        bond, bridge or VLAN above it). Without it such a NIC is refused. Set it only for a NIC named on purpose.
    type: bool
    default: false
  udev_dir:
    description: Directory for the udev rule.
    type: path
    default: /etc/udev/rules.d
  strict:
    description: Fail when the NIC does not support a requested setting.
    type: bool
    default: false
  ethtool_path:
    description: Path of ethtool; searched in C(PATH) by default.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
"""

EXAMPLES = r"""
- name: Jumbo frames, full rings and offloads on the fabric NIC
  gpufleet.tuning.nic_settings:
    name: ens1f0np0
    mtu: 9000
    rings: {rx: max, tx: max}
    offloads: {gro: true, tso: true, gso: true}
  become: true

- name: The management NIC too, knowing it carries the default route
  gpufleet.tuning.nic_settings:
    name: eno1
    offloads: {gro: true}
    allow_uplink: true
  become: true
"""

RETURN = r"""
before:
  description: Current values of the requested settings.
  returned: always
  type: dict
after:
  description: Values after the run (or that a run would set in check mode).
  returned: always
  type: dict
commands:
  description: Commands run (or that would run in check mode).
  returned: always
  type: list
unsupported:
  description: Settings the NIC cannot change here, with the reason.
  returned: always
  type: dict
persisted:
  description: How the settings are kept across reboots.
  returned: always
  type: dict
  contains:
    method:
      description: networkmanager, link, udev or none.
      type: str
    path:
      description: The file written (or that would be), null when none.
      type: str
    changed:
      description: Whether the file changed (or would), including a removed file.
      type: bool
    match:
      description:
        - For a C(.link) file, what it matches the NIC on, C(PermanentMACAddress) or C(OriginalName) (with
          C(Driver=) in both cases); null otherwise.
      type: str
    replaces:
      description:
        - The C(.link) file that applies to the NIC today and whose other C([Link]) settings (naming, with its
          drop-ins) ours carries over; null when none matches.
      type: str
    removed:
      description: Files removed (our C(60-gpufleet-<name>.link) of older releases).
      type: list
      elements: str
uplink:
  description: Whether the NIC is on the path that reaches the host.
  returned: always (also when the module refuses the change)
  type: dict
  sample: {default_route: true, connection: false, via: bond0}
  contains:
    default_route:
      description: The NIC, or a device stacked on it, carries an IPv4 or IPv6 default route.
      type: bool
    connection:
      description:
        - The NIC, or a device stacked on it, has the local address of the current SSH connection; null when
          that cannot be told (no C(ip) to read IPv4 addresses).
      type: bool
    via:
      description:
        - The bond, bridge or VLAN above the NIC that carries it; null when the NIC itself does, or when it is
          not an uplink.
      type: str
would_run:
  description: When the uplink guard refuses the change, the commands that would have run (none did).
  returned: on refusal
  type: list
  elements: str
link_shadowed_by:
  description: An earlier-sorting C(.link) file that matches the NIC, so that ours changes nothing at boot; null
    when none (or when no C(.link) file is written).
  returned: always
  type: str
  sample: /run/systemd/network/10-netplan-eth0.link
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import link_files, nic_settings, rollback


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            mtu=dict(type="int"),
            offloads=dict(type="dict"),
            rings=dict(type="dict"),
            coalescing=dict(type="dict"),
            channels=dict(type="dict"),
            persist=dict(type="bool", default=True),
            persist_method=dict(type="str", default="auto", choices=["auto", "networkmanager", "link", "udev", "none"]),
            link_dir=dict(type="path", default="/etc/systemd/network"),
            link_search_dirs=dict(type="list", elements="path", default=list(link_files.LINK_DIRS)),
            udev_dir=dict(type="path", default="/etc/udev/rules.d"),
            strict=dict(type="bool", default=False),
            allow_uplink=dict(type="bool", default=False),
            ethtool_path=dict(type="path"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    nic_settings.validate(module)
    rollback.check_params(module)
    job = nic_settings.NicChange(module)
    job.plan()
    job.apply()
    module.exit_json(**job.result())


if __name__ == "__main__":
    main()
