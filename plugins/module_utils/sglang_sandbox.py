# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What sglang may not be asked for in the server unit's sandbox: the flags and environment whose code
calls a system call the unit's filter kills.

SystemCallFilter=@system-service then ~@privileged (systemd 252) kills the process (SIGSYS) on 90
x86_64 calls (tests/fixtures/syscall-filter/killed-systemd-252-x86_64.json, from
`tools/syscall_sites.py killed`), pidfd_getfd (438, in @debug) among them; pidfd_open (@process) and
sendmsg/recvmsg with SCM_RIGHTS (@network-io) are allowed. What sglang 0.5.9 loads, read for them
(`tools/syscall_sites.py scan` over the pinned wheels, tests/fixtures/syscall-filter/sites.txt, and
their Python sources):

- torch 2.9.1, libc10_cuda.so, CUDACachingAllocator's NativeCachingAllocator::MemHandleCacheEntry:
  pidfd_open, then pidfd_getfd, when a process opens a CUDA tensor another one shared from an
  expandable segment (PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF with expandable_segments:True).
  On the H200 host (its torch 2.11.0 makes the same call, from getIpcDevPtr), under a seccomp filter
  killing those same 90 calls, the process that opened such a tensor died of SIGSYS; with torch's
  default allocator it read the tensor (tests/fixtures/hosts/h200-driver580/syscall-filter/).
- flashinfer 0.6.3, flashinfer/comm/mnnvl.py, MnnvlMemory.open_mnnvl_memory: pidfd_open and
  pidfd_getfd (libc.syscall 434, 438) on x86_64, where the handles are POSIX file descriptors, to map
  every rank's all-to-all workspace; MoeAlltoAll (comm/trtllm_moe_alltoall.py) allocates it, and
  sglang 0.5.9 builds one for --moe-a2a-backend flashinfer (and --speculative-moe-a2a-backend
  flashinfer): layers/moe/token_dispatcher/flashinfer.py, FlashinferDispatcher.

Nothing else on the serving path calls a killed call: NCCL 2.27.5, 2.27.7 and 2.28.9 (libnccl.so.2;
its cuMem handles go to peers over a Unix socket with SCM_RIGHTS, proxy.cc proxyGetFd), sgl-kernel
0.3.21 (its custom all-reduce and --enable-mscclpp's mscclpp, opened with cudaIpcOpenMemHandle),
flashinfer 0.6.3's allreduce fusion (comm/cuda_ipc.py, cudaIpcOpenMemHandle) and its other comm
workspaces (SymmDeviceMemory: IpcSocket, SCM_RIGHTS), the driver's libcuda (580.159.04), NVSHMEM
3.3.20, triton 3.5.1, torch_memory_saver 0.0.9. The mscclpp sgl-kernel 0.3.21 links (its headers in
the wheel are mscclpp commit 51eca89d's) calls pidfd_getfd in RegisteredMemory::Impl for cuMem
memory, but only where it was built with CUDA_NVLS_API_AVAILABLE, which the wheel was not (no call
site; its "CUDA does not support NVLS" branch instead), and sglang's mscclpp buffers come from
torch's allocator, cuMem memory only with expandable segments. Off the serving path: perf_event_open
in torch's profiler (linux_perf::PerfEvent, only with its performance events) and in its
instruction counter (torch._dynamo's record_compile_time_instruction_count, off by default); ptrace
in py-spy, which sglang's watchdog runs after a hang (the dump is lost, the watchdog still acts);
bpf in triton's LLVM (getHostCPUNameForBPF, for the BPF target only).
"""
from __future__ import annotations

DIRECTIVE = "SystemCallFilter=@system-service ~@privileged"
KILLS = "which the server unit's %s kills (SIGSYS)" % DIRECTIVE

MNNVL = ("flashinfer 0.6.3's MoE all-to-all maps its peers' workspaces with pidfd_getfd "
         "(flashinfer/comm/mnnvl.py, MnnvlMemory.open_mnnvl_memory)")
# {dest of the flag: {value: why}}, as sglang_args.lint() parses them (abbreviations, --flag=value).
FLAGS = {
    "moe_a2a_backend": {"flashinfer": MNNVL},
    "speculative_moe_a2a_backend": {"flashinfer": MNNVL},
}
ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
EXPANDABLE = ("torch opens a CUDA tensor another process shared from an expandable segment with pidfd_getfd "
              "(2.9.1: c10/cuda/CUDACachingAllocator.cpp, MemHandleCacheEntry); on the H200 host the process "
              "that opened one died of SIGSYS")


def expandable_segments(conf):
    """Whether a torch allocator config string turns expandable segments on (torch takes only True)."""
    for item in str(conf).split(","):
        key, _, value = item.partition(":")
        if key.strip() == "expandable_segments" and value.strip() == "True":
            return True
    return False


def problems(parsed, env):
    """One sentence per flag (from lint()'s parse) or variable that would meet the unit's filter."""
    found = []
    for dest, values in sorted(FLAGS.items()):
        value = parsed.get(dest)
        if isinstance(value, str) and value in values:
            flag = "--" + dest.replace("_", "-")
            found.append("%s %s: %s, %s" % (flag, value, values[value], KILLS))
    for name in ALLOC_CONF:
        if name in (env or {}) and expandable_segments(env[name]):
            found.append("%s=%s: %s, %s" % (name, env[name], EXPANDABLE, KILLS))
    return found
