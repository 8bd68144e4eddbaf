import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_readme_tables_match_the_code():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-readme-tables.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_readme_starts_with_the_two_commands():
    head = (REPO / "README.md").read_text().split("\n## ")[0]
    assert "make audit" in head and "make test" in head


def test_role_readmes_match_their_argument_specs():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-role-readmes.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    for role in ("host_tuning", "network_tuning", "gpu_runtime", "nvidia_driver", "prereqs"):
        text = (REPO / "roles" / role / "README.md").read_text()
        assert text.startswith(f"# gpufleet.tuning.{role}\n") and "## Variables" in text and "## Reboots" in text


# The walkthrough ("Audit your own fleet in ten minutes", issue 15): every command it shows names files that
# exist and options the CLI accepts; the example policy is valid; the docs it links to exist.

EXAMPLE = REPO / "inventories" / "example"
WALKTHROUGH_TITLE = "Audit your own fleet in ten minutes"
MOVED_TO_DOCS = ("docs/quality.md", "docs/reliability.md", "docs/security.md", "docs/testing.md", "docs/benchmarks.md")


def _sections() -> dict[str, str]:
    parts = (REPO / "README.md").read_text().split("\n## ")
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts[1:]}


def _walkthrough() -> str:
    sections = _sections()
    assert WALKTHROUGH_TITLE in sections, f"README has no '## {WALKTHROUGH_TITLE}' section"
    return sections[WALKTHROUGH_TITLE]


def _commands(text: str) -> list[list[str]]:
    """Commands of the ```sh blocks, split as the shell splits them, comments dropped."""
    import shlex

    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    return [line for line in lines if line]


def _in_checkout(path: str) -> Path:
    """A path of the walkthrough in this checkout: my-fleet/ is the copy of inventories/example."""
    return REPO / re.sub(r"^my-fleet(/|$)", "inventories/example\\1", path)


def test_walkthrough_comes_right_after_the_two_commands():
    text = (REPO / "README.md").read_text()
    first_section = text.split("\n## ")[1].split("\n", 1)[0]
    assert first_section == WALKTHROUGH_TITLE


def test_walkthrough_commands_name_files_that_exist_and_options_the_cli_accepts():
    sys.path.insert(0, str(REPO / "src"))
    from gpufleet import cli

    commands = _commands(_walkthrough())
    programs = [argv[0] for argv in commands]
    assert "cp" in programs and "ansible-playbook" in programs
    assert {tuple(argv[:2]) for argv in commands if argv[0] == "gpufleet"} >= {
        ("gpufleet", "audit"),
        ("gpufleet", "remediate"),
        ("gpufleet", "rollback"),
    }
    for argv in commands:
        for word in argv[1:]:
            if word.startswith(("$", "-")) or "/" not in word:
                continue
            found = glob.glob(str(_in_checkout(word)))
            assert found, f"{' '.join(argv)}: {word} does not exist here ({_in_checkout(word)})"
        if argv[0] == "gpufleet":
            try:
                cli.build_parser().parse_args([_mapped(w) for w in argv[1:]])
            except SystemExit as exc:
                raise AssertionError(f"the CLI refuses: {' '.join(argv)}") from exc
    # Paths named in the prose too (`my-fleet/...`, `playbooks/...`, `roles/...`).
    for path in re.findall(r"`((?:my-fleet|playbooks|roles|inventories|docs)/[^`\s]*)`", _walkthrough()):
        if "<" not in path:
            assert glob.glob(str(_in_checkout(path))), f"the walkthrough names {path}, which does not exist"


def _mapped(word: str) -> str:
    return str(_in_checkout(word)) if word.startswith("my-fleet/") else word


def test_example_policy_is_valid_for_every_host_of_the_example_inventory():
    """What `gpufleet audit --policy inventories/example/policy.yml` checks before any host is touched: the file,
    then every host's layers merged with it, through the audit's own validator."""
    import yaml

    sys.path.insert(0, str(REPO / "src"))
    from gpufleet import paths, preflight

    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules

    overrides = preflight.load_policy_file(str(EXAMPLE / "policy.yml"))
    merged = policy.validate(overrides, known_rules=rules.BY_ID)
    # Realistic, as the walkthrough says: links, a declared MTU per NIC, a severity floor, a pinned driver.
    assert merged["min_severity"] == "low" and merged["network"]["mtu"] and merged["software"]["driver_branch"]
    hosts = preflight.inventory_hosts(str(EXAMPLE / "inventory"), None, overrides, str(EXAMPLE / "policy.yml"))
    assert len(hosts) == 5

    # policy.yml is merged last for every host: a key it shares with a region's layer would silently replace the
    # region's value (the power caps, the cloud MTU). Leaves only: network.mtu's NIC names may differ.
    def leaves(tree, prefix=""):
        for key, value in tree.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                yield from leaves(value, path)
            else:
                yield path

    fleet = set(leaves(overrides))
    caps = {}
    for group_file in sorted((EXAMPLE / "inventory" / "group_vars").glob("*.yml")):
        layer = yaml.safe_load(group_file.read_text()).get("gpufleet_policy_group") or {}
        shared = fleet & set(leaves(layer))
        assert not shared, f"policy.yml would override {group_file.name}'s {sorted(shared)}"
        caps[group_file.stem] = {k: v for k, v in (layer.get("power") or {}).items() if k in ("limit_w", "limit_pct")}
    assert caps["eu_west"] and caps["us_east"], "the example declares a power cap per group"


def test_example_inventory_directory_is_read_by_ansible_without_warnings():
    """`-i my-fleet/inventory` as Ansible reads a directory: every file in it is an inventory source (issue 29). The
    team's policy.yml lives beside it, so nothing in it is parsed as inventory; every region declares its GPU count."""
    import yaml

    inventory = EXAMPLE / "inventory"
    assert not (inventory / "policy.yml").exists() and (EXAMPLE / "policy.yml").is_file()
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_WARNING": "true", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "[WARNING]" not in proc.stderr, proc.stderr
    listed = json.loads(proc.stdout)
    regions = {"ap_southeast", "eu_west", "us_east"}
    assert set(listed["all"]["children"]) >= regions
    counts = {}
    for region in sorted(regions):
        layer = yaml.safe_load((inventory / "group_vars" / f"{region}.yml").read_text())["gpufleet_policy_group"]
        counts[region] = (layer.get("health") or {}).get("expected_gpu_count")
    assert all(isinstance(n, int) and n > 0 for n in counts.values()), counts
    # hosts.yml and the README tell the same story: three regions on three continents
    assert "three continents" in (inventory / "hosts.yml").read_text()
    assert "three regions on three continents" in _walkthrough()


def test_example_policy_errors_name_the_key():
    """The validator the example policy passes is not a formality: a typo in it is refused, naming the key."""
    import yaml

    sys.path.insert(0, str(REPO / "src"))
    from gpufleet import paths

    paths.import_collection()
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules

    data = yaml.safe_load((EXAMPLE / "policy.yml").read_text())
    data["network"]["mtu"]["eno1"] = 100000
    try:
        policy.validate(data, known_rules=rules.BY_ID)
    except policy.PolicyError as exc:
        assert "network.mtu.eno1" in str(exc)
    else:
        raise AssertionError("an MTU of 100000 was accepted")


def _links(markdown: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", markdown.read_text(), flags=re.S)
    return [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not target.startswith(("http://", "https://", "#", "mailto:"))
    ]


def test_readme_and_docs_links_resolve():
    readme = _links(REPO / "README.md")
    for target in MOVED_TO_DOCS + ("docs/img/report-sample.png", "playbooks/prereqs.yml"):
        assert target in readme, f"README does not link {target}"
    for markdown in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in _links(markdown):
            path = (markdown.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{markdown.relative_to(REPO)} links {target}, which does not exist"
    image = REPO / "docs" / "img" / "report-sample.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size < 300_000


def test_moved_detail_lives_in_docs_and_the_readme_keeps_a_summary():
    sections = _sections()
    for title, doc in zip(
        ("Quality gates and installing the collection", "Reliability", "Security", "Testing without a GPU",
         "Benchmarks"),
        MOVED_TO_DOCS,
        strict=True,
    ):
        assert f"({doc})" in sections[title], f"README section {title} does not link {doc}"
        assert len(sections[title]) < 2000, f"README section {title} is detail again: move it to {doc}"
    assert "| tried | what happened | lost | reproduce |" in (REPO / "docs" / "reliability.md").read_text()
    assert "| config | 0 % loss | 0.1 % loss | 1 % loss |" in (REPO / "docs" / "benchmarks.md").read_text()


def test_prereqs_playbook_passes_syntax_check_and_ansible_lint():
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    bin_dir = REPO / ".venv" / "bin"
    proc = subprocess.run(
        [
            str(bin_dir / "ansible-playbook"),
            "--syntax-check",
            "-i",
            str(EXAMPLE / "hosts.yml"),
            "playbooks/prereqs.yml",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if not (bin_dir / "ansible-lint").exists():
        pytest.skip("ansible-lint is not installed in .venv (make test installs it)")
    proc = subprocess.run(
        [str(bin_dir / "ansible-lint"), "-q", "playbooks/prereqs.yml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
