"""module_utils/nic_settings.py: the udev rule that keeps a NIC's settings (hosts without .link files) matches the
name the NIC has after renaming (issue 28, point 4). The old rule, 60-gpufleet-<nic>.rules, matched KERNEL==, the
kernel's name (eth0), so a NIC that 80-net-setup-link.rules renames (ens1f0) never matched. udev(7): NAME "can be
used once the NAME key has been set in one of the preceding rules": ours sorts after 80-net-setup-link.rules; a NIC
nothing renamed has NAME=="" and its kernel name. An upgraded host gets the old rule of ours removed (not two)."""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.nic_settings import persist_plan, udev_rule

AFTER = {"mtu": 9000, "offloads": {"generic-receive-offload": True}}
OLD = (
    "# Managed by gpufleet (gpufleet.tuning.nic_settings)\n"
    'ACTION=="add", SUBSYSTEM=="net", KERNEL=="ens1f0", ATTR{mtu}="9000"\n'
)


def _applies(rule, kernel, name):
    """Which of the rule's assignments a udev 'add' event of a net device applies: a small reading of the rule's
    GOTO/LABEL lines, enough for these rules (each match key ANDed, GOTO taken when all match)."""
    env = {"ACTION": "add", "SUBSYSTEM": "net", "KERNEL": kernel, "NAME": name}
    lines = [line for line in rule.splitlines() if line and not line.startswith("#")]
    labels = {line.split('"')[1]: i for i, line in enumerate(lines) if line.startswith("LABEL=")}
    done, i = [], 0
    while i < len(lines):
        keys = [k.strip() for k in lines[i].split(", ")]
        matches = all(
            (env[k.split("==")[0]] == k.split('"')[1]) if "==" in k else (env[k.split("!=")[0]] != k.split('"')[1])
            for k in keys
            if "==" in k or "!=" in k
        )
        goto = [k for k in keys if k.startswith("GOTO=")]
        if matches and goto:
            i = labels[goto[0].split('"')[1]]
            continue
        if matches and not lines[i].startswith("LABEL="):
            done += keys
        i += 1
    return done


def test_renamed_nic_is_matched_on_its_new_name_not_its_kernel_name():
    rule = udev_rule("ens1f0", AFTER, "/usr/sbin/ethtool", "/usr/sbin/ip")
    assert 'NAME=="ens1f0", GOTO="gpufleet_ens1f0"' in rule and 'KERNEL=="ens1f0"' in rule
    # eth0, renamed to ens1f0 by 80-net-setup-link.rules: the settings apply (the old rule missed it).
    assert _applies(rule, "eth0", "ens1f0") == ['ATTR{mtu}="9000"', 'RUN+="/usr/sbin/ethtool -K ens1f0 gro on"']
    # a NIC that kept its kernel name
    assert _applies(rule, "ens1f0", "") == ['ATTR{mtu}="9000"', 'RUN+="/usr/sbin/ethtool -K ens1f0 gro on"']
    # another NIC: renamed away from ens1f0's kernel name, or another name altogether
    assert _applies(rule, "ens1f0", "ens2") == [] and _applies(rule, "eth1", "ens1f1") == []
    assert _applies(OLD, "eth0", "ens1f0") == []  # what the old rule did with the renamed NIC


class Module:
    """The module parameters persist_plan reads (the state, as AnsibleModule would hold it)."""

    def __init__(self, udev_dir):
        self.params = {"persist": True, "persist_method": "udev", "udev_dir": udev_dir}


def test_rule_file_sorts_after_the_renaming_rule_and_replaces_ours_of_older_releases(tmp_path):
    udev = tmp_path / "etc/udev/rules.d"
    udev.mkdir(parents=True)
    fs = HostFS(str(tmp_path))
    plan, _warnings = persist_plan(Module("/etc/udev/rules.d"), fs, "ens1f0", {}, AFTER, None, None, None)
    assert plan["path"] == "/etc/udev/rules.d/90-gpufleet-ens1f0.rules" and plan["remove"] is None
    assert plan["path"].rsplit("/", 1)[1] > "80-net-setup-link.rules"

    (udev / "60-gpufleet-ens1f0.rules").write_text(OLD)
    plan, _warnings = persist_plan(Module("/etc/udev/rules.d"), fs, "ens1f0", {}, AFTER, None, None, None)
    assert plan["remove"] == "/etc/udev/rules.d/60-gpufleet-ens1f0.rules" and plan["changed"] is True

    (udev / "60-gpufleet-ens1f0.rules").write_text('ACTION=="add", KERNEL=="ens1f0", RUN+="/bin/true"\n')
    plan, _warnings = persist_plan(Module("/etc/udev/rules.d"), fs, "ens1f0", {}, AFTER, None, None, None)
    assert plan["remove"] is None  # not ours: left alone
