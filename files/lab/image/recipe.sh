#!/usr/bin/env bash
# Recipe of the lab node image: Debian 12 with systemd as PID 1 and what Ansible needs.
# As a cloud image ships: no python3-debian (the cuda role installs it from the lab's distro
# mirror). build-essential and python3-dev are in the image because their closure is too large
# for the lab mirror; the sglang role still installs them, and finds them present.
# The image tag is this file's hash, so editing it is what triggers a rebuild.
# Usage: recipe.sh ROOTFS_DIR
set -euo pipefail
rootfs=$1
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,python3,python3-apt,python3-venv,python3-packaging,build-essential,python3-dev,procps,iproute2,ca-certificates,curl,sudo \
  bookworm "$rootfs" "$mirror"
# An empty machine-id makes systemd generate one per container.
: > "$rootfs/etc/machine-id"
# Units that have no job inside a container and slow or break its boot.
for unit in systemd-remount-fs.service systemd-udevd.service systemd-udev-trigger.service \
            getty.target console-getty.service systemd-logind.service apt-daily.timer \
            apt-daily-upgrade.timer e2scrub_reap.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
# Lab nodes are offline (--network=none): no Debian source to fail on; the lab's own apt mirror
# is mounted at /srv/lab-apt and configured by the roles under test.
rm -f "$rootfs"/etc/apt/sources.list "$rootfs"/etc/apt/sources.list.d/*
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
