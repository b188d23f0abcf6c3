#!/usr/bin/env bash
# Captures what a real GPU host looks like to the roles, read-only, into DIR: device nodes and
# their groups, the driver, P2P topology, the apt sources, which Python modules and packages exist,
# and which CUDA libraries torch loads with and without the toolkit on LD_LIBRARY_PATH.
# The files become test fixtures (tests/fixtures/hosts/<name>/): tests of real-host paths read them.
# Usage: tools/capture_host.sh DIR [PYTHON]
set -u
out=${1:?usage: capture_host.sh DIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
# Each command's output in its own file; the exit codes in one list (a missing tool is data too).
: >"$out/exit-codes.txt"
cap() { local name=$1; shift; { "$@"; } >"$out/$name" 2>&1; echo "$name $?" >>"$out/exit-codes.txt"; }

cap proc-devices.txt cat /proc/devices
# One line per NVIDIA (and RDMA) node: path, type, major:minor in decimal, mode.
cap dev-nodes.txt sh -c 'for f in /dev/nvidia* /dev/nvidia-caps/* /dev/infiniband/*; do
  [ -e "$f" ] && [ ! -d "$f" ] && stat -c "%n %F %Hr:%Lr %a %U:%G" "$f"; done; true'
cap ls-dev-nvidia.txt ls -l /dev/nvidia* /dev/nvidia-caps
cap proc-driver-nvidia-version.txt cat /proc/driver/nvidia/version
cap lsmod-nvidia.txt sh -c 'grep -E "^(nvidia|ib_|rdma)" /proc/modules'
cap nvidia-modprobe.txt sh -c 'p=$(command -v nvidia-modprobe) && stat -c "%n %a %U:%G" "$p"'
cap nvidia-persistenced.txt sh -c 'command -v nvidia-persistenced'
cap nvidia-smi-topo-m.txt nvidia-smi topo -m
cap nvidia-smi-topo-p2p-r.txt nvidia-smi topo -p2p r
cap nvidia-smi-topo-p2p-w.txt nvidia-smi topo -p2p w
cap os-release.txt cat /etc/os-release
cap apt-sources.txt sh -c 'for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do
  [ -f "$f" ] && { echo "### $f"; cat "$f"; }; done'
cap dpkg-status.txt sh -c 'dpkg-query -W -f="\${Package} \${Version} \${Status}\n" python3-debian python3-apt \
  build-essential python3-dev gcc g++ make cuda-keyring systemd 2>&1'
cap python-modules.txt "$py" -c '
import importlib.util, sys
print(sys.version.split()[0], sys.executable)
for m in ("debian", "apt", "apt_pkg", "torch", "torchvision", "torchaudio", "flashinfer", "sgl_kernel"):
    print(m, "yes" if importlib.util.find_spec(m) else "no")'
# Which libcudart/libcublas torch maps, as it ships them and with the toolkit's lib64 in front.
probe='import torch, sys
torch.zeros(1, device="cuda") @ torch.zeros(1, 1, device="cuda") if torch.cuda.is_available() else None
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcudart" in l or "libcublas" in l or "libnccl" in l})
print(torch.__version__, torch.version.cuda, torch.cuda.is_available()); print("\n".join(libs))'
cap torch-libs.txt env -u LD_LIBRARY_PATH "$py" -c "$probe"
cuda_home=$(ls -d /usr/local/cuda-13* /usr/local/cuda 2>/dev/null | head -n1)
cap torch-libs-ld-library-path.txt env LD_LIBRARY_PATH="$cuda_home/lib64" "$py" -c "$probe"
echo "captured into $out: $(ls "$out" | wc -l) files"
