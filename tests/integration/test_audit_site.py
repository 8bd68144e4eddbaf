"""A host's site in the report when the host did not answer: the one reading of its policy layers
(``fleet.host_site``: inventory, group, host, then --policy), for the playbook's report action and for the CLI's
report of a run with workers. The CLI's copy used to skip the --policy layer."""

from __future__ import annotations

import json

import labkit
import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet

pytestmark = pytest.mark.integration

# Nothing listens on port 2 of the loopback: the worker fails at once and its host has no audit result.
DEAD_WORKER = "far-01=ssh://root@127.0.0.1:2"


def _inventory(tmp_path, host_layer: dict | None = None):
    host = {"ansible_host": "127.0.0.1", **({"gpufleet_policy_host": host_layer} if host_layer else {})}
    inventory = {"all": {"hosts": {"far-01": host}, "vars": {"gpufleet_policy": {"site": "us_east"}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def _audit_via_dead_worker(tmp_path, inventory, *extra: str) -> dict:
    out = tmp_path / "out"
    res = labkit.gpufleet("audit", "-i", str(inventory), "--out", str(out), "--worker", DEAD_WORKER, *extra)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]  # the host was not audited
    host = json.loads((out / "latest" / "report.json").read_text())["hosts"]["far-01"]
    assert host["status"] == "unreachable" and host["via"] == "worker:far-01", host
    return host


def test_cli_site_of_a_host_without_result_honours_policy(tmp_path):
    """The host's own layer beats the inventory's; --policy sets the site last: the unreachable host is grouped
    with the site its audit would have used."""
    inventory = _inventory(tmp_path, {"site": "ap_south"})
    assert _audit_via_dead_worker(tmp_path, inventory)["site"] == "ap_south"
    policy = tmp_path / "policy.yml"
    policy.write_text("site: eu_west\n")
    assert _audit_via_dead_worker(tmp_path, inventory, "--policy", str(policy))["site"] == "eu_west"


class _Unreadable(dict):
    """Host variables whose host layer cannot be templated (Ansible raises on reading it)."""

    def get(self, key, default=None):
        if key == "gpufleet_policy_host":
            raise ValueError("template error")
        return super().get(key, default)


def test_host_site_reads_the_layers_lowest_first():
    layers = {"gpufleet_policy": {"site": "a"}, "gpufleet_policy_group": {"site": "b"}}
    assert fleet.host_site(layers) == "b"
    assert fleet.host_site({**layers, "gpufleet_policy_overrides": {"site": "c"}}) == "c"  # the playbook's extra var
    assert fleet.host_site(layers, {"site": "d"}) == "d"  # the CLI holds --policy apart
    assert fleet.host_site(layers, {}) == "b"  # a --policy without a site
    assert fleet.host_site({"gpufleet_policy": {"site": ""}, "gpufleet_policy_host": "x"}) is None  # no usable site
    assert fleet.host_site(_Unreadable(layers), {"site": "d"}) == "b"  # the layers read before the failing one
