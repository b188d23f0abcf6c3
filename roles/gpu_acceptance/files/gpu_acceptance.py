#!/usr/bin/env python3
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU host's acceptance measurement: health and performance of every GPU, as one JSON document.

    gpu_acceptance.py [--nvidia-smi /usr/bin/nvidia-smi] [--budget-seconds 180]
                      [--kernel-log auto|dmesg|kmsg|journalctl|none|FILE] [--only PHASE ...]

Run with the install's own python (its torch). Prints a progress line per phase on stderr and one
JSON document on stdout, on one line, the last: over SSH, Ansible's script module runs it on a tty,
which merges stderr into stdout, so the document is what stdout ends with, not all of it. It
measures; it does not judge: the verdict (plugins/filter/gpu_acceptance.py) compares the document
with the floors of the GPU's profile.

Phases, in order, each skipped (and named in "skipped") when the budget left cannot hold it:
- health: nvidia-smi's ECC, retired pages, remapped rows, PCIe link, throttle reasons, persistence
  mode and temperature, read while a bf16 GEMM runs on every GPU at once (an idle GPU drops its PCIe
  link to a lower generation to save power, so an idle read would report every link as degraded);
  and the XIDs the driver logged since boot (kernel log).
- gemm: bf16 GEMM TFLOP/s per GPU (torch.matmul, cuBLAS), the same run as the health read's load.
- memory: device memory bandwidth per GPU (a device-to-device copy; bytes read + written / time).
- host: host-to-device and device-to-host bandwidth per GPU, from pinned host memory.
- p2p: the peer-to-peer copy bandwidth matrix, for each pair with P2P access (more than one GPU).
- allreduce: all-reduce bus bandwidth across every GPU (NCCL through torch.distributed, one process
  per GPU), sizes 1 MiB to 1 GiB; busbw = algbw x 2(n-1)/n, as nccl-tests reports it.

Rates are decimal: GB/s is 1e9 bytes per second, TFLOP/s 1e12 floating-point operations per second.

The GPU part (the GEMM load and the copies, TorchDevices) is torch's. --devices MODULE replaces it with
MODULE.Devices(), an object with TorchDevices' methods: the lab's fixture, on nodes with no GPU. The
rest (nvidia-smi's health read under the load, the XIDs, the budget, the document) runs as on a real host.
"""
from __future__ import annotations

import argparse
import csv
import importlib
import io
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SCHEMA = 1
GIB = 1 << 30
MIB = 1 << 20
PHASES = ("health", "gemm", "memory", "host", "p2p", "allreduce")

# What the health read asks nvidia-smi, by the key the result uses. Each key lists the field names to
# try in order: drivers since 535 name the throttle reasons "clocks_event_reasons" (the old name is
# still accepted by 580). A field no candidate of which the driver knows is left out and named in
# nvidia_smi.fields_unavailable, so a driver that drops one field does not cost the whole read.
HEALTH_FIELDS = (
    ("index", ("index",)),
    ("uuid", ("uuid",)),
    ("name", ("name",)),
    ("pci_bus_id", ("pci.bus_id",)),
    ("driver_version", ("driver_version",)),
    ("persistence_mode", ("persistence_mode",)),
    ("temperature_c", ("temperature.gpu",)),
    ("ecc_mode", ("ecc.mode.current",)),
    ("ecc_uncorrected_volatile", ("ecc.errors.uncorrected.volatile.total",)),
    ("ecc_uncorrected_aggregate", ("ecc.errors.uncorrected.aggregate.total",)),
    ("ecc_corrected_volatile", ("ecc.errors.corrected.volatile.total",)),
    ("ecc_corrected_aggregate", ("ecc.errors.corrected.aggregate.total",)),
    ("retired_pages_pending", ("retired_pages.pending",)),
    ("remapped_rows_pending", ("remapped_rows.pending",)),
    ("remapped_rows_failure", ("remapped_rows.failure",)),
    ("pcie_gen_current", ("pcie.link.gen.current", "pcie.link.gen.gpucurrent")),
    ("pcie_gen_max", ("pcie.link.gen.max",)),
    ("pcie_width_current", ("pcie.link.width.current",)),
    ("pcie_width_max", ("pcie.link.width.max",)),
    ("throttle_reasons_active", ("clocks_throttle_reasons.active", "clocks_event_reasons.active")),
    ("power_draw_w", ("power.draw",)),
    ("sm_clock_mhz", ("clocks.sm",)),
)

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." as dmesg, journalctl and
# /dev/kmsg ("6,1234,5678,-;NVRM: Xid ...") write it; some drivers leave out the "PCI:".
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                      r"(?:\.[0-9a-fA-F])?\): (?P<xid>\d+)")
INVALID_FIELD = re.compile(r'Field "(?P<field>[^"]+)" is not a valid field to query')


def progress(message):
    print("gpu_acceptance: " + message, file=sys.stderr, flush=True)


# --- Pure functions ----------------------------------------------------------------------------------

def busbw(size_bytes, seconds, ranks):
    """(algbw, busbw) in GB/s of an all-reduce of size_bytes that took seconds on ranks ranks.

    algbw = size / time; busbw = algbw x 2(n-1)/n, the rate each link carries in a ring all-reduce,
    as nccl-tests' all_reduce_perf reports it (so the figure compares with the links' own rate,
    whatever the rank count). One rank moves nothing: busbw 0.
    """
    if seconds <= 0 or ranks < 1:
        raise ValueError("an all-reduce takes a positive time on at least one rank (got %r s, %r ranks)"
                         % (seconds, ranks))
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2.0 * (ranks - 1) / ranks


def allreduce_sizes(smallest=MIB, largest=GIB):
    """Doubling sizes from smallest to largest, both included (1 MiB .. 1 GiB: 11 sizes)."""
    sizes = []
    size = smallest
    while size <= largest:
        sizes.append(size)
        size *= 2
    return sizes


def parse_value(text):
    """One nvidia-smi CSV cell (nounits): an int, a float, a hex mask as int, None for N/A, or the text."""
    text = text.strip()
    if not text or text.strip("[]") in ("N/A", "Not Supported", "Unknown", "Insufficient Permissions"):
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"0x[0-9a-fA-F]+", text):
        return int(text, 16)
    if re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    return text


def parse_query_csv(text, keys):
    """nvidia-smi --query-gpu=... --format=csv,noheader,nounits: one dict per GPU, under keys."""
    rows = []
    for cells in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not cells:
            continue
        if len(cells) != len(keys):
            raise ValueError("nvidia-smi wrote %d values where %d were asked: %r" % (len(cells), len(keys), cells))
        rows.append({key: parse_value(cell) for key, cell in zip(keys, cells)})
    return rows


def kernel_pci(bus_id):
    """nvidia-smi's "00000000:3B:00.0" as the kernel log writes it: "0000:3b:00"."""
    match = re.fullmatch(r"(?:[0-9a-fA-F]*?)([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?",
                         (bus_id or "").strip())
    if not match:
        return (bus_id or "").strip().lower()
    return ("%s:%s:%s" % match.groups()).lower()


def parse_xids(lines):
    """Every XID line of a kernel log: [{"pci": "0000:3b:00", "xid": 79, "line": ...}], in log order."""
    events = []
    for line in lines:
        match = XID_LINE.search(line)
        if match:
            events.append({"pci": kernel_pci(match.group("pci")), "xid": int(match.group("xid")),
                           "line": line.strip()[:300]})
    return events


# --- Reading the host ----------------------------------------------------------------------------------

def read_kernel_log(source):
    """(source used, lines) of the kernel log since boot; (None, error) when none could be read."""
    if source not in ("auto", "dmesg", "kmsg", "journalctl", "none"):
        try:
            with open(source, errors="replace") as handle:
                return source, handle.read().splitlines()
        except OSError as error:
            return None, "kernel log file %s: %s" % (source, error)
    if source == "none":
        return None, "not read (--kernel-log none)"
    errors = []
    for name in (("dmesg", "kmsg", "journalctl") if source == "auto" else (source,)):
        try:
            if name == "kmsg":
                return name, _read_kmsg()
            command = ["dmesg"] if name == "dmesg" else ["journalctl", "-k", "-b", "0", "--no-pager", "-q"]
            done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=30)
            if done.returncode == 0:
                return name, done.stdout.splitlines()
            errors.append("%s: %s" % (name, (done.stderr.strip() or "rc %d" % done.returncode)[:200]))
        except (OSError, subprocess.TimeoutExpired) as error:
            errors.append("%s: %s" % (name, error))
    return None, "; ".join(errors)


def _read_kmsg():
    """The kernel's ring buffer as /dev/kmsg gives it, without waiting for new records."""
    lines = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == 32:   # EPIPE: a record was overwritten while reading; go on
                    continue
                raise
            if not record:
                break
            lines.append(record.decode(errors="replace").split(";", 1)[-1].rstrip("\n"))
    finally:
        os.close(fd)
    return lines


def query_health(nvidia_smi, fields=HEALTH_FIELDS, timeout=30):
    """(rows, fields_unavailable): nvidia-smi's health fields per GPU; a field the driver does not
    know is tried under its next name, then left out."""
    chosen = {key: 0 for key, _ in fields}
    names = dict(fields)
    unavailable = []
    while True:
        keys = [key for key in chosen]
        query = ",".join(names[key][chosen[key]] for key in keys)
        done = subprocess.run([nvidia_smi, "--query-gpu=" + query, "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode == 0:
            return parse_query_csv(done.stdout, keys), unavailable
        invalid = INVALID_FIELD.search(done.stdout + done.stderr)
        if not invalid:
            raise RuntimeError("%s --query-gpu failed (rc %d): %s"
                               % (nvidia_smi, done.returncode, (done.stderr or done.stdout).strip()[:300]))
        key = next(k for k in keys if names[k][chosen[k]] == invalid.group("field"))
        if key in ("index", "uuid", "name", "pci_bus_id"):
            raise RuntimeError("%s does not know the field %s" % (nvidia_smi, invalid.group("field")))
        if chosen[key] + 1 < len(names[key]):
            chosen[key] += 1
        else:
            unavailable.append(names[key][chosen[key]])
            del chosen[key]


# --- Measuring with torch -------------------------------------------------------------------------------

def _timed_cuda(torch, device, action, repeats):
    """Seconds of repeats runs of action on device's current stream, timed with CUDA events."""
    with torch.cuda.device(device):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            action()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


class GemmLoad(threading.Thread):
    """bf16 GEMMs on one GPU for a while, each batch timed with CUDA events: the load the health read
    is taken under and the GEMM rate, in one run."""

    def __init__(self, torch, device, size, seconds):
        super().__init__(daemon=True)
        self.torch, self.device, self.size, self.seconds = torch, device, size, seconds
        self.rates = []
        self.error = None
        self.warm = threading.Event()

    def run(self):
        torch = self.torch
        try:
            with torch.cuda.device(self.device):
                a = torch.randn(self.size, self.size, dtype=torch.bfloat16, device="cuda")
                b = torch.randn(self.size, self.size, dtype=torch.bfloat16, device="cuda")
                c = torch.empty_like(a)
                gemm = lambda: torch.matmul(a, b, out=c)  # noqa: E731
                _timed_cuda(torch, self.device, gemm, 3)        # cuBLAS picks its kernel, memory is mapped
                one = _timed_cuda(torch, self.device, gemm, 3) / 3
                batch = max(1, int(0.05 / max(one, 1e-6)))      # about 50 ms a batch
                flops = 2.0 * self.size ** 3 * batch
                started = time.monotonic()
                while time.monotonic() < started + self.seconds:
                    self.rates.append(flops / _timed_cuda(torch, self.device, gemm, batch) / 1e12)
                    # The health read waits a third of the run: clocks and power have settled, and
                    # nvidia-smi's power.draw (an average over the last second) is the load's.
                    if time.monotonic() > started + self.seconds / 3:
                        self.warm.set()
        except Exception as error:  # noqa: BLE001 - reported in the result, judged by the verdict
            self.error = "%s: %s" % (type(error).__name__, error)
        finally:
            self.warm.set()

    def result(self):
        if self.error:
            return {"error": self.error}
        if len(self.rates) < 3:
            return {"error": "only %d timed batches in %.1f s" % (len(self.rates), self.seconds)}
        steady = self.rates[2:]                                 # the first batches run while clocks ramp
        return {"tflops": round(statistics.median(steady), 1), "min_tflops": round(min(steady), 1),
                "max_tflops": round(max(steady), 1), "batches": len(steady), "size": self.size}


def measure_memory(torch, device, size_bytes, repeats=20):
    """Device memory bandwidth, GB/s: a copy reads and writes size_bytes each time."""
    with torch.cuda.device(device):
        src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        copy = lambda: dst.copy_(src)  # noqa: E731
        _timed_cuda(torch, device, copy, 3)
        seconds = _timed_cuda(torch, device, copy, repeats)
        del src, dst
        return round(2.0 * size_bytes * repeats / seconds / 1e9, 1)


def measure_host(torch, device, size_bytes, repeats=10):
    """(host-to-device, device-to-host) GB/s from and to pinned host memory."""
    with torch.cuda.device(device):
        host = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(size_bytes, dtype=torch.uint8, device="cuda")
        h2d = lambda: dev.copy_(host, non_blocking=True)  # noqa: E731
        d2h = lambda: host.copy_(dev, non_blocking=True)  # noqa: E731
        _timed_cuda(torch, device, h2d, 2)
        up = _timed_cuda(torch, device, h2d, repeats)
        _timed_cuda(torch, device, d2h, 2)
        down = _timed_cuda(torch, device, d2h, repeats)
        del host, dev
        return round(size_bytes * repeats / up / 1e9, 1), round(size_bytes * repeats / down / 1e9, 1)


def measure_p2p(torch, count, size_bytes, repeats=10):
    """matrix[i][j]: GB/s of copies from GPU i to GPU j where i can reach j peer to peer, else None."""
    matrix = [[None] * count for _ in range(count)]
    for src_index in range(count):
        for dst_index in range(count):
            if src_index == dst_index or not torch.cuda.can_device_access_peer(src_index, dst_index):
                continue
            src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda:%d" % src_index).fill_(1)
            dst = torch.empty(size_bytes, dtype=torch.uint8, device="cuda:%d" % dst_index)
            for _ in range(2):
                dst.copy_(src)
            torch.cuda.synchronize(src_index)
            torch.cuda.synchronize(dst_index)
            start = time.perf_counter()
            for _ in range(repeats):
                dst.copy_(src)
            torch.cuda.synchronize(src_index)
            torch.cuda.synchronize(dst_index)
            matrix[src_index][dst_index] = round(size_bytes * repeats / (time.perf_counter() - start) / 1e9, 1)
            del src, dst
    return matrix


# --- All-reduce, one process per rank -------------------------------------------------------------------

def _allreduce_rank(rank, world, backend, init_file, sizes, seconds_per_size, out_path):
    """One rank of the all-reduce measurement (torch.multiprocessing.spawn calls it as (rank, *args))."""
    import datetime

    import torch
    import torch.distributed as dist

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        # The sum is right before it is timed: each rank adds rank+1.
        check = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(check)
        sync()
        expected = world * (world + 1) / 2
        correct = bool(torch.all(check == expected).item())
        rows = []
        for size in sizes:
            data = torch.zeros(size // 4, dtype=torch.float32, device=device)
            dist.all_reduce(data)
            sync()
            start = time.perf_counter()
            dist.all_reduce(data)
            sync()
            one = time.perf_counter() - start
            # Every rank must run the same count: rank 0's choice, broadcast.
            iterations = torch.tensor([max(1, min(50, int(seconds_per_size / max(one, 1e-6))))], device=device)
            dist.broadcast(iterations, 0)
            iterations = int(iterations.item())
            if cuda:
                dist.barrier(device_ids=[rank])
            else:
                dist.barrier()
            sync()
            start = time.perf_counter()
            for _ in range(iterations):
                dist.all_reduce(data)
            sync()
            elapsed = torch.tensor([(time.perf_counter() - start) / iterations], dtype=torch.float64, device=device)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)     # the slowest rank's time, as the job sees it
            seconds = float(elapsed.item())
            algbw, bus = busbw(size, seconds, world)
            rows.append({"bytes": size, "seconds": seconds, "iterations": iterations,
                         "algbw_gbps": float("%.4g" % algbw), "busbw_gbps": float("%.4g" % bus)})
            del data
        if rank == 0:
            with open(out_path, "w") as handle:
                json.dump({"correct": correct, "sizes": rows}, handle)
    finally:
        dist.destroy_process_group()


def measure_allreduce(world, backend="nccl", sizes=None, seconds_per_size=0.5, timeout=None):
    """All-reduce bus bandwidth across world ranks, one process each (spawned: this module's
    __main__ guard keeps the children from measuring again). Returns the result's "allreduce"."""
    import torch.multiprocessing as mp

    sizes = list(sizes or allreduce_sizes())
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as scratch:
        out_path = os.path.join(scratch, "allreduce.json")
        init_file = os.path.join(scratch, "init")
        context = mp.spawn(_allreduce_rank, nprocs=world, join=False,
                           args=(world, backend, init_file, sizes, seconds_per_size, out_path))
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not context.join(timeout=1):
                if deadline is not None and time.monotonic() > deadline:
                    for process in context.processes:
                        if process.is_alive():
                            process.kill()
                    return {"backend": backend, "world_size": world,
                            "error": "not done within %.0f s" % timeout}
        except Exception as error:  # noqa: BLE001 - a rank's failure is a result
            return {"backend": backend, "world_size": world, "error": str(error).strip()[-1000:]}
        with open(out_path) as handle:
            measured = json.load(handle)
    rows = measured["sizes"]
    return {"backend": backend, "world_size": world, "correct": measured["correct"], "sizes": rows,
            "peak_busbw_gbps": max((row["busbw_gbps"] for row in rows), default=None),
            "largest_busbw_gbps": rows[-1]["busbw_gbps"] if rows else None}


class TorchDevices:
    """The GPU part of the measurement, on torch's CUDA (the install's torch)."""

    def __init__(self):
        # torch numbers the GPUs as nvidia-smi does (by PCI bus), so index i is the same GPU in both.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        import torch

        self.torch = torch

    def describe(self):
        """{"torch", "cuda", "count"}: the versions the result names, and the GPUs torch sees."""
        torch = self.torch
        return {"torch": torch.__version__, "cuda": torch.version.cuda, "count": torch.cuda.device_count()}

    def gemm_load(self, index, size, seconds):
        """A started-later thread (start, warm, join, is_alive, device, result) that loads GPU index."""
        return GemmLoad(self.torch, index, size, seconds)

    def memory_bandwidth(self, index):
        free, _ = self.torch.cuda.mem_get_info(index)
        return measure_memory(self.torch, index, min(GIB, free // 4))

    def host_bandwidth(self, index):
        return measure_host(self.torch, index, 256 * MIB)

    def p2p_bandwidth(self, count):
        return measure_p2p(self.torch, count, 256 * MIB)

    def allreduce(self, world, backend, sizes, seconds_per_size, timeout):
        return measure_allreduce(world, backend, sizes, seconds_per_size, timeout=timeout)


def devices_of(module):
    """The GPU part: torch's, or --devices MODULE's Devices()."""
    return importlib.import_module(module).Devices() if module else TorchDevices()


# --- The run --------------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(args):
    started = time.monotonic()
    deadline = started + args.budget_seconds
    left = lambda: deadline - time.monotonic()  # noqa: E731
    wanted = set(args.only or PHASES)
    result = {"schema": SCHEMA, "host": socket.gethostname(), "budget_seconds": args.budget_seconds,
              "nvidia_smi": {"path": args.nvidia_smi}, "gpus": [], "skipped": [], "errors": []}

    def skip(phase, why):
        result["skipped"].append({"phase": phase, "why": why})
        progress("%s skipped: %s" % (phase, why))

    source, lines = read_kernel_log(args.kernel_log)
    if source is None:
        result["kernel_log"] = {"source": None, "error": lines, "xids": []}
    else:
        result["kernel_log"] = {"source": source, "xids": parse_xids(lines)}
    progress("kernel log: %s, %d XID lines" % (source or "unread", len(result["kernel_log"]["xids"])))

    try:
        idle, unavailable = query_health(args.nvidia_smi)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as error:
        result["errors"].append("nvidia-smi: %s" % error)
        return result
    result["nvidia_smi"]["fields_unavailable"] = unavailable
    result["driver_version"] = idle[0]["driver_version"] if idle else None
    for row in idle:
        pci = kernel_pci(row["pci_bus_id"])
        result["gpus"].append({"index": row["index"], "uuid": row["uuid"], "name": row["name"],
                               "pci_bus_id": row["pci_bus_id"], "health_idle": row,
                               "xids": [e["xid"] for e in result["kernel_log"]["xids"] if e["pci"] == pci]})
    progress("%d GPUs: %s" % (len(idle), ", ".join(sorted({row["name"] for row in idle}))))

    devices = devices_of(args.devices)
    described = devices.describe()
    result["torch"], result["cuda"] = described["torch"], described["cuda"]
    count = described["count"]
    result["cuda_device_count"] = count
    if count != len(idle):
        result["errors"].append("torch sees %d GPUs, nvidia-smi %d" % (count, len(idle)))
    count = min(count, len(idle))
    gpus = result["gpus"]

    if wanted & {"health", "gemm"}:
        if left() < args.gemm_seconds + 10:
            skip("gemm", "%.0f s left, the GEMM load needs %.0f" % (left(), args.gemm_seconds + 10))
        else:
            progress("bf16 GEMM %d^3 on %d GPUs for %.0f s, health read under it"
                     % (args.gemm_size, count, args.gemm_seconds))
            loads = [devices.gemm_load(index, args.gemm_size, args.gemm_seconds) for index in range(count)]
            for load in loads:
                load.start()
            for load in loads:
                load.warm.wait(timeout=args.gemm_seconds)
            try:
                under_load, _ = query_health(args.nvidia_smi)
                result["health_read_under_load"] = all(load.is_alive() for load in loads)
                for row in under_load:
                    for gpu in gpus:
                        if gpu["uuid"] == row["uuid"]:
                            gpu["health"] = row
            except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as error:
                result["errors"].append("nvidia-smi under load: %s" % error)
            for load in loads:
                load.join()
                gpus[load.device]["gemm_bf16"] = load.result()
                gpus[load.device]["gemm_bf16_tflops"] = load.result().get("tflops")
            progress("GEMM TFLOP/s: %s" % ", ".join(str(gpu.get("gemm_bf16_tflops")) for gpu in gpus))

    if "memory" in wanted:
        if left() < 5 * count + 5:
            skip("memory", "%.0f s left" % left())
        else:
            for index in range(count):
                gpus[index]["memory_bandwidth_gbps"] = devices.memory_bandwidth(index)
            progress("memory copy GB/s: %s" % ", ".join(str(gpu.get("memory_bandwidth_gbps")) for gpu in gpus))

    if "host" in wanted:
        if left() < 5 * count + 5:
            skip("host", "%.0f s left" % left())
        else:
            for index in range(count):
                gpus[index]["h2d_gbps"], gpus[index]["d2h_gbps"] = devices.host_bandwidth(index)
            progress("host->device / device->host GB/s: %s"
                     % ", ".join("%s/%s" % (gpu.get("h2d_gbps"), gpu.get("d2h_gbps")) for gpu in gpus))

    if "p2p" in wanted and count > 1:
        if left() < count * (count - 1) * 0.5 + 5:
            skip("p2p", "%.0f s left" % left())
        else:
            result["p2p_gbps"] = devices.p2p_bandwidth(count)
            progress("P2P GB/s: %s" % json.dumps(result["p2p_gbps"]))

    if "allreduce" in wanted:
        world = args.world_size or count
        if world < 2 and not args.allreduce_single:
            skip("allreduce", "one GPU: nothing to all-reduce across")
        elif left() < 20:
            skip("allreduce", "%.0f s left" % left())
        else:
            sizes = allreduce_sizes(args.allreduce_min_bytes, args.allreduce_max_bytes)
            per_size = max(0.05, min(0.5, (left() - 15) / (2 * len(sizes))))
            progress("all-reduce across %d ranks (%s), %d sizes" % (world, args.backend, len(sizes)))
            result["allreduce"] = devices.allreduce(world, args.backend, sizes, per_size, left() - 2)
            progress("all-reduce busbw peak %s GB/s" % result["allreduce"].get("peak_busbw_gbps"))

    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvidia-smi", default="/usr/bin/nvidia-smi")
    parser.add_argument("--budget-seconds", type=float, default=180.0,
                        help="the whole run's bound; a phase that no longer fits is skipped and named")
    parser.add_argument("--kernel-log", default="auto",
                        help="auto (dmesg, /dev/kmsg, journalctl), dmesg, kmsg, journalctl, none, or a file")
    parser.add_argument("--only", action="append", choices=PHASES, help="measure only these phases")
    parser.add_argument("--gemm-size", type=int, default=8192)
    parser.add_argument("--gemm-seconds", type=float, default=15.0)
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    parser.add_argument("--world-size", type=int, default=0, help="all-reduce ranks (default: every GPU)")
    parser.add_argument("--allreduce-single", action="store_true",
                        help="run the all-reduce at one rank too (busbw is 0 there; it proves the path)")
    parser.add_argument("--allreduce-min-bytes", type=int, default=MIB)
    parser.add_argument("--allreduce-max-bytes", type=int, default=GIB)
    parser.add_argument("--devices", default="",
                        help="a module whose Devices() replaces torch's GPU part (the lab's fixture)")
    args = parser.parse_args(argv)
    result = measure(args)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 2 if result["errors"] and not result["gpus"] else 0


if __name__ == "__main__":
    sys.exit(main())
