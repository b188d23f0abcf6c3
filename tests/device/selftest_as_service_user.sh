#!/bin/sh
# On a real multi-GPU host (the device machine, as root): run the fusion self-test as the server
# role runs it, as the unprivileged service user with its own home, and record what it leaves.
# It shows that the GPUs answer that user and that flashinfer's JIT builds land in its home, where
# the server, the same user, finds them. Usage: selftest_as_service_user.sh OUT_DIR (wheels in .whl/)
set -eu
out=$1
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/flashinfer_python-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/tabulate-*.whl
chmod -R a+rX /tmp/site
id sglang >/dev/null 2>&1 || useradd --system --home-dir /var/lib/sglang --create-home --shell /usr/sbin/nologin sglang
rm -rf /var/lib/sglang-fleet/fusion-selftest  # a clean first run
install -d -o sglang -g sglang -m 0755 /var/lib/sglang-fleet/fusion-selftest
install -D -m 0644 roles/sglang_server/files/fusion_selftest.py /usr/local/lib/sglang-fleet/fusion_selftest.py
ls -l /dev/nvidia* > "$out/dev-nvidia.txt" 2>&1
cuda=${CUDA_HOME:-/usr/local/cuda}
py=$(command -v python3)  # the venv that holds torch, as /opt/sglang/venv does on a fleet host
# The role's PATH: the venv's bin first (flashinfer's JIT runs `ninja` from PATH; pip put it there).
# SELFTEST_PATH_WITHOUT_VENV=1 gives the PATH of before, which lacked it.
venv_bin=$(dirname "$py")
[ "${SELFTEST_PATH_WITHOUT_VENV:-0}" = 1 ] && venv_bin=/usr/bin
# As the role runs it: the service user, its home, the unit's PATH. $1: the output's name.
selftest() {
  start=$(date +%s)
  runuser -u sglang -- env -i HOME=/var/lib/sglang PYTHONPATH=/tmp/site CUDA_HOME="$cuda" \
    PATH="$venv_bin:$cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "$py" /usr/local/lib/sglang-fleet/fusion_selftest.py --cache-dir /var/lib/sglang-fleet/fusion-selftest \
    --timeout 500 > "$out/$1.json" 2> "$out/$1.stderr"
  echo "$1: $(( $(date +%s) - start )) s" >> "$out/timing.txt"
}
: > "$out/timing.txt"
selftest selftest         # the first run (flashinfer's JIT compiles here)
selftest selftest-rerun   # read from the verdict cache
# Whose files: the JIT tree under the service home, the verdict cache, and nothing in root's home.
find /var/lib/sglang/.cache/flashinfer -maxdepth 5 -printf '%u %y %p\n' 2>&1 | sort -k3 | head -60 > "$out/jit-tree.txt"
find /var/lib/sglang/.cache/flashinfer -name '*.so' -printf '%u %s %p\n' 2>&1 > "$out/jit-built.txt"
find /var/lib/sglang-fleet/fusion-selftest -printf '%u %m %p\n' > "$out/verdicts.txt"
ls -d /root/.cache/flashinfer > "$out/root-jit.txt" 2>&1 || true
