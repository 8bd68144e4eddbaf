"""Versions agree (issue 27): galaxy.yml's version, the changelog's releases, every ``version_added``, and the
CLI's version (pyproject.toml, ``gpufleet.__version__``, ``gpufleet --version``) with the report's generator
(``tool.version``, fleet.VERSION): one version for what is released together.

While fragments wait in changelogs/fragments, galaxy.yml names the release being made (after the changelog's last
one: ``antsibull-changelog release`` with a version already released merges the fragments into that old release);
every ``version_added`` of a plugin's documentation (options and return values included) or a role's argument specs
is a released version or that one, never a version nobody will ship."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet

import gpufleet
from gpufleet import cli

REPO = Path(__file__).resolve().parents[2]
DOC_BLOCKS = ("DOCUMENTATION", "RETURN")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in str(text).split("."))


def galaxy_version() -> str:
    return str(yaml.safe_load((REPO / "galaxy.yml").read_text(encoding="utf-8"))["version"])


def released() -> list[str]:
    changes = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text(encoding="utf-8"))
    return sorted((str(v) for v in (changes.get("releases") or {})), key=_version)


def pending_fragments() -> list[Path]:
    return sorted(p for p in (REPO / "changelogs" / "fragments").glob("*.y*ml"))


def _walk(node, where):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "version_added":
                yield where, str(value)
            else:
                yield from _walk(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{where}[{i}]")


def version_added() -> list[tuple[str, str]]:
    """(where, version) of every version_added in the plugins' documentation and the roles' argument specs."""
    found = []
    for path in sorted((REPO / "plugins").glob("*/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in DOC_BLOCKS for t in node.targets
            ):
                name = node.targets[0].id
                found += _walk(yaml.safe_load(ast.literal_eval(node.value)), f"{path.relative_to(REPO)}:{name}")
    for path in sorted(REPO.glob("roles/*/meta/argument_specs.y*ml")):
        found += _walk(yaml.safe_load(path.read_text(encoding="utf-8")), str(path.relative_to(REPO)))
    return found


def test_galaxy_names_the_release_being_made():
    releases = released()
    assert releases, "changelogs/changelog.yaml has no release"
    if pending_fragments():
        assert _version(galaxy_version()) > _version(releases[-1]), (
            f"galaxy.yml says {galaxy_version()}, already released (changelog.yaml: {releases}); fragments wait in "
            "changelogs/fragments, so galaxy.yml must name the next release"
        )
    else:
        assert galaxy_version() == releases[-1]


def test_every_version_added_is_a_release_or_the_one_being_made():
    allowed = set(released()) | {galaxy_version()}
    found = version_added()
    assert len(found) > 20, found  # the walk sees the modules' documentation
    wrong = [(where, v) for where, v in found if v not in allowed]
    assert not wrong, f"version_added outside {sorted(allowed)}: {wrong}"


def pyproject_version() -> str:
    """The version pyproject.toml gives the CLI's package: its own, or the attribute it reads (setuptools' dynamic
    ``attr``, read the way setuptools reads it: the module's literal assignment, nothing imported)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    if "version" in config["project"]:
        return str(config["project"]["version"])
    assert "version" in config["project"].get("dynamic", []), "pyproject.toml: project has no version"
    module, _, name = config["tool"]["setuptools"]["dynamic"]["version"]["attr"].rpartition(".")
    path = REPO / "src" / Path(*module.split(".")) / "__init__.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise AssertionError(f"pyproject.toml reads the version from {module}.{name}, which {path} does not assign")


def test_the_cli_and_the_report_carry_the_collections_version(capsys):
    want = galaxy_version()
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    found = {
        "pyproject.toml": pyproject_version(),
        "gpufleet.__version__": gpufleet.__version__,
        "gpufleet --version": capsys.readouterr().out.strip().removeprefix("gpufleet "),
        "report tool.version (fleet.VERSION)": fleet.build_report({})["tool"]["version"],
    }
    wrong = {where: v for where, v in found.items() if v != want}
    assert not wrong, f"galaxy.yml says {want}; these say otherwise: {wrong}"
