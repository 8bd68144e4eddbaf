"""One policy, given one way (issue 29 point 1): the playbooks' policy file (gpufleet_policy_file, read by
plugin_utils/policy_layers.py), policy keys given as extra variables refused, and `gpufleet policy --host NAME`:
the host's effective policy and the layer that set each value, from an inventory in a temp dir."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import policy_layers

from gpufleet import cli


# ---------------------------------------------------------------- the playbooks' policy file and stray keys
def test_the_policy_file_is_read_relative_to_the_current_directory_and_validated(tmp_path, monkeypatch):
    (tmp_path / "policy.yml").write_text("min_severity: low\npower: {limit_pct: 90}\n")
    monkeypatch.chdir(tmp_path)
    assert policy_layers.read_policy_file("policy.yml") == {"min_severity": "low", "power": {"limit_pct": 90}}
    (tmp_path / "bad.yml").write_text("power: {limit_pct: -1}\n")
    (tmp_path / "list.yml").write_text("- min_severity\n")
    for path, message in (
        ("bad.yml", "gpufleet_policy_file bad.yml: policy.power.limit_pct: must be >= 0"),
        ("list.yml", "gpufleet_policy_file list.yml: expected a mapping of policy keys, got list"),
        ("missing.yml", "gpufleet_policy_file missing.yml: No such file or directory"),
    ):
        with pytest.raises(policy_layers.PolicyFileError) as exc:
            policy_layers.read_policy_file(path)
        assert str(exc.value).startswith(message), exc.value
    (tmp_path / "rule.yml").write_text("rules: {NOPE-001: {enabled: false}}\n")
    with pytest.raises(policy_layers.PolicyFileError, match="policy.rules.NOPE-001: unknown rule id"):
        policy_layers.read_policy_file("rule.yml")


def test_the_policy_file_comes_before_the_last_layer_and_the_module_gets_four():
    values = {
        "gpufleet_policy": {"memory": {"max_swappiness": 30}},
        "gpufleet_policy_overrides": {"min_severity": "high"},
        "gpufleet_policy_file": "team.yml",
    }
    files = {"team.yml": {"min_severity": "low", "memory.max_swappiness": 20}}
    named = policy_layers.named_layers(values, read_file=files.__getitem__)
    assert [name for name, _ in named] == [*policy.LAYERS[:-1], "gpufleet_policy_file", policy.LAYERS[-1]]
    option = policy_layers.as_option(named)
    assert len(option) == len(policy.LAYERS)
    merged = policy.from_option(option)
    assert merged["min_severity"] == "high"  # gpufleet_policy_overrides (the CLI's --policy) wins over the file
    assert merged["memory"]["max_swappiness"] == 20  # the file over the fleet layer, dotted or not
    # Without a file the layers are handed over as they are.
    assert policy_layers.as_option(policy_layers.named_layers({})) == [{}, {}, {}, {}]


def test_policy_keys_given_as_extra_variables_are_named_with_what_to_use():
    extra = {"min_severity": "low", "power": {"limit_pct": 90}, "watch_state": "present", "gpufleet_policy_file": "p"}
    assert policy_layers.stray_keys(extra) == ["min_severity", "power"]
    assert policy_layers.stray_keys({"gpufleet_policy_overrides": {"min_severity": "low"}}) == []
    message = policy_layers.stray_message(["min_severity", "power"])
    assert "min_severity, power" in message and "-e gpufleet_policy_file=policy.yml" in message


# ---------------------------------------------------------------- gpufleet policy --host
@pytest.fixture
def fleet(tmp_path):
    """An inventory laid out as inventories/example: fleet-wide layer in group_vars/all, a region's in
    group_vars/<region>.yml, a host's in host_vars, a team policy file."""
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"eu_west": {"hosts": {"fra-01": {}}}}}}))
    (inv / "group_vars" / "all.yml").write_text(
        yaml.safe_dump(
            {"gpufleet_policy": {"memory": {"max_swappiness": 30}, "rules": {"GPU-ECC-002": {"enabled": False}}}}
        )
    )
    (inv / "group_vars" / "eu_west.yml").write_text(
        yaml.safe_dump({"gpufleet_policy_group": {"site": "{{ group_names[0] }}", "power.limit_w": 400}})
    )
    (inv / "host_vars" / "fra-01.yml").write_text(
        yaml.safe_dump({"gpufleet_policy_host": {"rules": {"GPU-PWR-002": {"severity": "low"}}}})
    )
    team = tmp_path / "policy.yml"
    team.write_text(yaml.safe_dump({"min_severity": "low", "memory": {"max_swappiness": 10}}))
    return inv / "hosts.yml", team


def _policy(capsys, *args):
    code = cli.main(["policy", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_policy_host_says_which_layer_set_each_value(fleet, capsys):
    inventory, team = fleet
    code, out, err = _policy(capsys, "--host", "fra-01", "-i", str(inventory), "--policy", str(team))
    assert code == 0, err
    rows = {}
    for line in out.splitlines():
        if line.startswith("  "):
            key, rest = line.split(maxsplit=1)
            value, _, who = rest.partition("   (")
            rows[key] = (value, who.rstrip(")") or "default")
    assert rows["min_severity"] == ("low", f"--policy {team}")
    assert rows["memory.max_swappiness"] == ("10", f"--policy {team}")  # over gpufleet_policy's 30
    assert rows["site"] == ("eu_west", "gpufleet_policy_group")  # templated
    assert rows["power.limit_w"] == ("400", "gpufleet_policy_group")  # dotted in the layer
    assert rows["rules.GPU-ECC-002.enabled"] == ("false", "gpufleet_policy")
    assert rows["rules.GPU-PWR-002.severity"] == ("low", "gpufleet_policy_host")
    assert rows["cpu.governor"] == ("performance", "default")
    assert rows["memory.thp_enabled"] == ("always, madvise, never", "default")  # a list as a person reads it
    assert out.index("cpu.governor") > out.index("min_severity")  # the layers' keys first


def test_policy_host_json_is_the_effective_policy_with_its_layers(fleet, capsys, tmp_path, monkeypatch):
    inventory, team = fleet
    monkeypatch.chdir(tmp_path)
    # The inventory names the team's file itself (as a playbook run takes it): a layer of its own, before the last.
    (inventory.parent / "group_vars" / "all.yml").write_text(
        yaml.safe_dump({"gpufleet_policy": {"memory": {"max_swappiness": 30}}, "gpufleet_policy_file": "policy.yml"})
    )
    code, out, err = _policy(capsys, "--host", "fra-01", "-i", str(inventory), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["layers"] == [*policy.LAYERS[:-1], "gpufleet_policy_file", policy.LAYERS[-1]]
    assert data["keys"]["memory.max_swappiness"] == {"value": 10, "set_by": ["gpufleet_policy", "gpufleet_policy_file"]}
    assert data["keys"]["cpu.governor"] == {"value": "performance", "set_by": []}
    expected = policy.from_option(
        [
            {"memory": {"max_swappiness": 30}},
            {"site": "eu_west", "power.limit_w": 400},
            {"rules": {"GPU-PWR-002": {"severity": "low"}}},
            {"min_severity": "low", "memory": {"max_swappiness": 10}},
        ]
    )
    assert data["policy"] == expected  # what the modules judge by, from the same layers


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "nope-01"], "no host nope-01 in inventory"),
        (["--host", "fra-01", "--policy", "BAD"], "--policy BAD: policy.power.limit_pct: must be >= 0"),
        (["--json"], "--json goes with --host NAME"),
    ],
)
def test_policy_host_errors_exit_3_naming_the_layer_or_host(fleet, capsys, args, message):
    inventory, team = fleet
    bad = team.parent / "bad.yml"
    bad.write_text("power: {limit_pct: -1}\n")
    args = [str(bad) if a == "BAD" else a for a in args]
    code, out, err = _policy(capsys, *args, "-i", str(inventory))
    assert code == 3 and message.replace("BAD", str(bad)) in err, err
    assert "Traceback" not in err


def test_policy_host_names_the_layer_of_an_invalid_inventory_value(fleet, capsys):
    inventory, _ = fleet
    (inventory.parent / "host_vars" / "fra-01.yml").write_text(yaml.safe_dump({"gpufleet_policy_host": {"cpu": 3}}))
    code, _, err = _policy(capsys, "--host", "fra-01", "-i", str(inventory))
    assert code == 3 and "gpufleet_policy_host: policy.cpu: expected a mapping" in err, err


def test_the_clis_preflight_reads_the_inventorys_policy_file_before_any_host_is_touched(fleet):
    """gpufleet_policy_file set in the inventory is checked with the other layers (exit 3, nothing run); the CLI
    runs its playbooks from the collection's directory, so a relative path is refused, naming what to write."""
    from gpufleet import preflight
    from gpufleet.exits import UsageError

    inventory, team = fleet
    all_vars = inventory.parent / "group_vars" / "all.yml"
    bad = team.parent / "bad.yml"
    bad.write_text("power: {limit_pct: -1}\n")
    for path, message in (
        (str(bad), f"fra-01: gpufleet_policy_file {bad}: policy.power.limit_pct: must be >= 0"),
        ("policy.yml", "fra-01: gpufleet_policy_file policy.yml: give an absolute path (e.g. {{ inventory_dir }}"),
    ):
        all_vars.write_text(yaml.safe_dump({"gpufleet_policy_file": path}))
        with pytest.raises(UsageError) as exc:
            preflight.inventory_hosts(str(inventory), None, {}, None)
        assert message in str(exc.value), exc.value
    all_vars.write_text(yaml.safe_dump({"gpufleet_policy_file": str(team)}))
    assert preflight.inventory_hosts(str(inventory), None, {}, None) == ["fra-01"]


def test_a_worker_job_carries_the_policy_files_content_not_its_path(tmp_path):
    """The region's node has no copy of the controller's file: gpufleet_policy_file travels read (templated on the
    controller), and the node's action plugin takes the mapping as the file's layer."""
    from gpufleet import workers
    from gpufleet.exits import UsageError

    team = tmp_path / "policy.yml"
    team.write_text("min_severity: low\n")
    inv = tmp_path / "hosts.yml"
    group = {"ansible_connection": "local", "gpufleet_policy_file": "{{ inventory_dir }}/policy.yml"}
    inv.write_text(json.dumps({"all": {"children": {"eu": {"hosts": {"eu1": {}}, "vars": group}}}}))
    shipped = workers.plan([str(inv)], ["eu1"], ["eu=ssh://exec-eu"]).hostvars["eu1"]
    assert shipped["gpufleet_policy_file"] == {"min_severity": "low"}
    named = policy_layers.named_layers(shipped, read_file=None)
    assert ("gpufleet_policy_file", {"min_severity": "low"}) in named
    team.write_text("min_severity: loud\n")
    with pytest.raises(UsageError, match="eu1: gpufleet_policy_file .*policy.yml: policy.min_severity"):
        workers.plan([str(inv)], ["eu1"], ["eu=ssh://exec-eu"])


def test_a_host_not_audited_keeps_the_site_its_policy_file_sets(tmp_path):
    """fleet.host_site (the site of a host without an audit result) reads the layers in the modules' order, the
    policy file's before the last."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import host_site

    team = tmp_path / "policy.yml"
    team.write_text("site: eu_west\n")
    layers = {"gpufleet_policy": {"site": "us_east"}, "gpufleet_policy_file": str(team)}
    assert host_site(layers) == "eu_west"
    assert host_site({**layers, "gpufleet_policy_file": {"site": "ap_southeast"}}) == "ap_southeast"  # a worker's
    assert host_site(layers, overrides={"site": "us_west"}) == "us_west"  # --policy last
    assert host_site({**layers, "gpufleet_policy_file": str(tmp_path / "missing.yml")}) == "us_east"


BAD_POLICY = (
    "memory: {max_swapiness: 5}\n"  # unknown key
    "power: {ecc: 'yes'}\n"  # wrong type
    "cpu: {irqbalance: sometimes}\n"  # not in its set
)
EVERY_PROBLEM = (
    "\n  policy.memory.max_swapiness: unknown key (known: gpu_full_pct, max_swappiness,",
    "\n  policy.power.ecc: expected bool, got 'yes' (str)",
    "\n  policy.cpu.irqbalance: 'sometimes' is not one of running, stopped, any",
)


@pytest.mark.parametrize("command", ["audit", "policy", "policy-host"])
def test_every_problem_of_a_policy_file_is_listed_exit_3(fleet, capsys, tmp_path, command):
    """issue 29: one error listing every mistake of the file, each with its key, before anything runs."""
    inventory, _ = fleet
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_POLICY)
    args = {
        "audit": ["audit", "-i", str(inventory), "--out", str(tmp_path / "reports")],
        "policy": ["policy"],
        "policy-host": ["policy", "--host", "fra-01", "-i", str(inventory)],
    }[command]
    code = cli.main([*args, "--policy", str(bad)])
    _, err = capsys.readouterr()
    assert code == 3, err
    assert f"--policy {bad}: policy: 3 problems:" in err, err
    for problem in EVERY_PROBLEM:
        assert problem in err, (problem, err)
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_every_problem_of_each_inventory_layer_is_listed(fleet):
    from gpufleet import preflight
    from gpufleet.exits import UsageError

    inventory, _ = fleet
    (inventory.parent / "host_vars" / "fra-01.yml").write_text(
        yaml.safe_dump({"gpufleet_policy_host": {"cpu": {"governer": "performance"}, "min_severity": "urgent"}})
    )
    with pytest.raises(UsageError) as exc:
        preflight.inventory_hosts(str(inventory), None, {}, None)
    message = str(exc.value)
    assert "fra-01: gpufleet_policy_host: policy: 2 problems:" in message, message
    assert "\n      policy.cpu.governer: unknown key" in message and "\n      policy.min_severity: 'urgent'" in message


def test_the_playbooks_policy_file_lists_every_problem(tmp_path):
    """What a playbook's task fails with for -e gpufleet_policy_file=bad.yml (the action plugins read it)."""
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_POLICY)
    with pytest.raises(policy_layers.PolicyFileError) as exc:
        policy_layers.read_policy_file(str(bad))
    assert str(exc.value).startswith(f"gpufleet_policy_file {bad}: policy: 3 problems:"), exc.value
    for problem in EVERY_PROBLEM:
        assert problem in str(exc.value), (problem, exc.value)
