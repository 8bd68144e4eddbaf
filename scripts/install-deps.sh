#!/usr/bin/env bash
# Install the system packages gpufleet needs, only those missing. Idempotent; needs root for apt.
#   scripts/install-deps.sh base   # what `make audit` needs (python3 venv support)
#   scripts/install-deps.sh test   # what `make test` needs on top (C compiler for the simulated NVML, ...)
set -euo pipefail

profile=${1:-base}
want=()

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  want+=(python3-venv)
fi

if [ "$profile" = test ]; then
  for pkg in gcc make libc6-dev ethtool iproute2 openssh-client chromium fonts-dejavu-core dpkg-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || want+=("$pkg")
  done
fi

if [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${want[*]} (run as root, or install them)" >&2
  exit 1
fi
echo "install-deps: installing ${want[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${want[@]}"
