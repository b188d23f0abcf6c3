#!/usr/bin/env python3
"""What sglang 0.5.9 does on a GPU at TP 1, step by step, and what the sandbox around it allows.

    workload.py --label NAME --out FILE [--nvidia-smi PATH] [--steps a,b] [--budget SECONDS]

harness.py runs it three ways: as root and as the service user outside any unit, and as the
server unit's own process (its ExecStart, through a drop-in). Each group of steps runs in a fresh
child process (a crash or a hang loses that group only); the large allocations run alone, the rest
side by side. Records to FILE (JSON): who and where it ran, the sandbox as this process sees it
(/proc/self/status, rlimits, mounts, device nodes, writes, /proc, /tmp), which probe system calls
return and which kill their process, and each step's pass/fail, detail and time. Exits 0 whatever
the steps gave: under the unit a failing exit would only make systemd restart it.
"""
import argparse
import ctypes
import errno
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30

# (group, steps, timeout in seconds). The first group runs alone: 64 GiB of the GPU, 16 GiB pinned.
GROUPS = [
    ("gpu", ["cuda_init", "cublas_matmul", "device_alloc_64gib", "pinned_host_16gib", "cuda_graphs"], 240),
    ("triton", ["triton_jit"], 240),
    ("compile", ["torch_compile"], 300),
    ("extension", ["jit_extension"], 400),
    ("nccl", ["nccl_gloo_world1"], 180),
    ("symm", ["symm_mem_world1"], 180),
    ("ipc", ["cuda_ipc_two_processes"], 180),
    ("host", ["spawn_unix_socket", "tcp_loopback", "set_ulimit"], 90),
    ("smi", ["nvidia_smi", "nvidia_smi_on_path"], 60),
    ("fusion", ["fusion_graph_timing"], 180),
]
STEPS = [step for _, steps, _ in GROUPS for step in steps]
# Findings, not steps: torch's CUDA IPC of an expandable segment imports the peer's memory with
# pidfd_getfd, a call the unit's filter does not allow (issue 22, item 3).
PROBES = [("cuda_ipc_expandable_segments", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, 120)]

# System calls tried with harmless arguments (x86_64 numbers). "$uid"/"$pid": this process's own.
SYSCALLS = [
    ("pidfd_getfd", 438, [-1, -1, 0]),
    ("ptrace", 101, [0x7fff, 0, 0, 0]),
    ("perf_event_open", 298, [0, 0, -1, -1, 0]),
    ("bpf", 321, [0x7fff, 0, 0]),
    ("open_by_handle_at", 304, [-1, 0, 0]),
    ("memfd_secret", 447, [0x7fff]),
    ("mseal", 462, [0, 0, 0x7fff]),
    ("map_shadow_stack", 453, [0, 0, 0x7fff]),
    ("cachestat", 451, [-1, 0, 0, 0x7fff]),
    ("setuid", 105, ["$uid"]),
    ("fchownat", 260, [-100, "/nonexistent-harness-path", -1, -1, 0]),
    ("process_vm_readv", 310, [0, 0, 0, 0, 0, 0]),
    ("kcmp", 312, [-1, -1, 0, 0, 0]),
    ("getpid", 39, []),
    ("sched_setaffinity", 203, [0, 0, 0]),
    ("mbind", 237, [0, 0, 0, 0, 0, 0]),
    ("set_mempolicy", 238, [0, 0, 0]),
    ("move_pages", 279, [0, 0, 0, 0, 0, 0]),
    ("userfaultfd", 323, [0x7fff]),
    ("io_uring_setup", 425, [0, 0]),
    ("pidfd_open", 434, ["$pid", 0]),
    ("mlock", 149, [0, 0]),
    ("process_madvise", 440, [-1, 0, 0, 0, 0]),
]
SYSCALL_PROBE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
own = {"$uid": os.getuid(), "$pid": os.getpid()}
args = [own.get(a, a) for a in json.loads(sys.argv[2])]
args = [ctypes.c_char_p(a.encode()) if isinstance(a, str) else ctypes.c_long(a) for a in args]
ret = libc.syscall(ctypes.c_long(int(sys.argv[1])), *args)
print(json.dumps({"ret": ret, "errno": ctypes.get_errno()}))
"""

# Device nodes a GPU server needs, and some it must not reach (DevicePolicy=closed).
NODES = ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
         "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2",
         "/dev/infiniband/rdma_cm", "/dev/harness-fuse", "/dev/fuse", "/dev/sda", "/dev/vda", "/dev/mem",
         "/dev/kmsg", "/dev/null", "/dev/urandom"]
PATHS = ["/", "/opt", "/usr", "/etc", "/var/lib/sglang", "/tmp", "/dev/shm", "/proc/sys", "/sys", "/root", "/home"]
TMP_MARKER = "/tmp/units-harness-marker"  # harness.py puts it in the host's /tmp


def status_fields(names=("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapInh", "CapPrm", "CapEff", "CapBnd",
                         "CapAmb", "Uid", "Gid", "Groups", "Umask", "VmLck", "VmPin")):
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in names:
                fields[key] = value.strip()
    return fields


def errname(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno)) if isinstance(exc, OSError) and exc.errno else repr(exc)


# ------------------------------------------------------------------------------------------------
# The sandbox as this process sees it.

def mounts():
    """{mount point: options} from /proc/self/mountinfo (per-mount and superblock options)."""
    table = {}
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            sep = fields.index("-")
            table[fields[4].replace("\\040", " ")] = fields[5] + ";" + fields[sep + 3]
    return table


def mount_of(path, table):
    best = max((m for m in table if path == m or path.startswith(m.rstrip("/") + "/")), key=len, default="/")
    return {"mount": best, "options": table.get(best, "")}


def try_open(path):
    if not os.path.lexists(path):
        return "absent"
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        os.close(fd)
        return "ok"
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS):  # mode bits: a read-only open says whether the node is reachable
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                os.close(fd)
                return "ok-readonly (rw: %s)" % errname(exc)
            except OSError as exc2:
                return errname(exc2)
        return errname(exc)


def try_write(directory):
    try:
        fd, path = tempfile.mkstemp(prefix=".units-harness-", dir=directory)
        os.close(fd)
        os.unlink(path)
        return "ok"
    except OSError as exc:
        return errname(exc)


def sandbox():
    table = mounts()
    try:
        proc_pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    except OSError as exc:
        proc_pids = [errname(exc)]
    try:
        root_listing = "%d entries" % len(os.listdir("/root"))
    except OSError as exc:
        root_listing = errname(exc)
    limits = {}
    for name in ("RLIMIT_MEMLOCK", "RLIMIT_NOFILE", "RLIMIT_STACK", "RLIMIT_NPROC"):
        soft, hard = resource.getrlimit(getattr(resource, name))
        limits[name] = [("infinity" if v == resource.RLIM_INFINITY else v) for v in (soft, hard)]
    return {
        "status": status_fields(),
        "rlimits": limits,
        "devices": {node: try_open(node) for node in NODES},
        "writes": {d: try_write(d) for d in ("/opt", "/usr/local", "/etc", os.environ.get("HOME", "/nonexistent"),
                                             tempfile.gettempdir(), "/dev/shm")},
        "mounts": {p: mount_of(p, table) for p in PATHS},
        "proc_1_visible": os.path.exists("/proc/1/status"),
        "proc_pids_visible": len(proc_pids),
        "tmp_marker_visible": os.path.exists(TMP_MARKER),
        "root_home": root_listing,
        "cgroup": open("/proc/self/cgroup").read().strip(),
    }


def syscalls():
    results = {}
    for name, number, args in SYSCALLS:
        try:
            run = subprocess.run([sys.executable, "-S", "-c", SYSCALL_PROBE, str(number), json.dumps(args)],
                                 capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            results[name] = {"nr": number, "outcome": "timeout"}
            continue
        if run.returncode < 0:
            sig = signal.Signals(-run.returncode).name
            results[name] = {"nr": number, "outcome": "killed", "signal": sig}
        elif run.returncode == 0:
            answer = json.loads(run.stdout.strip().splitlines()[-1])
            failed = answer["ret"] == -1
            results[name] = {"nr": number, "outcome": "returned", "ret": answer["ret"],
                             "errno": errno.errorcode.get(answer["errno"], answer["errno"]) if failed else None}
        else:
            results[name] = {"nr": number, "outcome": "exit %d" % run.returncode, "stderr": run.stderr[-300:]}
    return results


# ------------------------------------------------------------------------------------------------
# The steps. Each returns a detail dict or raises; run_steps() records pass/fail and time.

class Context:
    def __init__(self, args):
        self.label = args.label
        self.cache = args.cache
        self.nvidia_smi = args.nvidia_smi


def _sync():
    import torch
    torch.cuda.synchronize()


def _libs(*names):
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if any(n in line for n in names)})


def step_cuda_init(ctx):
    import torch
    torch.cuda.init()
    count = torch.cuda.device_count()
    assert count >= 1, "no CUDA device"
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": count, "name": props.name,
            "capability": "%d.%d" % (props.major, props.minor), "total_gib": round(total / GIB, 1),
            "free_gib": round(free / GIB, 1), "libcuda": _libs("libcuda.so")}


def step_cublas_matmul(ctx):
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    a @ b
    _sync()
    start = time.perf_counter()
    for _ in range(20):
        a @ b
    _sync()
    seconds = time.perf_counter() - start
    x, y = torch.randn(256, 256), torch.randn(256, 256)
    ref = x @ y
    err = float(((x.cuda() @ y.cuda()).cpu() - ref).abs().max() / ref.abs().max())
    assert err < 1e-3, "fp32 matmul differs from the CPU's by %g" % err
    return {"tflops_bf16_8192": round(2 * 8192 ** 3 * 20 / seconds / 1e12, 1), "max_rel_err_fp32": err,
            "libcublas": _libs("libcublas")}


def step_device_alloc_64gib(ctx):
    import torch
    free0, _ = torch.cuda.mem_get_info()
    big = torch.empty(64 * GIB, dtype=torch.uint8, device="cuda")
    big.fill_(7)
    checksum = int(big[:: 1 << 20].sum())
    free1, _ = torch.cuda.mem_get_info()
    del big
    torch.cuda.empty_cache()
    assert checksum == 7 * 64 * 1024, checksum
    return {"gib": 64, "free_before_gib": round(free0 / GIB, 1), "free_with_it_gib": round(free1 / GIB, 1)}


def step_pinned_host_16gib(ctx):
    import torch
    start = time.perf_counter()
    host = torch.empty(16 * GIB, dtype=torch.uint8, pin_memory=True)
    alloc_s = time.perf_counter() - start
    assert host.is_pinned()
    host[:GIB].fill_(3)
    dev = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    _sync()
    start = time.perf_counter()
    dev.copy_(host[:GIB], non_blocking=True)
    _sync()
    copy_s = time.perf_counter() - start
    assert int(dev[:: 1 << 20].sum()) == 3 * 1024
    pinned = status_fields(("VmLck", "VmPin"))
    return {"gib": 16, "alloc_s": round(alloc_s, 2), "h2d_gbps": round(1 / copy_s * GIB / 1e9, 1),
            "rlimit_memlock": [("infinity" if v == resource.RLIM_INFINITY else v)
                               for v in resource.getrlimit(resource.RLIMIT_MEMLOCK)], **pinned}


def step_cuda_graphs(ctx):
    import torch
    x = torch.randn(1024, 1024, device="cuda")
    w = torch.randn(1024, 1024, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            torch.relu(x @ w) + 1
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = torch.relu(x @ w) + 1
    x.copy_(torch.randn_like(x))
    graph.replay()
    _sync()
    assert torch.allclose(y, torch.relu(x @ w) + 1, rtol=1e-3, atol=1e-3)
    start = time.perf_counter()
    for _ in range(100):
        graph.replay()
    _sync()
    return {"replay_us": round((time.perf_counter() - start) / 100 * 1e6, 1)}


def step_fusion_graph_timing(ctx):
    """The fusion self-test's graph timing (tests/device/fusion_graph_timing.py, which the harness puts
    beside this file with the role's fusion_selftest.py) in this process's sandbox: what exists of it at
    world size 1, the unfused norm path captured in CUDA graphs and replayed, timed by the self-test's code."""
    sys.path.insert(0, HERE)
    import fusion_graph_timing
    out = os.path.join(ctx.cache, "fusion-graph")
    fusion_graph_timing.main(out)
    with open(os.path.join(out, "fusion-graph-timing.json")) as handle:
        found = json.load(handle)
    assert found["shapes"] and all(s["unfused_us"] > 0 for s in found["shapes"]), found
    return found


def step_triton_jit(ctx):
    import torch
    import triton
    sys.path.insert(0, HERE)
    import workload_triton
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    start = time.perf_counter()
    out = workload_triton.add(x, y)
    _sync()
    assert torch.equal(out, x + y)
    cache = os.environ["TRITON_CACHE_DIR"]
    return {"triton": triton.__version__, "first_call_s": round(time.perf_counter() - start, 2), "cache": cache,
            "cache_files": sum(len(f) for _, _, f in os.walk(cache))}


def step_torch_compile(ctx):
    import torch

    def f(x, w):
        return torch.nn.functional.gelu(x @ w) * 0.5 + x.sum(dim=-1, keepdim=True)

    compiled = torch.compile(f)
    x = torch.randn(512, 512, device="cuda")
    w = torch.randn(512, 512, device="cuda")
    start = time.perf_counter()
    y = compiled(x, w)
    _sync()
    compile_s = time.perf_counter() - start
    assert torch.allclose(y, f(x, w), rtol=1e-2, atol=1e-2)
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    return {"compile_s": round(compile_s, 1), "cache": cache,
            "cache_files": sum(len(f) for _, _, f in os.walk(cache))}


EXT_CUDA = r"""
#include <torch/extension.h>
__global__ void add_one_kernel(float* x, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
torch::Tensor add_one(torch::Tensor x) {
  auto y = x.clone();
  int64_t n = y.numel();
  add_one_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
  return y;
}
"""


def step_jit_extension(ctx):
    import torch
    from torch.utils import cpp_extension
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = "%d.%d" % (major, minor)
    build = os.path.join(ctx.cache, "extension")
    os.makedirs(build, exist_ok=True)
    start = time.perf_counter()
    module = cpp_extension.load_inline(name="units_harness_ext_%s" % ctx.label, cpp_sources=[
        "torch::Tensor add_one(torch::Tensor x);"], cuda_sources=[EXT_CUDA], functions=["add_one"],
        build_directory=build, verbose=False)
    build_s = time.perf_counter() - start
    x = torch.arange(4096, device="cuda", dtype=torch.float32)
    assert torch.equal(module.add_one(x), x + 1)
    return {"build_s": round(build_s, 1), "cuda_home": cpp_extension.CUDA_HOME, "ninja": shutil.which("ninja"),
            "nvcc": os.path.join(cpp_extension.CUDA_HOME or "", "bin/nvcc"), "build_dir": build,
            "built": sorted(f for f in os.listdir(build) if f.endswith((".so", ".o")))}


def _init_world1():
    import torch
    import torch.distributed as dist
    init = os.path.join(tempfile.mkdtemp(prefix="units-harness-pg-"), "init")
    dist.init_process_group("nccl", init_method="file://" + init, rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    return dist


def step_nccl_gloo_world1(ctx):
    import torch
    dist = _init_world1()
    try:
        t = torch.full((1 << 20,), 3.0, device="cuda")
        dist.all_reduce(t)
        _sync()
        assert float(t[0]) == 3.0
        gloo = dist.new_group(backend="gloo")  # sglang's CPU group
        c = torch.ones(16)
        dist.all_reduce(c, group=gloo)
        dist.barrier()
        return {"nccl": ".".join(map(str, torch.cuda.nccl.version())), "world_size": dist.get_world_size()}
    finally:
        dist.destroy_process_group()


def step_symm_mem_world1(ctx):
    import torch
    import torch.distributed._symmetric_memory as symm_mem
    dist = _init_world1()
    try:
        group = dist.group.WORLD.group_name
        detail = {}
        try:
            detail["backend"] = str(symm_mem.get_backend(torch.device("cuda", 0)))
        except Exception as exc:  # older spellings: recorded, not needed
            detail["backend"] = repr(exc)[:120]
        t = symm_mem.empty(4096, dtype=torch.float32, device="cuda")
        handle = symm_mem.rendezvous(t, group)
        t.fill_(2.0)
        handle.barrier()
        out = torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group)
        _sync()
        assert torch.allclose(out, torch.full_like(out, 2.0))
        detail.update(world_size=handle.world_size, rank=handle.rank,
                      multicast=bool(getattr(handle, "multicast_ptr", 0)))
        return detail
    finally:
        dist.destroy_process_group()


def _wait_message(queue, process, seconds):
    import queue as queues
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return queue.get(timeout=1)
        except queues.Empty:
            if not process.is_alive():
                break
    return None


def _ipc_child(inbox, outbox):
    import torch
    try:
        tensor = inbox.get(timeout=90)
        tensor.add_(1)
        torch.cuda.synchronize()
        outbox.put({"ok": True, "pid": os.getpid(), "seccomp": status_fields(("Seccomp",))["Seccomp"]})
        inbox.get(timeout=90)  # hold the tensor until the parent has read it
    except BaseException as exc:
        outbox.put({"ok": False, "error": repr(exc)[:500]})


def step_cuda_ipc_two_processes(ctx):
    import torch
    import torch.multiprocessing as torch_mp
    spawn = torch_mp.get_context("spawn")
    inbox, outbox = spawn.Queue(), spawn.Queue()
    child = spawn.Process(target=_ipc_child, args=(inbox, outbox))
    child.start()
    try:
        tensor = torch.ones(1 << 20, device="cuda")
        inbox.put(tensor)
        message = _wait_message(outbox, child, 120)
        _sync()
        assert message, "the child sent nothing (exit code %s)" % child.exitcode
        assert message["ok"], message["error"]
        total = float(tensor.sum())
        assert total == 2 * (1 << 20), "the child's write is not in the parent's memory: %s" % total
        inbox.put(None)
        child.join(60)
        return {"child": message, "child_exit": child.exitcode,
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    finally:
        if child.is_alive():
            child.kill()


def step_cuda_ipc_expandable_segments(ctx):
    return step_cuda_ipc_two_processes(ctx)


def _socket_child(path):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    client.sendall(b"hello from the scheduler")
    client.close()


def step_spawn_unix_socket(ctx):
    """sglang spawns its scheduler and detokenizer and talks to them over ipc:// sockets in the temp dir."""
    import multiprocessing
    path = os.path.join(tempfile.mkdtemp(prefix="units-harness-ipc-"), "sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(60)
    child = multiprocessing.get_context("spawn").Process(target=_socket_child, args=(path,))
    child.start()
    conn, _ = server.accept()
    data = conn.recv(64)
    child.join(30)
    assert data == b"hello from the scheduler", data
    return {"socket": path, "child_exit": child.exitcode}


def step_tcp_loopback(ctx):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    got = []
    thread = threading.Thread(target=lambda: got.append(server.accept()[0].recv(16)))
    thread.start()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"GET /health")
    thread.join(10)
    assert got == [b"GET /health"], got
    return {"port": port}


def step_set_ulimit(ctx):
    """sglang's set_ulimit(65535): the soft RLIMIT_NOFILE to 65535 and RLIMIT_STACK to 64 MiB where they are
    lower; like sglang, a ValueError (a hard limit below) is a warning, not a failure."""
    warnings = []
    before = {n: resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_NOFILE", "RLIMIT_STACK")}
    for name, target in (("RLIMIT_NOFILE", 65535), ("RLIMIT_STACK", 1024 * 65535)):
        kind = getattr(resource, name)
        soft, hard = resource.getrlimit(kind)
        if soft < target:
            try:
                resource.setrlimit(kind, (target, hard))
            except ValueError as exc:
                warnings.append("%s: %s" % (name, exc))
    after = {n: resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_NOFILE", "RLIMIT_STACK")}
    return {"before": before, "after": after, "warnings": warnings}


def _smi(argv):
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, "rc %d: %s" % (run.returncode, (run.stderr or run.stdout).strip()[-300:])
    return run.stdout.strip()


def step_nvidia_smi(ctx):
    out = _smi([ctx.nvidia_smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    return {"path": ctx.nvidia_smi, "gpus": out.splitlines()}


def step_nvidia_smi_on_path(ctx):
    """As sglang's get_nvgpu_memory_capacity() calls it: `nvidia-smi` looked up on PATH."""
    found = shutil.which("nvidia-smi")
    assert found, "nvidia-smi is not on PATH (%s)" % os.environ.get("PATH", "")
    return {"path": found, "memory_total_mib": _smi(["nvidia-smi", "--query-gpu=memory.total",
                                                     "--format=csv,noheader,nounits"]).splitlines()}


def run_steps(ctx, names):
    """In the child: each step in turn, one JSON line each, flushed as it ends."""
    for name in names:
        start = time.perf_counter()
        try:
            detail, ok = globals()["step_" + name](ctx), True
        except BaseException as exc:  # a step's failure is data
            detail, ok = {"error": repr(exc)[:800], "traceback": traceback.format_exc()[-1500:]}, False
        print(json.dumps({"step": name, "ok": ok, "seconds": round(time.perf_counter() - start, 2),
                          "detail": detail, "process": status_fields(("NoNewPrivs", "Seccomp"))},
                         default=str), flush=True)


# ------------------------------------------------------------------------------------------------
# The parent: every group in a child of its own.

def run_group(args, steps, timeout, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    argv = [sys.executable, os.path.abspath(__file__), "--label", args.label, "--cache", args.cache,
            "--nvidia-smi", args.nvidia_smi, "--run-steps", ",".join(steps)]
    results, rc, err = {}, None, ""
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        out, rc, err = run.stdout, run.returncode, run.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = "timed out after %d s; " % timeout + (exc.stderr.decode() if isinstance(exc.stderr, bytes)
                                                   else (exc.stderr or ""))
    for line in out.splitlines():
        if line.startswith('{"step"'):
            record = json.loads(line)
            results[record.pop("step")] = record
    for name in steps:
        if name not in results:
            results[name] = {"ok": False, "seconds": None, "process": None, "detail": {
                "error": "not reached: the group's process ended (rc %s)" % rc, "stderr": err[-2000:]}}
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--out")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--steps", default="", help="only these steps (default: all)")
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--budget", type=float, default=540)
    parser.add_argument("--cache")
    parser.add_argument("--run-steps")
    args = parser.parse_args()
    args.cache = args.cache or os.path.join(os.environ.get("HOME", "/tmp"), ".cache/units-harness", args.label)
    if args.run_steps:
        run_steps(Context(args), args.run_steps.split(","))
        return
    started = time.monotonic()
    # Fresh per-run JIT caches: each run compiles for itself, in the home it runs with.
    for name, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                      ("TORCH_EXTENSIONS_DIR", "torch_extensions")):
        os.environ[name] = os.path.join(args.cache, sub)
    shutil.rmtree(args.cache, ignore_errors=True)
    os.makedirs(args.cache)
    record = {"label": args.label, "argv": sys.argv, "python": sys.executable, "pid": os.getpid(),
              "ppid": os.getppid(), "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
              "groups": os.getgroups(), "cwd": os.getcwd(), "environ": dict(os.environ), "cache": args.cache}
    try:
        import pwd
        record["user"] = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        record["user"] = None
    record["sandbox"] = sandbox()
    record["syscalls"] = syscalls()
    wanted = set(args.steps.split(",")) if args.steps else set(STEPS)
    groups = [(g, [s for s in steps if s in wanted], t) for g, steps, t in GROUPS]
    groups = [g for g in groups if g[1]]

    def left(timeout):
        return max(5, min(timeout, args.budget - (time.monotonic() - started) - 5))

    record["steps"] = {}
    if groups and groups[0][0] == "gpu":
        record["steps"].update(run_group(args, groups[0][1], left(groups[0][2])))
        groups = groups[1:]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for result in pool.map(lambda g: run_group(args, g[1], left(g[2])), groups):
            record["steps"].update(result)
    record["probes"] = {}
    if not args.no_probes:
        for name, env, timeout in PROBES:
            record["probes"].update(run_group(args, [name], left(timeout), env))
    record["steps"] = {name: record["steps"][name] for name in STEPS if name in record["steps"]}
    record["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(record, indent=1, sort_keys=True, default=str)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as out:
            out.write(text)
        os.replace(tmp, args.out)
    else:
        print(text)


if __name__ == "__main__":  # the spawned children (CUDA IPC, the socket) import this file again
    main()
