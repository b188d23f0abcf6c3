#!/bin/sh
# Managed by sglang-fleet (roles/sglang_server): the NVIDIA device nodes the server opens, made as root
# by <service>-gpu-init.service before the server starts.
#   gpu_init.sh NVIDIA_MODPROBE GPUS [DEV]
# Where NVIDIA_MODPROBE is installed, it runs `-u -c0` (loads nvidia-uvm, creates DEV/nvidia-uvm and
# DEV/nvidiactl) and `-cN` for every further GPU (DEV/nvidiaN), and fails when one of them fails. Where it
# is not (the H200 host of tests/fixtures/hosts/h200-driver580/: Ubuntu 24.04, driver 580, no
# nvidia-modprobe, its nodes made without it), the nodes must already be there: it passes naming them,
# or fails naming the missing ones. DEV is /dev; the tests give a tree made from a host's capture.
set -u
modprobe=$1
gpus=$2
dev=${3:-/dev}

if [ -x "$modprobe" ]; then
    "$modprobe" -u -c0 || { echo "gpu-init: $modprobe -u -c0 failed" >&2; exit 1; }
    n=1
    while [ "$n" -lt "$gpus" ]; do
        "$modprobe" -c"$n" || { echo "gpu-init: $modprobe -c$n failed" >&2; exit 1; }
        n=$((n + 1))
    done
    echo "gpu-init: $modprobe made the nodes of $gpus GPU(s)"
    exit 0
fi

nodes="$dev/nvidiactl $dev/nvidia-uvm"
n=0
while [ "$n" -lt "$gpus" ]; do
    nodes="$nodes $dev/nvidia$n"
    n=$((n + 1))
done
missing=
for node in $nodes; do
    [ -c "$node" ] || missing="$missing $node"
done
if [ -n "$missing" ]; then
    echo "gpu-init: no $modprobe on this host, and no device node${missing}: load the NVIDIA driver and" \
         "nvidia-uvm and create the nodes (nvidia-modprobe does both), or set sglang_server_nvidia_modprobe" >&2
    exit 1
fi
echo "gpu-init: no $modprobe on this host; its nodes are there:$(printf ' %s' $nodes)"
