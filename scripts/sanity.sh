#!/usr/bin/env bash
# `ansible-test sanity` for the gpufleet.tuning collection, without Docker.
#
#   scripts/sanity.sh                 # every sanity test, Python 3.11
#   scripts/sanity.sh --test pylint   # extra arguments go to ansible-test sanity
#
# What it tests: the files that ship — git's file list (tracked, plus new files git does not ignore) minus
# galaxy.yml's build_ignore — copied into a temporary ansible_collections/gpufleet/tuning, the layout
# ansible-test needs. Results (junit) land in build/sanity/.
#
# How it runs: `--local` (the controller is this venv's Python 3.11, which already has ansible-core) and
# `--python 3.11`. ansible-test still puts each sanity tool (pylint, yamllint, validate-modules, ...) in a venv
# of its own, and creating one needs two things this machine does not give it:
#   1. pip in the new venv: ansible-test downloads a get-pip script from ci-files.testing.ansible.com
#      (unreachable) unless ~/.ansible/test/cache/get_pip_<version>.py exists. We put a stand-in there that
#      installs pip from the interpreter's own ensurepip (offline), then the pinned pip through the index.
#   2. our pip settings: ansible-test runs pip with a filtered environment (HOME, PATH, LC_ALL, LD_LIBRARY_PATH
#      survive; PIP_CERT, PIP_INDEX_URL, SSL_CERT_FILE ... do not). pip still reads config files, and HOME
#      survives, so the effective settings of the caller (`pip config list`: files and PIP_* variables) are
#      written to $HOME/.config/pip/pip.conf.
# Both live in a HOME of ansible-test's own (GPUFLEET_SANITY_HOME, default ~/.cache/gpufleet/ansible-test):
# the user's ~/.ansible is left alone, and the tool venvs are created once and reused by later runs.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$repo/.venv}
venv=$(cd "$venv" && pwd)
py=$venv/bin/python
python_version=${SANITY_PYTHON:-3.11}
test_home=${GPUFLEET_SANITY_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet/ansible-test}
results=$repo/build/sanity

for tool in "$py" "$venv/bin/ansible-test"; do
  [ -x "$tool" ] || { echo "sanity: $tool missing (run make venv / install '.[test]')" >&2; exit 3; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gpufleet/tuning
mkdir -p "$dest" "$test_home"

# 1. The shipped files: git's list minus build_ignore, matched the way `ansible-galaxy collection build` does.
"$py" - "$repo" "$work/files" <<'EOF'
import fnmatch, os, subprocess, sys
import yaml

repo, out = sys.argv[1:]
galaxy = yaml.safe_load(open(os.path.join(repo, "galaxy.yml")))
# ansible-galaxy's own defaults (but galaxy.yml: ansible-test reads the collection's metadata from it), then
# build_ignore
patterns = ["MANIFEST.json", "FILES.json", "galaxy.yaml", ".git", "*.pyc", "*.retry", "tests/output",
            "%s-%s-*.tar.gz" % (galaxy["namespace"], galaxy["name"])] + list(galaxy.get("build_ignore") or [])
skip_dirs = {"CVS", ".bzr", ".hg", ".git", ".svn", "__pycache__", ".tox"}
listed = subprocess.run(["git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        check=True, capture_output=True).stdout.decode().split("\0")

def shipped(rel):
    parts = rel.split("/")
    if any(p in skip_dirs for p in parts[:-1]):
        return False
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return not any(fnmatch.fnmatch(p, pat) for p in prefixes for pat in patterns)

files = sorted({f for f in listed if f and os.path.lexists(os.path.join(repo, f)) and shipped(f)})
with open(out, "wb") as fh:
    fh.write("\0".join(files).encode() + b"\0")
print("sanity: %d files" % len(files))
EOF
tar -C "$repo" --null -T "$work/files" -cf - | tar -C "$dest" -xf -

# 2. pip settings and the get-pip stand-in, in ansible-test's own HOME.
mkdir -p "$test_home/.config/pip"
"$py" - "$test_home/.config/pip/pip.conf" <<'EOF'
import ast, configparser, subprocess, sys

lines = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True,
                       text=True).stdout.splitlines()
conf = configparser.RawConfigParser()
for line in lines:  # `section.key='value'`, files in pip's load order, then PIP_* variables (":env:")
    key, _, value = line.partition("=")
    section, _, name = key.rpartition(".")
    section = "global" if section in (":env:", "") else section
    if not conf.has_section(section):
        conf.add_section(section)
    conf.set(section, name, ast.literal_eval(value))
with open(sys.argv[1], "w") as fh:
    fh.write("# written by gpufleet scripts/sanity.sh from `pip config list` of the caller\n")
    conf.write(fh)
EOF
pip_version=$("$py" -c 'import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$python_version"'"))["pip"])')
mkdir -p "$test_home/.ansible/test/cache"
cat >"$test_home/.ansible/test/cache/get_pip_${pip_version//./_}.py" <<'EOF'
"""Stand-in for get-pip.py, written by gpufleet scripts/sanity.sh (ansible-test's download site is unreachable).

ansible-test runs it in a new venv made --without-pip, with get-pip's arguments (pip==X, --no-setuptools,
--no-wheel, pip options). pip comes from the interpreter's bundled ensurepip (offline); then the requested
version is installed through the configured index ($HOME/.config/pip/pip.conf).
"""
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", *args])
if "--no-setuptools" in sys.argv:  # ensurepip < 3.12 also installs setuptools
    subprocess.call([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", "setuptools"])
EOF

# 3. Run it.
rm -rf "$results"
mkdir -p "$results"
start=$SECONDS
set +e
(
  cd "$dest"
  env HOME="$test_home" PATH="$venv/bin:$PATH" ansible-test sanity --local --python "$python_version" \
    --color no --junit "$@"
) 2>&1 | tee "$results/sanity.log"
rc=${PIPESTATUS[0]}
set -e
cp -r "$dest/tests/output/." "$results/" 2>/dev/null || true

tests=$(grep -c '^Running sanity test "' "$results/sanity.log" || true)
if [ "$rc" -eq 0 ]; then
  echo "sanity: PASSED, $tests tests, Python $python_version, $((SECONDS - start)) s (log and junit: ${results#"$repo"/})"
else
  echo "sanity: FAILED (rc $rc), $tests tests run, Python $python_version, $((SECONDS - start)) s" >&2
  grep -A50 "sanity test(s) listed below" "$results/sanity.log" >&2 || true
fi
exit "$rc"
