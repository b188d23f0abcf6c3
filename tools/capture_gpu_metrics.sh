#!/usr/bin/env bash
# Captures, read-only, what the GPU textfile collector (files/monitoring/nvidia_smi_textfile.py) reads
# on a real GPU host, into DIR: its nvidia-smi query with and without header and units, each of its
# fields asked alone (a field the driver does not know fails only its own line), the driver's field
# list, the ECC and clock-event sections of `nvidia-smi -q`, and the NVRM lines of the kernel log.
# The files become tests/fixtures/nvidia-smi/<gpu>-monitoring-*, <gpu>-help-query-gpu.txt, ... .
# Usage: tools/capture_gpu_metrics.sh DIR   (the field list: nvidia_smi_textfile.py --print-query)
set -u
out=${1:?usage: capture_gpu_metrics.sh DIR}
fields=$(python3 "$(dirname "$0")/../files/monitoring/nvidia_smi_textfile.py" --print-query)
mkdir -p "$out"
cd "$out" || exit 1
nvidia-smi --version >version.txt 2>&1
nvidia-smi --help-query-gpu >help-query-gpu.txt 2>&1
for f in ${fields//,/ } clocks_throttle_reasons.active; do
  printf '%s rc=' "$f"
  nvidia-smi --query-gpu="$f" --format=csv,noheader >/tmp/capture-field.$$ 2>&1
  printf '%s %s\n' $? "$(head -c 200 /tmp/capture-field.$$ | tr '\n' ' ')"
done >fields.txt
rm -f /tmp/capture-field.$$
nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits >query-noheader-nounits.csv 2>&1
echo "csv,noheader,nounits $?" >rc.txt
nvidia-smi --query-gpu="$fields" --format=csv >query-header.csv 2>&1
echo "csv $?" >>rc.txt
nvidia-smi -q -d ECC,PERFORMANCE >q-ecc-performance.txt 2>&1
echo "q $?" >>rc.txt
{
  journalctl -k --no-pager -o short-iso 2>&1 | grep -E 'NVRM|Xid|journal' | tail -n 100
  echo "journalctl ${PIPESTATUS[0]}"
  dmesg 2>&1 | grep -E 'NVRM|Xid|dmesg|denied' | tail -n 100
  echo "dmesg ${PIPESTATUS[0]}"
} >kernel-log.txt
echo "captured into $out: $(ls | wc -l) files"
