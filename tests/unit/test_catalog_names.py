"""Names that say what they hold (issue 27): a rule's title names the policy key behind a threshold instead of the
default's number, and an area holds its rules (rules/<area>.py holds that area's rules, ECC and PCIe are health)."""

from __future__ import annotations

import importlib
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import AREAS, validate

KEY = re.compile(r"\b([a-z_]+)\.([a-z_]+)\b")


def test_no_title_holds_a_number_a_policy_can_change():
    """A title reads right for any policy: no digit in it (NET-TCP-001 said "4x" whatever network.buffer_factor was)."""
    numbered = {r.id: r.title for r in rules.RULES if re.search(r"\d", r.title)}
    assert not numbered, numbered


def test_a_title_names_the_policy_key_of_its_threshold():
    """NET-TCP-001 names network.buffer_factor; every policy key a title names is one of its rule's policy keys."""
    assert "network.buffer_factor" in rules.BY_ID["NET-TCP-001"].title
    policy = validate({})
    for rule in rules.RULES:
        for section, key in KEY.findall(rule.title):
            if not isinstance(policy.get(section), dict):  # a sysctl (vm.swappiness), not a policy key
                continue
            assert key in policy[section], (rule.id, f"{section}.{key} is not a policy key")
            assert f"{section}.{key}" in rule.policy_keys, (rule.id, f"{section}.{key} is not among its policy keys")


def test_each_area_file_holds_its_area_and_ecc_and_pcie_are_health():
    for area in AREAS:
        module = importlib.import_module(f"ansible_collections.gpufleet.tuning.plugins.module_utils.rules.{area}")
        assert {r.area for r in module.RULES} == {area}, area
    moved = [r for r in rules.RULES if r.id.startswith(("GPU-ECC-", "GPU-PCI-"))]
    assert {r.id for r in moved} >= {"GPU-ECC-001", "GPU-ECC-002", "GPU-PCI-001"}
    assert {r.id: r.area for r in moved} == {r.id: "health" for r in moved}
