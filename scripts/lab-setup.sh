#!/usr/bin/env bash
# Container lab for the Molecule scenarios (molecule/): rootful podman, an internal network and local images
# built with debootstrap + `podman import` (no registry is ever pulled from). Idempotent; run as root.
#
#   scripts/lab-setup.sh            everything below, skipping what is already in place
#   scripts/lab-setup.sh --force    rebuild the images even when their recipe did not change
#
# 1. apt: podman runc conmon containernetworking-plugins iptables debootstrap, only those missing.
# 2. /etc/containers/containers.conf with the engine settings this kind of VM needs (runc, cgroupfs, file event
#    log, never pull, nofile limit = `ulimit -Hn`, the lab network as default). A different file not written by
#    this script is kept as containers.conf.gpufleet-backup (first one wins; later ones get a timestamp).
# 3. The internal network the scenarios join (pre-created: molecule's podman driver deletes and recreates networks
#    it is told to manage; ours stays).
# 4. Images, tagged by a hash of their recipe (rebuilt only when the recipe changes) plus the alias :current:
#      localhost/gpufleet-debian12          debootstrap minbase bookworm + python3 iproute2 ethtool kmod procps unzip
#      localhost/gpufleet-debian12-systemd  + systemd systemd-sysv dbus udev (one `podman build --network host` layer)
#      localhost/gpufleet-debian12-watch    + prometheus-node-exporter slurmctld slurmd slurm-client munge (the watch's
#                                           lab: node_exporter textfile and a real Slurm; one more layer)
#      localhost/gpufleet-ubuntu2204        the same on Ubuntu 22.04, only if Ubuntu's archive answers
# debootstrap works under build/lab/ (git-ignored); its .deb cache stays there for faster rebuilds.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
LAB_DIR=${GPUFLEET_LAB_DIR:-$REPO/build/lab}
NETWORK=${GPUFLEET_LAB_NETWORK:-gpufleet-lab}
SUBNET=${GPUFLEET_LAB_SUBNET:-10.89.77.0/24}
DEBIAN_MIRROR=${GPUFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
UBUNTU_MIRROR=${GPUFLEET_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
CONF=/etc/containers/containers.conf
FORCE=0
[ "${1:-}" = --force ] && FORCE=1

log() { printf 'lab-setup: %s\n' "$*"; }
die() { printf 'lab-setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (rootful podman, apt, debootstrap)"
started=$SECONDS

# ----------------------------------------------------------------------------------------------------- packages
want=()
for pkg in podman runc conmon containernetworking-plugins iptables debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || want+=("$pkg")
done
if [ ${#want[@]} -gt 0 ]; then
  log "installing ${want[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No recommends: they would bring crun (fails on this hybrid cgroup v1 VM), slirp4netns, fuse-overlayfs, buildah.
  apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi

# ------------------------------------------------------------------------------------------ engine settings
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
conf_text="# Written by gpufleet scripts/lab-setup.sh: rootful podman on a hybrid cgroup v1 VM without a registry.
[containers]
# podman's default nofile (1048576) is above this machine's hard limit: setrlimit would fail in every container.
default_ulimits = [\"nofile=${nofile}:${nofile}\", \"nproc=32768:32768\"]

[engine]
# crun fails on hybrid cgroup v1 here; runc works.
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
# Images are built locally (scripts/lab-setup.sh); nothing is ever pulled.
pull_policy = \"never\"

[network]
# containernetworking-plugins is what is installed; pin it so a later netavark install does not hide our network.
network_backend = \"cni\"
# A container started without --network joins the internal lab network, not podman's default bridge: that one is
# a gateway, and the CNI bridge plugin turns on net.ipv4.ip_forward for the whole machine when a container joins it.
default_network = \"${NETWORK}\"
"
mkdir -p /etc/containers
if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$(printf '%s' "$conf_text")" ]; then
  :
else
  if [ -f "$CONF" ] && head -1 "$CONF" | grep -q '^# Written by gpufleet scripts/lab-setup.sh'; then
    log "updated $CONF (an earlier version of these settings)"
  elif [ -f "$CONF" ]; then
    backup=$CONF.gpufleet-backup
    [ -e "$backup" ] && backup=$CONF.gpufleet-backup.$(date -u +%Y%m%dT%H%M%SZ)
    cp -p "$CONF" "$backup"
    log "replaced $CONF (the previous file is kept as $backup)"
  else
    log "wrote $CONF"
  fi
  printf '%s' "$conf_text" >"$CONF.tmp.$$"
  mv "$CONF.tmp.$$" "$CONF"
fi

# --------------------------------------------------------------------------------------------------- network
# --internal: no gateway, no NAT, no route out; containers reach each other only. Molecule reaches them through
# `podman exec` (containers.podman.podman connection), not the network.
# Asked with podman's stock default network: once containers.conf names $NETWORK as default_network, podman 4.3
# (CNI) makes up an in-memory network of that name on its default bridge (cni-podman0, 10.88.0.0/16, a NAT gateway)
# when no file defines it, and `podman network exists` says yes - the lab then ran on the gateway bridge.
net_conf=$(mktemp)
printf '[network]\nnetwork_backend = "cni"\n' >"$net_conf"
if ! CONTAINERS_CONF=$net_conf podman network exists "$NETWORK"; then
  CONTAINERS_CONF=$net_conf podman network create --internal --subnet "$SUBNET" "$NETWORK" >/dev/null
  log "created internal network $NETWORK ($SUBNET)"
fi
rm -f "$net_conf"
[ "$(podman network inspect --format '{{.Internal}}' "$NETWORK")" = true ] ||
  die "network $NETWORK exists but is not internal (podman network inspect $NETWORK); remove it and run again"

# ---------------------------------------------------------------------------------------------------- images
mkdir -p "$LAB_DIR"
sha12() { sha256sum | cut -c1-12; }

# ensure_alias IMAGE TAG: point IMAGE:current at IMAGE:TAG.
ensure_alias() {
  local want have
  want=$(podman image inspect --format '{{.Id}}' "$1:$2")
  have=$(podman image inspect --format '{{.Id}}' "$1:current" 2>/dev/null || true)
  [ "$want" = "$have" ] || podman tag "$1:$2" "$1:current"
}

# prune_old IMAGE TAG: drop IMAGE's other recipe tags (older recipes), unless a container still uses them.
prune_old() {
  local ref
  for ref in $(podman images --format '{{.Repository}}:{{.Tag}}' "$1"); do
    case $ref in "$1:$2" | "$1:current") continue ;; esac
    podman rmi "$ref" >/dev/null 2>&1 && log "removed the outdated $ref" || true
  done
}

# The recipe of a debootstrap image: its arguments and the code that builds it (`declare -f` drops comments, so
# only a change of what runs makes a new tag). KEY is the fingerprint of the archive key ("" for Debian's own
# keyring), not a path: the tags are the same in every checkout.
recipe() { printf 'debootstrap --variant=minbase --include=%s key=%s %s %s\n' "$4" "$3" "$1" "$2"; }
recipe_tag() { { recipe "$@"; declare -f rootfs_image; } | sha12; }

# rootfs_image NAME SUITE MIRROR KEY INCLUDE: debootstrap + podman import, if not built yet.
rootfs_image() {
  local name=$1 suite=$2 mirror=$3 key=$4 include=$5
  local tag dir t0 message keyring=()
  tag=$(recipe_tag "$suite" "$mirror" "$key" "$include")
  [ -n "$key" ] && keyring=(--keyring="$LAB_DIR/archive-$key.gpg")
  if [ "$FORCE" = 0 ] && podman image exists "localhost/$name:$tag"; then
    ensure_alias "localhost/$name" "$tag"
    log "image localhost/$name:$tag is up to date"
    return 0
  fi
  dir=$LAB_DIR/$name.rootfs
  rm -rf "$dir"
  mkdir -p "$LAB_DIR/debootstrap-cache/$suite"
  t0=$SECONDS
  log "building localhost/$name:$tag (debootstrap $suite, about a minute)"
  if ! debootstrap --variant=minbase --include="$include" --cache-dir="$LAB_DIR/debootstrap-cache/$suite" \
      "${keyring[@]}" "$suite" "$dir" "$mirror" >"$LAB_DIR/$name.debootstrap.log" 2>&1; then
    tail -20 "$LAB_DIR/$name.debootstrap.log" >&2
    die "debootstrap $suite failed (full log: $LAB_DIR/$name.debootstrap.log)"
  fi
  # Smaller image, same behaviour: package lists and caches come back with `apt-get update`.
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb \
    "$dir"/var/log/*.log "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/*
  # Nothing of the building machine in the image: podman provides hostname and resolv.conf; systemd a machine id.
  : >"$dir/etc/machine-id"
  rm -f "$dir/etc/hostname"
  : >"$dir/etc/resolv.conf"
  message="gpufleet lab: $(recipe "$suite" "$mirror" "$key" "$include")"
  tar -C "$dir" --numeric-owner -c . |
    podman import -q --change 'CMD ["/bin/bash"]' --message "$message" - "localhost/$name:$tag" >/dev/null
  rm -rf "$dir"
  ensure_alias "localhost/$name" "$tag"
  prune_old "localhost/$name" "$tag"
  log "built localhost/$name:$tag in $((SECONDS - t0)) s"
}

# layer_image BASE_NAME NAME PACKAGES [BEFORE] [AFTER]: one `podman build` layer over BASE_NAME:current that
# apt-installs PACKAGES (no recommends); BEFORE and AFTER are shell commands run just before and after apt-get
# install in the same RUN (each ending in " && " / starting with " && "). The tag hashes the base image and the
# Containerfile, so a changed package list or base makes a new image and nothing else does.
layer_image() {
  local base=$1 name=$2 packages=$3 before=${4:-} after=${5:-} base_id containerfile tag ctx t0
  base_id=$(podman image inspect --format '{{.Id}}' "localhost/$base:current")
  containerfile="FROM localhost/$base:current
RUN ${before}apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      $packages >/dev/null${after} && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && : >/etc/machine-id
STOPSIGNAL SIGRTMIN+3
CMD [\"/sbin/init\"]
"
  tag=$(printf '%s\n%s' "$base_id" "$containerfile" | sha12)
  if [ "$FORCE" = 0 ] && podman image exists "localhost/$name:$tag"; then
    ensure_alias "localhost/$name" "$tag"
    log "image localhost/$name:$tag is up to date"
    return 0
  fi
  ctx=$LAB_DIR/$name.context
  rm -rf "$ctx"
  mkdir -p "$ctx"
  printf '%s' "$containerfile" >"$ctx/Containerfile"
  t0=$SECONDS
  log "building localhost/$name:$tag (podman build: apt-get install $packages from Debian's mirror)"
  # --network host: the build step's apt reaches Debian's mirror; the lab containers themselves never do.
  if ! podman build --network host --pull=never -t "localhost/$name:$tag" -f "$ctx/Containerfile" "$ctx" \
      >"$LAB_DIR/$name.build.log" 2>&1; then
    tail -20 "$LAB_DIR/$name.build.log" >&2
    die "podman build $name failed (full log: $LAB_DIR/$name.build.log)"
  fi
  rm -rf "$ctx"
  ensure_alias "localhost/$name" "$tag"
  prune_old "localhost/$name" "$tag"
  log "built localhost/$name:$tag in $((SECONDS - t0)) s"
}

# What a GPU server's audit reads with (python3, ethtool, ip, lsmod, ps). unzip: the prereqs role's offline
# method unpacks the nvidia-ml-py wheel with ansible.builtin.unarchive, which needs it on the target.
PACKAGES=python3,iproute2,ethtool,kmod,procps,ca-certificates,unzip
rootfs_image gpufleet-debian12 bookworm "$DEBIAN_MIRROR" "" "$PACKAGES"
layer_image gpufleet-debian12 gpufleet-debian12-systemd "systemd systemd-sysv dbus udev"

# The watch's lab (issue 16): the on-host checker next to what it reports to, from Debian's own packages:
# node_exporter's textfile collector (Prometheus end-to-end test) and a real Slurm 22.05 (slurmctld, slurmd,
# scontrol, munge) for the drain/resume tests (tests/integration/test_watch_slurm.py).
# A policy-rc.d that answers 101 ("action forbidden", Debian policy 9.3.3 / invoke-rc.d(8)) keeps every maintainer
# script from starting its daemon during the build; it is removed after. The units stay enabled as Debian ships
# them: a container booted with /sbin/init starts node_exporter, and munge and Slurm once the lab has written their
# configuration. The munge key the package generates is deleted: no secret in an image; each lab writes its own
# shared /etc/munge/munge.key.
layer_image gpufleet-debian12-systemd gpufleet-debian12-watch \
  "prometheus-node-exporter slurmctld slurmd slurm-client munge" \
  "printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && " \
  " && rm -f /usr/sbin/policy-rc.d /etc/munge/munge.key"

# Ubuntu 22.04: only when its archive is reachable (checked once, 5 s); a skipped image is said, never faked.
# Debian has no Ubuntu keyring package: the ubuntu-keyring .deb comes from the archive itself and only the key with
# the pinned fingerprint (Ubuntu Archive Automatic Signing Key (2018)) is kept; debootstrap then verifies the
# archive with it. This debootstrap (Debian 12) knows jammy, not noble. GPUFLEET_LAB_UBUNTU=0 skips it.
UBUNTU_KEY_FPR=F6ECB3762474EDA9D21B7022871920D1991BC93C
UBUNTU_KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2021.03.26_all.deb
ubuntu_keyring() {
  local tmp=$LAB_DIR/ubuntu-keyring.tmp out=$LAB_DIR/archive-$UBUNTU_KEY_FPR.gpg
  [ -s "$out" ] && return 0
  rm -rf "$tmp"
  mkdir -p "$tmp/gnupg"
  chmod 700 "$tmp/gnupg"
  wget -q -T 10 -O "$tmp/keyring.deb" "$UBUNTU_MIRROR/$UBUNTU_KEYRING_DEB" &&
    wget -q -T 10 -O "$tmp/Release" "$UBUNTU_MIRROR/dists/jammy/Release" &&
    wget -q -T 10 -O "$tmp/Release.gpg" "$UBUNTU_MIRROR/dists/jammy/Release.gpg" || return 1
  dpkg-deb -x "$tmp/keyring.deb" "$tmp/x"
  gpg -q --homedir "$tmp/gnupg" --no-default-keyring --keyring "$tmp/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" \
    --export "$UBUNTU_KEY_FPR" >"$tmp/pinned.gpg" 2>/dev/null
  gpgv --status-fd 1 --keyring "$tmp/pinned.gpg" "$tmp/Release.gpg" "$tmp/Release" 2>/dev/null |
    grep -q "^\[GNUPG:\] VALIDSIG $UBUNTU_KEY_FPR " || return 1
  mv "$tmp/pinned.gpg" "$out"
  rm -rf "$tmp"
}
if [ "${GPUFLEET_LAB_UBUNTU:-1}" = 1 ]; then
  ubuntu_tag=$(recipe_tag jammy "$UBUNTU_MIRROR" "$UBUNTU_KEY_FPR" "$PACKAGES")
  if [ "$FORCE" = 0 ] && podman image exists "localhost/gpufleet-ubuntu2204:$ubuntu_tag"; then
    ensure_alias localhost/gpufleet-ubuntu2204 "$ubuntu_tag"
    log "image localhost/gpufleet-ubuntu2204:$ubuntu_tag is up to date"
  elif ! wget -q --spider -T 5 -t 1 "$UBUNTU_MIRROR/dists/jammy/Release"; then
    log "skipping the Ubuntu 22.04 image: $UBUNTU_MIRROR is not reachable from this machine" \
      "(GPUFLEET_UBUNTU_MIRROR=<reachable mirror> builds it)"
  elif ! ubuntu_keyring; then
    log "skipping the Ubuntu 22.04 image: could not get Ubuntu's archive key $UBUNTU_KEY_FPR from $UBUNTU_MIRROR" \
      "or it did not verify jammy's Release file"
  else
    rootfs_image gpufleet-ubuntu2204 jammy "$UBUNTU_MIRROR" "$UBUNTU_KEY_FPR" "$PACKAGES"
  fi
fi

ready=()
for image in gpufleet-debian12 gpufleet-debian12-systemd gpufleet-debian12-watch gpufleet-ubuntu2204; do
  podman image exists "localhost/$image:current" && ready+=("localhost/$image:current")
done
log "lab ready in $((SECONDS - started)) s: network $NETWORK, images ${ready[*]}"
