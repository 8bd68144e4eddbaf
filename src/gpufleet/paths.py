"""Where the gpufleet.tuning collection and its playbooks are, and how to import its Python code."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ENV_COLLECTION = "GPUFLEET_COLLECTION"


class CollectionNotFound(RuntimeError):
    pass


def _is_collection(path: Path) -> bool:
    return (path / "galaxy.yml").is_file() or (path / "MANIFEST.json").is_file()


def collection_root() -> Path:
    """The gpufleet.tuning collection: $GPUFLEET_COLLECTION, else the checkout this package runs from,
    else an installed copy on Ansible's collections path."""
    env = os.environ.get(ENV_COLLECTION)
    if env:
        path = Path(env).resolve()
        if not _is_collection(path):
            raise CollectionNotFound(f"{ENV_COLLECTION}={env} is not a collection (no galaxy.yml or MANIFEST.json)")
        return path
    checkout = Path(__file__).resolve().parents[2]
    if _is_collection(checkout) and (checkout / "playbooks").is_dir():
        return checkout
    default = "~/.ansible/collections:/usr/share/ansible/collections"
    for base in os.environ.get("ANSIBLE_COLLECTIONS_PATH", default).split(os.pathsep):
        candidate = Path(base).expanduser() / "ansible_collections" / "gpufleet" / "tuning"
        if _is_collection(candidate):
            return candidate.resolve()
    raise CollectionNotFound(
        "the gpufleet.tuning collection was not found: run from a checkout, install it with "
        f"`ansible-galaxy collection install`, or set {ENV_COLLECTION}"
    )


def link_dir(root: Path, workdir: Path) -> Path:
    """``workdir`` with ansible_collections/gpufleet/tuning pointing at ``root``; returns ``workdir``."""
    link = workdir / "ansible_collections" / "gpufleet" / "tuning"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(root, target_is_directory=True)
    return workdir


def collections_path(root: Path, workdir: Path) -> str:
    """A collections path whose gpufleet/tuning is ``root``, then the usual places."""
    extra = [str(root / ".collections")] if (root / ".collections").is_dir() else []
    return os.pathsep.join(
        [
            str(link_dir(root, workdir)),
            *extra,
            str(Path("~/.ansible/collections").expanduser()),
            "/usr/share/ansible/collections",
        ]
    )


_imported: Path | None = None


def import_collection() -> Path:
    """Make ``ansible_collections.gpufleet.tuning`` importable in this process (reports, rules, policy)."""
    global _imported
    root = collection_root()
    if _imported is not None:
        return root
    parent = root.parent.parent.parent  # .../ansible_collections/gpufleet/tuning -> ...
    if root.parent.name == "gpufleet" and root.parent.parent.name == "ansible_collections":
        base = parent
    elif (root / ".collections" / "ansible_collections" / "gpufleet" / "tuning").exists():
        base = root / ".collections"
    else:
        base = link_dir(root, Path(tempfile.mkdtemp(prefix="gpufleet-import-")))
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    _imported = base
    return root
