#!/usr/bin/env bash
# The Ansible collections Molecule's podman driver and the scenarios need (containers.podman, ansible.posix,
# community.general), taken from the PyPI `ansible` bundle: Galaxy is not reachable from the lab.
#
#   scripts/fetch-collections.sh     download the bundle once (build/collections/), extract the three collections
#                                     into .collections/ansible_collections/<ns>/<name>/ (git-ignored); idempotent
#
# Only those folders are extracted; .collections/ansible_collections/gpufleet/tuning (the link back to this
# checkout) is left alone.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PIP=${PIP:-$REPO/.venv/bin/pip}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
SPEC=${GPUFLEET_ANSIBLE_BUNDLE:-ansible>=11,<13}
CACHE=$REPO/build/collections
DEST=$REPO/.collections/ansible_collections
COLLECTIONS=(containers/podman ansible/posix community/general)

log() { printf 'fetch-collections: %s\n' "$*"; }

mkdir -p "$CACHE" "$DEST"
# The newest ansible wheel or sdist already downloaded.
cached() {
  find "$CACHE" -maxdepth 1 \( -name 'ansible-[0-9]*.whl' -o -name 'ansible-[0-9]*.tar.gz' \) | sort -V | tail -1
}
bundle=$(cached)
if [ -z "$bundle" ]; then
  log "downloading $SPEC from PyPI (no dependencies) into build/collections/"
  "$PIP" download -q --no-deps --dest "$CACHE" "$SPEC"
  bundle=$(cached)
  [ -n "$bundle" ] || { log "pip download left no ansible wheel or sdist in $CACHE" >&2; exit 1; }
fi

"$PYTHON" - "$bundle" "$DEST" "${COLLECTIONS[@]}" <<'EOF'
"""Extract ansible_collections/<ns>/<name>/ from the bundle (wheel or sdist), each once per bundle."""
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

bundle, dest, wanted = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
stamp_text = bundle.name + "\n"


def members():
    """(path inside ansible_collections/, reader) for every regular file of the bundle."""
    if bundle.suffix == ".whl":
        with zipfile.ZipFile(bundle) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, (lambda info=info: zf.read(info)), info.external_attr >> 16
    else:
        with tarfile.open(bundle) as tf:
            for info in tf:
                if info.isfile():
                    yield info.name, (lambda info=info: tf.extractfile(info).read()), info.mode


def current(c):
    stamp = dest / c / ".gpufleet-bundle"
    return stamp.exists() and stamp.read_text() == stamp_text


todo = [c for c in wanted if not current(c)]
if not todo:
    print("fetch-collections: %s already extracted from %s" % (", ".join(c.replace("/", ".") for c in wanted),
                                                              bundle.name))
    sys.exit(0)
for c in todo:
    shutil.rmtree(dest / c, ignore_errors=True)
count = dict.fromkeys(todo, 0)
for name, read, mode in members():
    parts = PurePosixPath(name).parts
    if "ansible_collections" not in parts:
        continue
    rel = parts[parts.index("ansible_collections") + 1:]
    if len(rel) < 3 or "/".join(rel[:2]) not in count or ".." in rel:
        continue
    target = dest.joinpath(*rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(read())
    target.chmod(0o755 if mode & 0o111 else 0o644)
    count["/".join(rel[:2])] += 1
missing = [c for c, n in count.items() if n == 0]
if missing:
    sys.exit("fetch-collections: %s not found in %s" % (", ".join(missing), bundle.name))
for c in todo:
    (dest / c / ".gpufleet-bundle").write_text(stamp_text)
print("fetch-collections: extracted %s from %s" % (", ".join("%s (%d files)" % (c.replace("/", "."), count[c])
                                                            for c in todo), bundle.name))
EOF
