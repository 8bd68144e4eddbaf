"""`gpufleet policy --host NAME`: one host's effective policy and the layer that set each value.

The layers are the ones the playbooks hand to every module that judges (plugin_utils/policy_layers.py: policy.LAYERS,
with the policy file of gpufleet_policy_file before the last), read from the inventory as Ansible reads a host's
variables and templated; ``--policy FILE`` takes the last layer's place, as the CLI's runs pass it. The merged policy
is validated by the audit's code (policy.validate): what this prints is what the audit, the watch, the probe and
remediate judge that host by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpufleet import paths
from gpufleet.exits import UsageError

DEFAULT = "default"


def _policy():
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy

    return policy


def read_layers(inventory: list[str], host: str, policy_file: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``[(layer name, mapping)]`` of ``host``'s policy layers, first to last, as the playbooks hand them over;
    with ``policy_file`` (--policy) its content is the last layer, named ``--policy FILE``. UsageError when the host
    is not in the inventory or a layer cannot be read."""
    from gpufleet import preflight

    paths.import_collection()
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import policy_layers
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import plain

    for source in inventory:
        if not Path(source).exists():
            raise UsageError(f"inventory not found: {source}")
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=list(inventory))
    found = inv.get_host(host)
    if found is None:
        raise UsageError(f"no host {host} in inventory {', '.join(inventory)} (the name as the inventory spells it)")
    hostvars = VariableManager(loader=loader, inventory=inv).get_vars(host=found, include_hostvars=False)
    templar = Templar(loader=loader, variables=hostvars)
    values: dict[str, Any] = {}
    for name in (*_policy().LAYERS, policy_layers.FILE_VARIABLE):
        if name not in hostvars:
            continue
        try:
            values[name] = plain(templar.template(hostvars[name]))
        except Exception as exc:  # an undefined variable or a template error in the inventory
            raise UsageError(f"{host}: {name}: {exc}") from exc
        if name != policy_layers.FILE_VARIABLE and values[name] is not None and not isinstance(values[name], dict):
            raise UsageError(f"{host}: {name} must be a mapping, got {type(values[name]).__name__}")
    try:
        named = policy_layers.named_layers(values)
    except policy_layers.PolicyFileError as exc:
        raise UsageError(f"{host}: {exc}") from exc
    if policy_file:
        named[-1] = (f"--policy {policy_file}", preflight.load_policy_file(policy_file))
    return named


def explain(layers: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The merged, validated policy of ``layers`` and, for every policy key (policy.documented's paths), the layers
    that set it, first to last (``[]``: the default). A key whose value is a mapping (rules, sites, network.mtu) is
    merged from each; any other is the last one's. UsageError names the layer and the key of an invalid policy."""
    policy = _policy()
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    expanded = []
    problems = []  # every invalid layer, each with every problem
    for name, layer in layers:
        try:
            policy.validate(layer, known_rules=rules.BY_ID)
            expanded.append((name, policy.expand_dotted(layer)))
        except policy.PolicyError as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise UsageError("\n".join(problems))
    try:
        merged = policy.validate(policy.merge_layers([layer for _, layer in expanded]), known_rules=rules.BY_ID)
    except policy.PolicyError as exc:
        raise UsageError(f"merged policy: {exc}") from exc
    sources = {key: [name for name, layer in expanded if _sets(layer, key)] for key, _, _ in policy.documented()}
    return merged, sources


def _sets(layer: dict[str, Any], key: str) -> bool:
    value: Any = layer
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def value_at(policy: dict[str, Any], key: str) -> Any:
    value: Any = policy
    for part in key.split("."):
        value = value[part]
    return value


def source_of(key_sources: list[str], value: Any) -> str:
    """Who set a value, as the list says it: the default, the last layer, or (a mapping) every layer merged."""
    if not key_sources:
        return DEFAULT
    if isinstance(value, dict) and len(key_sources) > 1:
        return " + ".join(key_sources)
    return key_sources[-1]


def as_json(host: str, layers: list[tuple[str, dict[str, Any]]], merged: dict, sources: dict) -> dict[str, Any]:
    """What --json prints: the host, its layers (names, first to last), the effective policy and, per key, its
    value and the layers that set it (``[]``: the default)."""
    return {
        "host": host,
        "layers": [name for name, _ in layers],
        "policy": merged,
        "keys": {key: {"value": value_at(merged, key), "set_by": who} for key, who in sources.items()},
    }


def _leaves(value: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """A mapping value's leaves (path, value), a non-empty mapping opened key by key; anything else is one leaf."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*path, str(k)))]
    return [(path, value)]


def _set_by(layers: list[tuple[str, dict[str, Any]]], path: tuple[str, ...]) -> str:
    """The last layer that sets ``path`` (a tuple: names inside a value may hold dots), or the default."""
    who = DEFAULT
    for name, layer in layers:
        value: Any = layer
        for part in path:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            who = name
    return who


def shown(value: Any) -> str:
    """A value as a person reads it: text bare, a list comma-separated, null and empty said in words."""
    if value is None:
        return "null (not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)) and not value:
        return "none"
    if isinstance(value, list):
        return ", ".join(shown(v) if not isinstance(v, (dict, list)) else json.dumps(v, sort_keys=True) for v in value)
    return str(value)


def as_text(host: str, layers: list[tuple[str, dict[str, Any]]], merged: dict, sources: dict) -> str:
    """A readable list: one line per key (a mapping value opened into its entries), its value and the layer that
    set it; the keys a layer set first, then the defaults."""
    policy = _policy()
    expanded = [(name, policy.expand_dotted(layer)) for name, layer in layers]
    order = " < ".join([DEFAULT, *(name for name, _ in layers)])
    rows = []
    for key in sources:
        top = tuple(key.split("."))
        for path, value in _leaves(value_at(merged, key), top):
            rows.append((".".join(path), shown(value), _set_by(expanded, path)))
    width = min(48, max(len(r[0]) for r in rows))
    lines = [f"policy of {host} (later wins: {order})"]
    for title, group in (
        ("set by a layer", [r for r in rows if r[2] != DEFAULT]),
        ("defaults", [r for r in rows if r[2] == DEFAULT]),
    ):
        lines += ["", f"{title} ({len(group)}):"]
        lines += [f"  {key:<{width}}  {value}" + (f"   ({who})" if who != DEFAULT else "") for key, value, who in group]
    return "\n".join(lines)
