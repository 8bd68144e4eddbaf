#!/usr/bin/env bash
# Install the system packages gpufleet needs, only those missing. Idempotent; needs root for apt.
#   scripts/install-deps.sh base   # what `make audit` needs (python3 venv support)
#   scripts/install-deps.sh test   # what `make test` needs on top (C compiler for the simulated NVML, ...)
# The test profile's `prometheus` package is there for promtool (the tests run `promtool check metrics` on every
# textfile they write); its Prometheus server is never started: its service start is refused while it installs.
set -euo pipefail

profile=${1:-base}
want=()

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  want+=(python3-venv)
fi

if [ "$profile" = test ]; then
  # iperf3, iptables, libnetfilter-queue-dev: the emulated long link (bench/wanemu.c) of test_links_measured.py
  for pkg in gcc make libc6-dev ethtool iproute2 openssh-client chromium fonts-dejavu-core dpkg-dev prometheus \
      iperf3 iptables libnetfilter-queue-dev; do
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
if [[ " ${want[*]} " == *" prometheus "* ]] && [ ! -e /usr/sbin/policy-rc.d ]; then
  # invoke-rc.d/deb-systemd-invoke ask policy-rc.d; 101 = "action forbidden": the server is installed, not started.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "${want[@]}"
if [[ " ${want[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  systemctl disable --quiet prometheus.service || true  # nor at the next boot: only promtool is wanted
fi
