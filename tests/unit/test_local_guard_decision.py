"""The decision of gpufleet.tuning.local_guard and of the CLI's preflight (plugin_utils/local_guard.py): which hosts
are the controller, what marks one as meant to be changed, and what a bad mark says (issue 25, point 7)."""

from __future__ import annotations

import pytest
import yaml

from gpufleet import paths, preflight
from gpufleet.exits import UsageError

paths.import_collection()
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import local_guard  # noqa: E402


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, False),
        (True, True),
        (False, False),
        ("true", True),
        ("yes", True),
        ("on", True),
        ("1", True),
        (1, True),
        ("false", False),
        ("no", False),
        ("off", False),
        ("0", False),
        (0, False),
        ("", False),
        (" True ", True),
    ],
)
def test_allowed_reads_ansible_booleans(value, expected):
    assert local_guard.allowed(value) is expected


@pytest.mark.parametrize("value", ["maybe", 2, [], {}, 0.5, "truthy"])
def test_allowed_refuses_anything_else_naming_the_variable_and_the_values(value):
    with pytest.raises(local_guard.GuardValueError) as exc:
        local_guard.allowed(value)
    assert str(exc.value) == f"gpufleet_allow_local_changes: {value!r} is not a boolean; allowed values: true or false"


@pytest.mark.parametrize(
    "connection, address, local",
    [
        ("local", "gpu01", True),
        ("ansible.builtin.local", "gpu01", True),
        ("ansible.legacy.local", "gpu01", True),
        ("ssh", "127.0.0.1", True),
        ("ssh", "127.1.2.3", True),
        ("ssh", "::1", True),
        ("ssh", "[::1]", True),
        ("ssh", "localhost", True),
        ("ssh", "LOCALHOST", True),
        ("paramiko", "localhost.localdomain", True),
        ("ssh", "10.0.0.5", False),
        ("ssh", "gpu01.example.com", False),
        ("ssh", "localhost-gpu", False),
        ("containers.podman.podman", "gpufleet-demo-sg-a100-01", False),
        ("ssh", None, False),
    ],
)
def test_which_hosts_are_the_controller(connection, address, local):
    assert (local_guard.reached_locally(connection, address) is not None) is local
    assert (local_guard.decide(connection, address, None) is not None) is local
    assert local_guard.decide(connection, address, True) is None  # marked: may be changed


def test_a_bad_mark_is_an_error_on_any_host():
    with pytest.raises(local_guard.GuardValueError):
        local_guard.decide("ssh", "10.0.0.5", "perhaps")


def test_the_refusal_names_the_host_the_variable_and_why():
    text = local_guard.refusal("localhost", "local", "localhost", None, "The play 'Remediate'")
    assert text.startswith(
        "refusing to change the machine Ansible runs on (the controller): localhost is reached "
        "over the local connection (local). The play 'Remediate' changes the hosts it runs on"
    )
    assert "set gpufleet_allow_local_changes: true for localhost in the inventory" in text
    assert "Nothing was changed." in text
    assert local_guard.refusal("gpu01", "ssh", "10.0.0.5", None) is None


def _inventory(tmp_path, hosts: dict) -> str:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return str(path)


def test_preflight_refuses_every_local_host_at_once(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_TRANSPORT", raising=False)
    inventory = _inventory(
        tmp_path,
        {
            "lab-1": {"ansible_connection": "local", "gpufleet_allow_local_changes": True},
            "ctl": {"ansible_connection": "local"},
            "loop": {"ansible_host": "127.0.0.1"},
            "gpu01": {"ansible_host": "10.0.0.5"},
        },
    )
    with pytest.raises(UsageError) as exc:
        preflight.refuse_local_changes(inventory, None, "remediate")
    text = str(exc.value)
    assert "ctl is reached over the local connection (local); loop is reached at the loopback address 127.0.0.1" in text
    assert "`gpufleet remediate` changes the hosts it runs on" in text
    assert "set gpufleet_allow_local_changes: true for ctl, loop in the inventory" in text
    assert "lab-1" not in text and "gpu01" not in text
    preflight.refuse_local_changes(inventory, "lab-1:gpu01", "remediate")  # --limit leaves them out: no error


def test_preflight_templates_the_mark_and_the_connection(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_TRANSPORT", raising=False)
    hosts = {
        "lab-1": {
            "conn": "local",
            "ansible_connection": "{{ conn }}",
            "lab": True,
            "gpufleet_allow_local_changes": "{{ lab }}",
        }
    }
    preflight.refuse_local_changes(_inventory(tmp_path, hosts), None, "rollback")
    hosts["lab-1"]["lab"] = False
    with pytest.raises(UsageError, match="for lab-1 in the inventory"):
        preflight.refuse_local_changes(_inventory(tmp_path, hosts), None, "rollback")


def test_preflight_follows_ansible_transport(tmp_path, monkeypatch):
    """A host without ansible_connection uses ANSIBLE_TRANSPORT (the runner's ansible-playbook inherits it)."""
    inventory = _inventory(tmp_path, {"gpu01": {"ansible_host": "10.0.0.5"}})
    monkeypatch.delenv("ANSIBLE_TRANSPORT", raising=False)
    preflight.refuse_local_changes(inventory, None, "rollback")
    monkeypatch.setenv("ANSIBLE_TRANSPORT", "local")
    with pytest.raises(UsageError, match="gpu01 is reached over the local connection"):
        preflight.refuse_local_changes(inventory, None, "rollback")


def test_preflight_bad_mark_names_host_variable_and_values(tmp_path):
    inventory = _inventory(tmp_path, {"gpu01": {"ansible_host": "10.0.0.5", "gpufleet_allow_local_changes": "maybe"}})
    with pytest.raises(UsageError) as exc:
        preflight.refuse_local_changes(inventory, None, "remediate")
    assert str(exc.value) == (
        "invalid inventory (nothing was run):\n"
        "  gpu01: gpufleet_allow_local_changes: 'maybe' is not a boolean; allowed values: true or false"
    )
