#!/usr/bin/env bash
# The lab's dummy NVIDIA packages and a flat apt repository of them, built on the controller.
#
#   build-repo.sh OUT [EXTRA_DEB_DIR] [LEAVE_OUT]
#
# OUT gets the .debs, Packages(.gz) and Release: use it as `deb [trusted=yes] file:OUT ./`. Every .deb in
# EXTRA_DEB_DIR (e.g. python3-apt for a target without it) is added to the repository as it is. LEAVE_OUT names a
# package none of whose versions the repository offers (e.g. nvidia-fabricmanager-550: a repository without the
# fabric manager of the driver's version).
#
# Packages (names and versions as in NVIDIA's CUDA repository for Ubuntu; each ships only
# /usr/share/doc/<name>/VERSION and, for the driver and fabric manager, a systemd unit; no kernel module; the fabric
# manager's /usr/bin/nv-fabricmanager behaves as NVIDIA's does where the lab can tell: `--version` prints its version,
# and as a daemon it aborts unless the loaded driver (the simulated NVML's driver_version) is exactly its version):
#   branch 535: nvidia-driver-535, nvidia-dkms-535, nvidia-fabricmanager-535, libnvidia-nscq-535 (535.183.01-1)
#   branch 550: nvidia-driver-550 550.54.15-1, 550.90.07-1; nvidia-dkms-550 550.54.15-1, 550.90.07-1;
#               nvidia-fabricmanager-550 550.54.15-1, 550.90.07-1, 550.127.05-1; libnvidia-nscq-550 550.90.07-1,
#               550.127.05-1
#   traps:      nvidia-driver-550 560.35.03-0gpufleet1 (a "transitional" version from another branch: only the
#               pin keeps apt from taking it); fabric manager/nscq 550.127.05-1 (newer than any driver: SW-FM-001
#               must pick the driver's version, not the newest)
# The driver and DKMS packages provide and conflict with a virtual package per kind, as NVIDIA's do, so apt
# replaces one branch with another; libnvidia-nscq does not, so the role itself must remove the old branch's.
# Needs dpkg-deb (dpkg) and dpkg-scanpackages (dpkg-dev).
set -euo pipefail

out=${1:?usage: build-repo.sh OUT [EXTRA_DEB_DIR]}
extra=${2:-}
leave_out=${3:-}
for tool in dpkg-deb dpkg-scanpackages; do
  command -v "$tool" >/dev/null || { echo "build-repo: $tool is missing (apt-get install dpkg-dev)" >&2; exit 3; }
done
arch=$(dpkg --print-architecture)
rm -rf "$out"
mkdir -p "$out/src"

# pkg NAME VERSION [CONTROL-LINE...]
pkg() {
  local name=$1 version=$2 dir
  shift 2
  dir=$out/src/${name}_$version
  mkdir -p "$dir/DEBIAN" "$dir/usr/share/doc/$name"
  printf '%s\n' "$version" >"$dir/usr/share/doc/$name/VERSION"
  case $name in
    nvidia-driver-*) unit nvidia-persistenced "NVIDIA Persistence Daemon (gpufleet lab dummy)" ;;
    nvidia-fabricmanager-*)
      unit nvidia-fabricmanager "NVIDIA fabric manager service (gpufleet lab dummy)" /usr/bin/nv-fabricmanager
      fabricmanager_binary "${version%-*}"
      ;;
  esac
  {
    printf 'Package: %s\nVersion: %s\nArchitecture: %s\n' "$name" "$version" "$arch"
    printf 'Maintainer: gpufleet lab <lab@example.invalid>\nSection: non-free/libs\nPriority: optional\n'
    [ $# -gt 0 ] && printf '%s\n' "$@"
    printf 'Description: gpufleet lab dummy of %s %s\n' "$name" "$version"
    printf ' A marker file only: no kernel module, no libraries.\n'
  } >"$dir/DEBIAN/control"
  dpkg-deb --root-owner-group -Zgzip -z1 --build "$dir" "$out/${name}_${version}_$arch.deb" >/dev/null
}

# unit NAME DESCRIPTION [EXEC]: a unit that runs without a GPU (installed into the package being built, $dir).
unit() {
  mkdir -p "$dir/lib/systemd/system"
  printf '[Unit]\nDescription=%s\n\n[Service]\nExecStart=%s\n\n[Install]\nWantedBy=multi-user.target\n' \
    "$2" "${3:-/bin/sleep infinity}" >"$dir/lib/systemd/system/$1.service"
}

# fabricmanager_binary UPSTREAM: /usr/bin/nv-fabricmanager of the package being built. Its process name is
# nv-fabricmanager (a script keeps its own name while it loops), which is how the audit sees it running.
fabricmanager_binary() {
  mkdir -p "$dir/usr/bin"
  cat >"$dir/usr/bin/nv-fabricmanager" <<EOF
#!/bin/sh
# gpufleet lab dummy of NVIDIA's nv-fabricmanager $1
case "\${1:-}" in -v|--version) echo "Fabric Manager version is : $1"; exit 0 ;; esac
loaded=\$(sed -n 's/^driver_version=//p' /etc/gpufleet-sim/nvml.state 2>/dev/null)
if [ "\$loaded" != "$1" ]; then
  echo "fabric manager $1: the loaded driver (\${loaded:-none}) is not compatible, aborting" >&2
  exit 1
fi
while :; do sleep 3600; done
EOF
  chmod 0755 "$dir/usr/bin/nv-fabricmanager"
}

driver() { # BRANCH VERSION
  pkg "nvidia-driver-$1" "$2" "Depends: nvidia-dkms-$1 (= $2)" \
    "Provides: nvidia-driver-binary" "Conflicts: nvidia-driver-binary" "Replaces: nvidia-driver-binary"
  pkg "nvidia-dkms-$1" "$2" \
    "Provides: nvidia-dkms-kernel" "Conflicts: nvidia-dkms-kernel" "Replaces: nvidia-dkms-kernel"
}
fabricmanager() { # BRANCH VERSION
  pkg "nvidia-fabricmanager-$1" "$2" \
    "Provides: nvidia-fabricmanager" "Conflicts: nvidia-fabricmanager" "Replaces: nvidia-fabricmanager"
}

driver 535 535.183.01-1
fabricmanager 535 535.183.01-1
pkg libnvidia-nscq-535 535.183.01-1
for v in 550.54.15-1 550.90.07-1; do driver 550 "$v"; done
for v in 550.54.15-1 550.90.07-1 550.127.05-1; do fabricmanager 550 "$v"; done
for v in 550.90.07-1 550.127.05-1; do pkg libnvidia-nscq-550 "$v"; done
pkg nvidia-driver-550 560.35.03-0gpufleet1 \
  "Provides: nvidia-driver-binary" "Conflicts: nvidia-driver-binary" "Replaces: nvidia-driver-binary"
rm -rf "$out/src"
if [ -n "$leave_out" ]; then
  rm -f "$out/${leave_out}"_*.deb
fi

if [ -n "$extra" ]; then
  cp "$extra"/*.deb "$out/"
fi

cd "$out"
dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages
gzip -9 -n -k Packages
{
  printf 'Origin: gpufleet-lab\nLabel: gpufleet-lab\nSuite: lab\nCodename: lab\nArchitectures: %s all\n' "$arch"
  printf 'Date: %s\nDescription: gpufleet lab: dummy NVIDIA driver packages\n' "$(LC_ALL=C date -Ru)"
  for sum in MD5Sum:md5sum SHA256:sha256sum; do
    printf '%s:\n' "${sum%%:*}"
    for f in Packages Packages.gz; do
      printf ' %s %s %s\n' "$(${sum#*:} "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
    done
  done
} >Release
echo "build-repo: $(ls ./*.deb | wc -l) packages in $out"
