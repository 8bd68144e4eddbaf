"""The catalog's fix claims hold: every rule whose fix names a role and tag has a task carrying that tag, a
`<role>_<rule>_enabled` toggle in the role's defaults and argument spec that gates something, and a test that turns
the finding to pass in a re-audit (or a stated reason why the lab cannot re-audit it, with the test that proves the
change instead). A rule that claims a fix nobody applies fails here (issue 12: GPU-PWR-003 named a tag no task had)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

REPO = Path(__file__).resolve().parents[2]
FIXABLE = [r for r in rules.RULES if r.fix["role"]]

# rule id -> tests (path::function) where the role's fix is applied and a re-audit finds the rule passing.
REAUDIT_PROOFS = {
    "HOST-MEM-002": [
        "tests/integration/test_host_tuning_role.py::test_host_tuning_fixes_its_rules",
        "tests/integration/test_demo_podman.py::test_remediation_leaves_only_what_it_cannot_fix",
    ],
    "HOST-MEM-003": ["tests/integration/test_host_tuning_role.py::test_host_tuning_fixes_its_rules"],
    "HOST-MEM-004": ["tests/integration/test_host_tuning_role.py::test_host_tuning_fixes_its_rules"],
    "HOST-MEM-005": ["tests/integration/test_host_tuning_role.py::test_host_tuning_fixes_its_rules"],
    "HOST-CPU-001": [
        "tests/integration/test_host_tuning_role.py::test_host_tuning_fixes_its_rules",
        "tests/integration/test_demo_podman.py::test_remediation_leaves_only_what_it_cannot_fix",
    ],
    "HOST-CPU-003": ["tests/integration/test_host_tuning_role.py::test_host_tuning_fixes_its_rules"],
    # irqbalance wanted but IRQs pinned by hand: the role leaves the service alone and the re-audit passes.
    "HOST-CPU-004": [
        "tests/integration/test_host_tuning_role.py::test_irqbalance_is_not_started_over_irqs_pinned_by_hand"
    ],
    "NET-MTU-001": [
        "tests/integration/test_network_tuning_role.py::test_network_tuning_in_namespace",
        "tests/integration/test_network_tuning_safety.py::test_only_the_named_data_nic_changes",
    ],
    "NET-OFFL-001": [
        "tests/integration/test_network_tuning_role.py::test_network_tuning_in_namespace",
        "tests/integration/test_network_tuning_safety.py::test_only_the_named_data_nic_changes",
    ],
    "NET-TCP-001": [
        "tests/integration/test_network_tuning_role.py::test_network_tuning_in_namespace",
        "tests/integration/test_network_tuning_safety.py::test_example_inventory_layers",
        "tests/integration/test_cli_remediate_policy.py::test_remediate_example_layout_fixes_tcp_buffers",
    ],
    "NET-TCP-002": [
        "tests/integration/test_network_tuning_role.py::test_network_tuning_in_namespace",
        "tests/integration/test_network_tuning_safety.py::test_per_route_congestion_control",
    ],
    "NET-TCP-003": ["tests/integration/test_network_tuning_role.py::test_network_tuning_in_namespace"],
    "NET-TCP-004": ["tests/integration/test_network_tuning_role.py::test_network_tuning_in_namespace"],
    "GPU-PWR-001": [
        "tests/integration/test_gpu_runtime_role.py::test_fix_idempotence_and_reboot",
        "tests/integration/test_demo_podman.py::test_remediation_leaves_only_what_it_cannot_fix",
    ],
    "GPU-PWR-002": [
        "tests/integration/test_gpu_runtime_role.py::test_fix_idempotence_and_reboot",
        "tests/integration/test_gpu_runtime_role.py::test_declared_cap_is_set_exactly",
        "tests/integration/test_demo_podman.py::test_remediation_leaves_only_what_it_cannot_fix",
    ],
    "GPU-ECC-002": ["tests/integration/test_demo_podman.py::test_remediation_leaves_only_what_it_cannot_fix"],
}

# rule id -> (why the lab cannot re-audit it, tests that prove the change the fix makes).
NO_REAUDIT = {
    "NET-RING-001": (
        "veth has no rings (ethtool -G: not supported); ring changes are opt-in and proven on recorded "
        "ethtool fixtures",
        ["tests/integration/test_nic_settings.py"],
    ),
    "GPU-ECC-001": (
        "the ECC mode changes only after a reboot; the pending mode is set and survives the simulated reboot",
        ["molecule/remediate/tests/test_remediate.py", "tests/integration/test_gpu_runtime_role.py"],
    ),
    "SW-DRV-001": (
        "a driver change takes effect only when the new kernel module is loaded (reboot); the packages, pin "
        "and hold are proven in the apt lab",
        ["molecule/nvidia_driver/tests/test_nvidia_driver.py"],
    ),
    "SW-CUDA-001": (
        "the driver branch decision is proven in the apt lab; the toolkit check needs the new module",
        ["molecule/nvidia_driver/tests/test_nvidia_driver.py"],
    ),
    "SW-KMOD-001": ("the kernel module is loaded by a reboot", ["molecule/nvidia_driver/tests/test_nvidia_driver.py"]),
    "SW-FM-001": (
        "the fabric manager matches the installed driver package; proven in the apt lab",
        ["molecule/nvidia_driver/tests/test_nvidia_driver.py", "tests/integration/test_nvidia_driver_repo.py"],
    ),
}


def _tags(node, out):
    if isinstance(node, dict):
        tags = node.get("tags")
        if isinstance(tags, str):
            out.update(t.strip() for t in tags.split(","))
        elif isinstance(tags, list):
            out.update(str(t) for t in tags)
        for value in node.values():
            _tags(value, out)
    elif isinstance(node, list):
        for value in node:
            _tags(value, out)
    return out


def _role_tags(role):
    tags = set()
    for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
        _tags(yaml.safe_load(path.read_text()), tags)
    return tags


def _toggle(rule):
    return f"{rule.fix['role']}_{rule.id.lower().replace('-', '_')}_enabled"


@pytest.mark.parametrize("rule", FIXABLE, ids=lambda r: r.id)
def test_fix_tag_is_carried_by_a_task(rule):
    assert rule.fix["tag"] == rule.id
    assert (REPO / "roles" / rule.fix["role"]).is_dir(), f"{rule.id} names a role that does not exist"
    assert rule.id in _role_tags(rule.fix["role"]), f"no task of role {rule.fix['role']} carries tag {rule.id}"


@pytest.mark.parametrize("rule", FIXABLE, ids=lambda r: r.id)
def test_fix_has_a_toggle_in_defaults_and_argument_spec_that_gates_something(rule):
    role = REPO / "roles" / rule.fix["role"]
    toggle = _toggle(rule)
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    assert toggle in defaults, f"{rule.id}: {toggle} missing from defaults/main.yml"
    assert isinstance(defaults[toggle], bool)
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert toggle in spec and spec[toggle]["type"] == "bool", f"{rule.id}: {toggle} not in meta/argument_specs.yml"
    assert spec[toggle].get("default") == defaults[toggle], f"{toggle}: defaults and argument spec disagree"
    used = [p for d in ("tasks", "vars", "templates") for p in (role / d).glob("*") if toggle in p.read_text()]
    assert used, f"{toggle} is declared but no task, var or template reads it"


@pytest.mark.parametrize("rule", FIXABLE, ids=lambda r: r.id)
def test_fix_is_proven(rule):
    assert (rule.id in REAUDIT_PROOFS) != (rule.id in NO_REAUDIT), f"{rule.id}: list it in exactly one table"
    refs = REAUDIT_PROOFS.get(rule.id) or NO_REAUDIT[rule.id][1]
    for ref in refs:
        path, _, func = ref.partition("::")
        text = (REPO / path).read_text()
        if func:
            assert re.search(rf"^def {re.escape(func)}\(", text, re.M), f"{rule.id}: {ref} is not a test"


def test_tables_name_only_fixable_rules():
    fixable = {r.id for r in FIXABLE}
    assert set(REAUDIT_PROOFS) | set(NO_REAUDIT) == fixable


def test_readme_says_what_each_fix_changes():
    text = (REPO / "README.md").read_text()
    section = text.split("## What gpufleet changes, and what it never does", 1)[1].split("\n## ", 1)[0]
    rows = {re.match(r"\| `(\w+)`", line).group(1) for line in section.splitlines() if line.startswith("| `")}
    for rule in FIXABLE:
        assert rule.fix["role"] in rows, f"no row for role {rule.fix['role']}"
        assert rule.id in section, f"{rule.id} is missing from the README's 'What gpufleet changes' table"
