#!/usr/bin/env bash
# Recipe of the lab node image: Debian 12 with systemd as PID 1 and what Ansible needs, reached as
# a real fleet is: SSH as `ubuntu` with password-less sudo (labctl installs the lab's key per node).
# As a cloud image ships: no python3-debian (the cuda role installs it from the lab's distro
# mirror). build-essential and python3-dev are in the image because their closure is too large
# for the lab mirror; the sglang role still installs them, and finds them present. nftables likewise (the
# router role's restart holds new connections with it).
# The image tag is this file's hash, so editing it is what triggers a rebuild.
# Usage: recipe.sh ROOTFS_DIR
set -euo pipefail
rootfs=$1
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,python3,python3-apt,python3-venv,python3-packaging,build-essential,python3-dev,procps,iproute2,nftables,ca-certificates,curl,sudo,openssh-server \
  bookworm "$rootfs" "$mirror"
# The cloud image's user: password-less sudo as cloud-init writes it, no password at all.
chroot "$rootfs" useradd --create-home --shell /bin/bash ubuntu
echo 'ubuntu ALL=(ALL) NOPASSWD:ALL' > "$rootfs/etc/sudoers.d/90-cloud-init-users"
chmod 0440 "$rootfs/etc/sudoers.d/90-cloud-init-users"
# sshd runs only in inetd mode (`podman exec -i NODE /usr/sbin/sshd -i`, labctl's ProxyCommand):
# nodes share one loopback, so none listens on port 22. Each node makes its own host keys at boot.
rm -f "$rootfs"/etc/ssh/ssh_host_*
cat > "$rootfs/etc/systemd/system/lab-ssh-host-keys.service" <<'UNIT'
[Unit]
Description=Lab: this node's own SSH host keys
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/lab-ssh-host-keys.service "$rootfs/etc/systemd/system/multi-user.target.wants/"
echo 'd /run/sshd 0755 root root -' > "$rootfs/etc/tmpfiles.d/lab-sshd.conf"
# An empty machine-id makes systemd generate one per container.
: > "$rootfs/etc/machine-id"
# Units that have no job inside a container and slow or break its boot.
for unit in systemd-remount-fs.service systemd-udevd.service systemd-udev-trigger.service \
            getty.target console-getty.service ssh.service ssh.socket systemd-logind.service apt-daily.timer \
            apt-daily-upgrade.timer e2scrub_reap.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
# The lab's pip does not byte-compile what it installs (a real host's pip, without this file, does): the
# lab's installs of the real sglang wheel's dependencies are CPU-bound on the test machine, and the lab
# imports few of those modules (docs/lab.md). The key is `compile = false`: pip reads a `no-` option's
# value inverted, so `no-compile = true` compiles (pip 23.0.1 here; tests/lab/test_lab_fleet.py checks).
printf '[install]\ncompile = false\n' > "$rootfs/etc/pip.conf"
# Lab nodes are offline (--network=none): no Debian source to fail on; the lab's own apt mirror
# is mounted at /srv/lab-apt and configured by the roles under test.
rm -f "$rootfs"/etc/apt/sources.list "$rootfs"/etc/apt/sources.list.d/*
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
