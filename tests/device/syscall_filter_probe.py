#!/usr/bin/env python3
"""A CUDA tensor handed from one process to another, on a real GPU, with and without the system calls
the server unit's filter kills.

    python3 tests/device/syscall_filter_probe.py KILLED.json OUT_DIR

KILLED.json: the x86_64 calls that SystemCallFilter=@system-service ~@privileged leaves out
(tools/syscall_sites.py killed). Each case runs a producer and a consumer, both spawned fresh: the
producer puts a CUDA tensor on a torch.multiprocessing queue (torch's CUDA IPC), the consumer sums it.
With the filter, each of them first installs a seccomp filter that kills the process (SIGSYS, as
systemd's SystemCallFilter= does) on any of those calls; as the service's user, each first becomes
uid/gid 65534 with no capabilities (the unit's User= and empty CapabilityBoundingSet=). Cases: torch's
default allocator and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. Also records the kernel,
Yama's ptrace_scope (pidfd_getfd needs ptrace access to the producer), torch's version, and which
killed calls the driver's libcuda, torch's libc10_cuda and NCCL make (tools/syscall_sites.py).
Writes OUT_DIR/syscall-filter-probe.json.
"""
import ctypes
import json
import os
import platform
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ALLOW = 0x80000000, 0x7FFF0000
AUDIT_ARCH_X86_64, X32_SYSCALL_BIT = 0xC000003E, 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_DUMPABLE = 38, 22, 2, 4
N = 1 << 20


def bpf(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def install_filter(numbers):
    """Kill the process on a non-native call, an x32 call, or any of `numbers`; allow the rest."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    prog = [bpf(ld_abs, 0, 0, 4), bpf(jeq, 1, 0, AUDIT_ARCH_X86_64), bpf(ret, 0, 0, SECCOMP_RET_KILL_PROCESS),
            bpf(ld_abs, 0, 0, 0), bpf(jge, 0, 1, X32_SYSCALL_BIT), bpf(ret, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    for number in sorted(numbers):
        prog += [bpf(jeq, 0, 1, number), bpf(ret, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    prog.append(bpf(ret, 0, 0, SECCOMP_RET_ALLOW))
    code = ctypes.create_string_buffer(b"".join(prog))
    fprog = struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(code))
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    buf = ctypes.create_string_buffer(fprog)
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(buf), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def enter_sandbox(case):
    if case["service_user"]:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)  # from root: every capability goes
        # A process systemd starts as User= has exec'd since its uid changed, which leaves it dumpable;
        # one that only changed its uid is not, and only CAP_SYS_PTRACE may then pidfd_getfd from it.
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.environ["HOME"] = "/tmp"
    if case["filter"]:
        install_filter(case["killed"])
    if case["expandable_segments"]:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"


def producer(case, queue, done):
    enter_sandbox(case)
    import torch
    tensor = torch.ones(N, device="cuda")
    queue.put(tensor)
    done.wait(120)


def consumer(case, queue, result):
    enter_sandbox(case)
    import torch
    tensor = queue.get(timeout=120)
    result.put(float(tensor.sum().item()))


def run_case(ctx, case):
    queue, done, result = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = {"producer": ctx.Process(target=producer, args=(case, queue, done)),
             "consumer": ctx.Process(target=consumer, args=(case, queue, result))}
    for proc in procs.values():
        proc.start()
    procs["consumer"].join(180)
    done.set()
    procs["producer"].join(60)
    out = {name: {"exitcode": proc.exitcode} for name, proc in procs.items()}
    for name, proc in procs.items():
        if proc.exitcode is None:
            proc.kill()
        elif proc.exitcode < 0:
            out[name]["signal"] = __import__("signal").Signals(-proc.exitcode).name
    try:
        out["sum"] = result.get(timeout=5)
    except Exception:  # queue.Empty: the consumer died or never got the tensor
        out["sum"] = None
    out["ok"] = out["sum"] == float(N)
    return out


def main(killed_file, out_dir):
    import torch
    import torch.multiprocessing as mp
    killed = {int(n): name for n, name in json.loads(Path(killed_file).read_text()).items()}
    ctx = mp.get_context("spawn")
    record = {"kernel": platform.release(), "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
              "nccl": ".".join(map(str, torch.cuda.nccl.version())),
              "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip(),
              "ptrace_scope": (Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
                               if Path("/proc/sys/kernel/yama/ptrace_scope").exists() else "no Yama"),
              "killed_calls": len(killed), "pidfd_getfd_killed": killed.get(438) == "pidfd_getfd",
              "pidfd_open_killed": 434 in killed, "cases": []}
    for expandable in (False, True):
        for service_user, with_filter in ((False, False), (True, False), (True, True)):
            case = {"expandable_segments": expandable, "service_user": service_user, "filter": with_filter,
                    "killed": sorted(killed)}
            outcome = run_case(ctx, case)
            record["cases"].append({k: v for k, v in case.items() if k != "killed"} | outcome)
            print(json.dumps(record["cases"][-1]), flush=True)
    # The driver's libcuda as this process mapped it, torch's caching allocator, and the NCCL it loads.
    mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if "/libcuda.so" in line})
    nccl = sorted(Path(torch.__file__).parents[1].glob("nvidia/nccl/lib/libnccl.so*"))
    files = mapped + [str(Path(torch.__file__).parent / "lib/libc10_cuda.so")] + [str(f) for f in nccl]
    scan = subprocess.run([sys.executable, str(ROOT / "tools/syscall_sites.py"), "scan", killed_file] + files,
                          capture_output=True, text=True)
    record["scanned"] = files
    record["sites"] = scan.stdout.splitlines() + ([scan.stderr.strip()[-300:]] if scan.returncode else [])
    Path(out_dir, "syscall-filter-probe.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "cases"}, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
