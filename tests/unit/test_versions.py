"""Versions agree (issue 27): galaxy.yml's version, the changelog's releases and every ``version_added``.

While fragments wait in changelogs/fragments, galaxy.yml names the release being made (after the changelog's last
one: ``antsibull-changelog release`` with a version already released merges the fragments into that old release);
every ``version_added`` of a plugin's documentation (options and return values included) or a role's argument specs
is a released version or that one, never a version nobody will ship."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

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
