"""Checks before any host is touched: the inventory and --limit match hosts, the --policy file and every host's
policy layers are valid, the report directory is writable. Each problem is a UsageError (exit 3)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from gpufleet import paths
from gpufleet.exits import UsageError

# The policy layer the CLI passes itself (--policy, as an extra variable); the inventory holds the others.
CLI_LAYER = "gpufleet_policy_overrides"


def inventory_layers() -> tuple[str, ...]:
    """The inventory variables merged, in this order, over the policy defaults (then --policy): policy.LAYERS, the
    one list the modules' action plugins hand over, without the CLI's own layer."""
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import LAYERS

    return tuple(name for name in LAYERS if name != CLI_LAYER)


def __getattr__(name: str):
    # POLICY_LAYERS (public, re-exported by gpufleet.cli): derived on first use, so that importing the CLI does not
    # import the collection.
    if name == "POLICY_LAYERS":
        return inventory_layers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_inventory() -> str:
    try:
        return str(paths.collection_root() / "inventories" / "local" / "hosts.yml")
    except paths.CollectionNotFound:
        return "inventories/local/hosts.yml"


def load_policy_file(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise UsageError(f"--policy {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"--policy {path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"--policy {path}: expected a mapping of policy keys, got {type(data).__name__}")
    return data


def inventory_hosts(
    inventory: str | list[str], limit: str | None, overrides: dict[str, Any], policy_file: str | None
) -> list[str]:
    """Hosts the run will touch, with each host's policy validated before anything runs. ``inventory``: one
    inventory or several, merged as ansible-playbook merges repeated -i."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as policy_mod
    from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

    sources = [inventory] if isinstance(inventory, str) else list(inventory)
    for source in sources:
        if not Path(source).exists():
            raise UsageError(f"inventory not found: {source}")
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=sources)
    with _unmatched_patterns() as unmatched:
        if limit:
            inv.subset(limit)
        hosts = inv.get_hosts(pattern="all")
    if not hosts:
        with_limit = f" with --limit {limit}" if limit else ""
        raise UsageError(f"no host matches inventory {', '.join(sources)}{with_limit}")
    unmatched.replay()
    try:
        policy_mod.validate(overrides, known_rules=rules.BY_ID)
    except policy_mod.PolicyError as exc:
        raise UsageError(f"--policy {policy_file}: {exc}") from exc
    variables = VariableManager(loader=loader, inventory=inv)
    problems: dict[str, list[str]] = {}  # message -> hosts: one line per distinct problem, every host named
    for host in hosts:
        problem = _host_policy_problem(host, variables, loader, Templar, overrides, policy_mod, rules)
        if problem:
            problems.setdefault(problem, []).append(host.name)
    if problems:
        count = sum(len(names) for names in problems.values())
        lines = [f"  {_names(names)}: " + message.replace("\n", "\n    ") for message, names in problems.items()]
        raise UsageError(
            f"invalid policy for {count} host{'s' if count != 1 else ''} (nothing was run):\n" + "\n".join(lines)
        )
    return [h.name for h in hosts]


class _HeldWarnings(list):
    def __init__(self, warn):
        super().__init__()
        self._warn = warn

    def replay(self) -> None:
        for message in self:
            self._warn(message)


@contextlib.contextmanager
def _unmatched_patterns():
    """Ansible's "Could not match supplied host pattern" warnings, held back while the inventory and --limit are
    resolved: when nothing matches, gpufleet's own message (the exit 3) is the first and only word on it; when some
    hosts match, ``replay()`` shows them after all. Other warnings pass through."""
    from ansible.utils.display import Display

    display = Display()  # a singleton: the inventory manager's own
    own = "warning" in vars(display)
    warn = display.warning
    held = _HeldWarnings(warn)

    def hold(msg, *args, **kwargs):
        if str(msg).startswith("Could not match supplied host pattern"):
            held.append(msg)
        else:
            warn(msg, *args, **kwargs)

    display.warning = hold
    try:
        yield held
    finally:
        if own:
            display.warning = warn
        else:
            del display.warning


def _names(names: list[str], shown: int = 5) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _host_policy_problem(host, variables, loader, templar_class, overrides, policy_mod, rules) -> str | None:
    """The problems with one host's policy layers (each layer alone, every problem of each; then merged with
    --policy when each layer is valid), one line each, or None."""
    hostvars = variables.get_vars(host=host, include_hostvars=False)
    templar = templar_class(loader=loader, variables=hostvars)
    merged: dict[str, Any] = {}
    problems: list[str] = []
    for layer in inventory_layers():
        try:
            raw = templar.template(hostvars.get(layer) or {})
        except Exception as exc:  # an undefined variable or a template error in the inventory
            problems.append(f"{layer}: {exc}")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{layer} must be a mapping, got {type(raw).__name__}")
            continue
        try:
            policy_mod.validate(raw, known_rules=rules.BY_ID)
        except policy_mod.PolicyError as exc:
            problems.append(f"{layer}: {exc}")
            continue
        merged = policy_mod.merge(merged, policy_mod.expand_dotted(raw))
    problem, from_file = _policy_file_layer(hostvars, templar)
    if problem:
        problems.append(problem)
    if problems:
        return "\n".join(problems)
    merged = policy_mod.merge(merged, policy_mod.expand_dotted(from_file))
    try:
        policy_mod.validate(policy_mod.merge(merged, policy_mod.expand_dotted(overrides)), known_rules=rules.BY_ID)
    except policy_mod.PolicyError as exc:
        return f"merged policy: {exc}"
    return None


def _policy_file_layer(hostvars, templar) -> tuple[str | None, dict[str, Any]]:
    """(problem or None, content) of the policy file the inventory names in gpufleet_policy_file (the layer before
    --policy, plugin_utils/policy_layers.py). The CLI runs its playbooks from the collection's directory, so a
    relative path would not name the file it names here: it must be absolute (``{{ inventory_dir }}/...``)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import policy_layers

    name = policy_layers.FILE_VARIABLE
    if hostvars.get(name) is None:
        return None, {}
    try:
        path = templar.template(hostvars[name])
    except Exception as exc:  # an undefined variable or a template error in the inventory
        return f"{name}: {exc}", {}
    if isinstance(path, str) and not Path(path).is_absolute():
        return f"{name} {path}: give an absolute path (e.g. {{{{ inventory_dir }}}}/../policy.yml)", {}
    try:
        return None, policy_layers.read_policy_file(path)
    except policy_layers.PolicyFileError as exc:
        return str(exc), {}


def prepare(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[str]]:
    """Report directory writable, policy file and every host's policy valid: before any host is touched. Returns
    the --policy overrides and the names of the hosts the run will touch."""
    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    try:
        writer.check_writable(out)
    except (OSError, ValueError, writer.ReportDirError) as exc:
        raise UsageError(str(exc)) from exc
    overrides = load_policy_file(args.policy)
    return overrides, inventory_hosts(args.inventory, args.limit, overrides, args.policy)


def refuse_local_changes(inventory: str | list[str], limit: str | None, command: str) -> None:
    """UsageError (nothing runs) when a host of the run is the controller itself (local connection or a loopback
    address) and the inventory does not set ``gpufleet_allow_local_changes: true`` for it, or when that variable
    is not a boolean: the check the changing playbooks' first task (gpufleet.tuning.local_guard) makes, asked
    before any host is touched. The connection is the host's ``ansible_connection``, else ANSIBLE_TRANSPORT, else
    ssh (the collection's ansible.cfg, which the CLI's runs use, sets none)."""
    import os

    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import local_guard

    names = ["ansible_connection", "ansible_host", local_guard.VARIABLE]
    default_connection = os.environ.get("ANSIBLE_TRANSPORT") or "ssh"
    refused: list[tuple[str, str]] = []
    bad: list[str] = []
    for host, values in host_variables(inventory, limit, names).items():
        connection = values.get("ansible_connection") or default_connection
        address = values.get("ansible_host") or host
        try:
            how = local_guard.decide(connection, address, values.get(local_guard.VARIABLE))
        except local_guard.GuardValueError as exc:
            bad.append(f"  {host}: {exc}")
            continue
        if how:
            refused.append((host, how))
    if bad:
        raise UsageError("invalid inventory (nothing was run):\n" + "\n".join(bad))
    if refused:
        raise UsageError(local_guard.message(refused, f"`gpufleet {command}`"))


def host_variables(inventory: str | list[str], limit: str | None, names: list[str]) -> dict[str, dict[str, Any]]:
    """host -> {name: the inventory's value of that variable, templated} for the ``names`` the inventory sets
    (role defaults are not read: a name the inventory does not set is absent). A value that cannot be templated
    is left out, as if unset."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[inventory] if isinstance(inventory, str) else list(inventory))
    if limit:
        inv.subset(limit)
    variables = VariableManager(loader=loader, inventory=inv)
    out: dict[str, dict[str, Any]] = {}
    for host in inv.get_hosts(pattern="all"):
        hostvars = variables.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=hostvars)
        values: dict[str, Any] = {}
        for name in names:
            if name not in hostvars:
                continue
            try:
                values[name] = templar.template(hostvars[name])
            except Exception:  # nosec B110  # an undefined variable in the inventory: left out, as if unset
                pass
        out[host.name] = values
    return out
