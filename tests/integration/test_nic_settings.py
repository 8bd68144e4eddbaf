"""nic_settings on a real veth pair inside a network namespace we create: MTU and offloads change in the
namespace only, what veth cannot do (rings) is reported, persistence files are written, the second run changes
nothing, check mode changes nothing, bad input fails clearly."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
TASK = "Set NIC"

PLAY = """
- name: nic_settings
  hosts: all
  gather_facts: false
  tasks:
    - name: Set NIC
      gpufleet.tuning.nic_settings:
        name: "{{ nic }}"
        mtu: "{{ s.mtu | default(omit) }}"
        offloads: "{{ s.offloads | default(omit) }}"
        rings: "{{ s.rings | default(omit) }}"
        channels: "{{ s.channels | default(omit) }}"
        persist_method: "{{ s.persist_method | default('udev') }}"
        link_dir: "{{ out }}/network"
        udev_dir: "{{ out }}/udev"
        strict: "{{ s.strict | default(false) }}"
      check_mode: "{{ check | default(false) }}"
      diff: true
"""


@pytest.fixture
def netns(tmp_path):
    if not shutil.which("ip") or not shutil.which("ethtool"):
        pytest.skip("iproute2 and ethtool are needed (make test installs them)")
    name = "gpfn-" + uuid.uuid4().hex[:8]
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("ip netns add is not permitted here")
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "gv0", "type", "veth", "peer", "name", "gv1"], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", "gv0", "up"], check=True)
        subprocess.run(
            ["ip", "netns", "exec", name, "ethtool", "-K", "gv0", "gro", "off"], check=True, capture_output=True
        )
        wrapper = tmp_path / "python-in-ns"
        wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {name} {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        yield name, wrapper
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def _run(tmp: Path, wrapper: Path, settings: dict, nic="gv0", check=False):
    inv = {
        "all": {
            "hosts": {
                "ns": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": str(wrapper),
                    "nic": nic,
                    "s": settings,
                    "out": str(tmp / "out"),
                }
            }
        }
    }
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp / "play.yml").write_text(PLAY)
    return run_playbook(
        str(tmp / "play.yml"), str(tmp / "hosts.yml"), extravars={"check": check} if check else {}
    ).hosts["ns"]


def _ns(ns, *argv):
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True).stdout


WANT = {"mtu": 9000, "offloads": {"gro": True, "tcp-segmentation-offload": True}, "rings": {"rx": "max"}}


def test_veth_in_namespace(tmp_path, netns):
    ns, wrapper = netns
    check = _run(tmp_path, wrapper, WANT, check=True)
    assert check.status == "ok", check.message
    assert check.results[TASK]["changed"] is True
    assert "mtu 1500" in _ns(ns, "ip", "link", "show", "gv0")  # check mode changed nothing
    assert not (tmp_path / "out").exists()

    first = _run(tmp_path, wrapper, WANT)
    res = first.results[TASK]
    assert first.status == "ok" and res["changed"] is True
    assert "mtu 9000" in _ns(ns, "ip", "link", "show", "gv0")
    assert "generic-receive-offload: on" in _ns(ns, "ethtool", "-k", "gv0")
    assert "rings" in res["unsupported"]  # veth has no ring parameters
    assert res["commands"][0].endswith("link set dev gv0 mtu 9000")
    rule = (tmp_path / "out/udev/60-gpufleet-gv0.rules").read_text()
    assert 'KERNEL=="gv0", ATTR{mtu}="9000"' in rule and "-K gv0" in rule

    second = _run(tmp_path, wrapper, WANT)
    assert second.results[TASK]["changed"] is False and second.results[TASK]["commands"] == []


def test_link_file_keeps_the_name(tmp_path, netns):
    ns, wrapper = netns
    res = _run(tmp_path, wrapper, {"mtu": 4000, "persist_method": "link"})
    assert res.status == "ok", res.message
    text = (tmp_path / "out/network/60-gpufleet-gv0.link").read_text()
    assert "[Match]\nMACAddress=" in text and "Name=gv0" in text and "MTUBytes=4000" in text


@pytest.mark.parametrize(
    "nic, settings, message",
    [
        ("gv0;reboot", {"mtu": 9000}, "name: invalid interface name 'gv0;reboot'"),
        ("gv0", {"mtu": 70000}, "mtu: 70000 is outside 68-65535"),
        ("gv0", {"rings": {"rx": -1}}, "rings.rx: must be a positive number or 'max'"),
        ("gv0", {"offloads": {"warp-drive": True}}, "offloads.warp-drive: gv0 has no such feature"),
        ("gv0", {"rings": {"rx": "max"}, "strict": True}, "strict: gv0 does not support rings"),
        ("nosuch0", {"mtu": 9000}, "name: no such interface: nosuch0"),
    ],
)
def test_bad_input(tmp_path, netns, nic, settings, message):
    _, wrapper = netns
    res = _run(tmp_path, wrapper, settings, nic=nic)
    assert res.status == "failed"
    assert message in res.message and "Traceback" not in res.message
