#!/usr/bin/env bash
# Cache a wheel of every NVML binding release in tests/sim/nvml/bindings.txt (and the dependencies of the pynvml
# wrapper packages) under build/wheels/nvml-bindings, for the binding matrix test to install offline
# (pip --no-index --find-links). Releases already cached are not fetched again. Sdists (nvidia-ml-py3 7.352.0) are
# built into a wheel once.
#   scripts/fetch-nvml-bindings.sh [PYTHON] [DEST]
set -euo pipefail

python=${1:-.venv/bin/python}
dest=${2:-build/wheels/nvml-bindings}
list=tests/sim/nvml/bindings.txt
mkdir -p "$dest"

fetch() {  # spec
  "$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$dest" "$1"
}

while read -r spec _; do
  [[ -z $spec || $spec == \#* ]] && continue
  name=${spec%%==*}
  version=${spec#*==}
  wheel=$(echo "$name" | tr - _)-$version-
  if compgen -G "$dest/$wheel*.whl" >/dev/null; then
    continue
  fi
  echo "fetch-nvml-bindings: $spec"
  fetch "$spec"
done <"$list"
