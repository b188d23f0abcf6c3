#!/usr/bin/env python3
"""FlashInfer's TRT-LLM allreduce fusion, tested on this host's own GPUs before the server uses it.

One process per GPU (torch.distributed, NCCL). Each sets up flashinfer's IPC workspace as sglang
0.5.9 does (srt/layers/flashinfer_comm_fusion.py: max 2048 tokens, the model's hidden size), runs
the fused all-reduce + residual add + RMSNorm (kARResidualRMSNorm) on random bf16 inputs at the
server's decode token counts and at prefill, and compares it with the unfused reference: NCCL
all-reduce, then the same add and RMSNorm in torch, in fp32. It is timed against what sglang itself
runs without fusion: sglang's own all-reduce for this world (its tensor-parallel group, set up as
its model runner does from the server's comm flags: custom all-reduce unless
--disable-custom-all-reduce, mscclpp with --enable-mscclpp, torch symmetric memory with
--enable-torch-symm-mem, else NCCL), then flashinfer's fused add + RMSNorm. The decode token counts
are the server's (--server-args, its command line: see server_sizes). A watchdog turns a hang into
a failure.

The result is one JSON object (stdout, and --cache-dir/<key>.json). The key covers what can change
the outcome: flashinfer's version and the bytes of its comm sources (the patch state), the driver,
the GPU set, the peer-to-peer topology and the test's own settings (timeout and tolerance too); a
cached result is returned without touching a GPU. Exit status 0 whatever the verdict (pass, fail, hang, single-gpu, error):
the caller decides; 2 only for bad usage. An error (the test could not run: a module that does not
import, `ninja` not on PATH, a failed JIT compile) is never cached.

On a host with systemd the role runs it as a transient unit with the server unit's own sandbox
(systemd-run --property=..., --sandbox names each property here, so they are part of the key: a
verdict under other hardening is not a verdict under this one). What it ran under is recorded
("process": its unit from /proc/self/cgroup, NoNewPrivs, Seccomp, its capabilities). A rank the
sandbox stops (killed by SIGSYS, EPERM/EROFS/EAFNOSUPPORT) is an error, never a cached fail.

--worker MODULE replaces the GPU part (a module with run(rank, world_size, settings) -> dict per
rank, rank 0's dict carrying "shapes"): the lab, which has no GPU, uses it.
"""
import argparse
import errno
import hashlib
import importlib
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import time

SCHEMA = 4  # 4: fused_us/unfused_us are CUDA-graph replays, eager kept as *_eager_us; 3: the server's own sizes and comm flags (--server-args); 2: unfused_us is sglang's unfused path


def nvidia_smi(*args):
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
        return out.returncode, out.stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)


def host_gpus():
    """[(index, uuid, driver, memory MiB or None)] as nvidia-smi reports them, honouring CUDA_VISIBLE_DEVICES."""
    rc, out = nvidia_smi("--query-gpu=index,uuid,driver_version,memory.total", "--format=csv,noheader,nounits")
    if rc != 0:
        raise RuntimeError("nvidia-smi --query-gpu failed (rc %d): %s" % (rc, out.strip()[-300:]))
    gpus = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if line.strip():
            memory = fields[3] if len(fields) > 3 and fields[3].replace(".", "", 1).isdigit() else None
            gpus.append((fields[0], fields[1], fields[2], float(memory) if memory else None))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        gpus = [g for g in gpus if g[0] in wanted or g[1] in wanted]
    return gpus


def flashinfer_state(python_path=None):
    """flashinfer's version and a digest of its comm sources (our patch changes jit/comm.py)."""
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        dist = distribution("flashinfer-python")
    except PackageNotFoundError:
        return {"version": None, "sources": None}
    digest = hashlib.sha256()
    for rel in ("flashinfer/jit/comm.py", "flashinfer/comm/trtllm_ar.py"):
        path = dist.locate_file(rel)
        try:
            digest.update(rel.encode() + b"\0" + open(path, "rb").read())
        except OSError:
            digest.update(rel.encode() + b"\0missing")
    return {"version": dist.version, "sources": digest.hexdigest()[:16]}


def cache_key(settings, gpus, p2p_text, flashinfer):
    material = {"schema": SCHEMA, "settings": settings, "gpus": [g[1] for g in gpus],
                "driver": sorted({g[2] for g in gpus}), "p2p": p2p_text, "flashinfer": flashinfer,
                "worker": settings.get("worker") or "gpu"}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


# --- the sizes the server runs ----------------------------------------------------------------------
# sglang 0.5.9 decodes in CUDA graphs captured at a ladder of batch sizes; a step of `bs` requests is
# padded up to the next captured size. With EAGLE-3 each graph is a TARGET_VERIFY step of
# bs x speculative_num_draft_tokens tokens (srt/model_executor/cuda_graph_runner.py:
# CudaGraphRunner.__init__, num_tokens_per_bs). Those token counts are what the fused kernel meets.

def _cuda_graph_max_bs(gpu_memory_mib, tp):
    """sglang's default --cuda-graph-max-bs (srt/server_args.py: ServerArgs._handle_gpu_memory_settings)."""
    if gpu_memory_mib is None:
        return 160
    for below_gib, small_tp, large_tp in ((20, 8, 8), (35, 24, 80), (60, 32, 160), (90, 256, 512), (160, 256, 512)):
        if gpu_memory_mib < below_gib * 1024:
            return small_tp if tp < 4 else large_tp
    return 512


def _cuda_graph_ladder(max_bs, speculative, no_padding):
    """sglang's captured batch sizes up to max_bs (srt/server_args.py: ServerArgs._generate_cuda_graph_batch_sizes)."""
    if no_padding:
        ladder = list(range(1, max_bs + 1))
    elif not speculative:
        ladder = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    else:  # less padding at small batch sizes
        ladder = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
                  + list(range(272, max_bs + 1, 16)))
    return [bs for bs in ladder if bs <= max_bs]


def _server_parser():
    """The server flags that set the sizes it decodes at and the all-reduce it runs without fusion."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--tp", "--tp-size", "--tensor-parallel-size", dest="tp", type=int, default=1)
    parser.add_argument("--cuda-graph-max-bs", type=int)
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--disable-cuda-graph-padding", action="store_true")
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--enable-two-batch-overlap", action="store_true")
    parser.add_argument("--speculative-algorithm")
    parser.add_argument("--speculative-num-steps", type=int)
    parser.add_argument("--speculative-eagle-topk", type=int)
    parser.add_argument("--speculative-num-draft-tokens", type=int)
    for flag in ("--disable-custom-all-reduce", "--enable-mscclpp", "--enable-torch-symm-mem", "--enable-symm-mem"):
        parser.add_argument(flag, action="store_true")
    return parser


COMM_FLAGS = ("disable_custom_all_reduce", "enable_mscclpp", "enable_torch_symm_mem", "enable_symm_mem")


def server_sizes(server_argv, gpu_memory_mib, workspace_tokens=2048, weigh_batches=(1,)):
    """The decode token counts a server started with `server_argv` runs its layers at, on GPUs of
    `gpu_memory_mib` (the smallest, as sglang reads it from nvidia-smi), as sglang 0.5.9 derives them:

    - the captured batch sizes: --cuda-graph-bs, else the ladder up to --cuda-graph-max-bs (default from
      the GPU memory and --tp), kept to the request pool (--max-running-requests; EAGLE's default is 48),
      with the pool's own size added when the ladder outgrows it (cuda_graph_runner.py:
      get_batch_sizes_to_capture);
    - times the tokens each request verifies per step (EAGLE: --speculative-num-draft-tokens, which
      sglang sets to num-steps + 1 at topk 1), kept within the fusion workspace (`workspace_tokens`,
      sglang's 2048, also its FUSE_ALLREDUCE_MAX_BATCH_SIZE).

    weigh_batches: requests per step the decision weighs; each is padded up to the captured size sglang
    would run it at (above the largest: the largest). Returns a dict (the result's "sizes")."""
    args, _ = _server_parser().parse_known_args([str(a) for a in server_argv])
    algorithm = (args.speculative_algorithm or "").upper() or None
    tokens_per_batch = 1
    if algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        if args.speculative_num_steps is None:
            raise ValueError("the server leaves its speculative steps to sglang (auto_choose_speculative_params, "
                             "which reads the model): give --speculative-num-steps, --speculative-eagle-topk and "
                             "--speculative-num-draft-tokens")
        tokens_per_batch = (args.speculative_num_steps + 1 if args.speculative_eagle_topk == 1
                            else args.speculative_num_draft_tokens)
    elif algorithm is not None:  # NGRAM: the window sglang defaults it to is not on the command line
        if args.speculative_num_draft_tokens is None:
            raise ValueError("--speculative-algorithm %s without --speculative-num-draft-tokens" % algorithm)
        tokens_per_batch = args.speculative_num_draft_tokens
    if args.enable_two_batch_overlap:
        tokens_per_batch = 1  # as get_batch_sizes_to_capture sets it
    max_running = args.max_running_requests or (48 if algorithm else None)
    if args.cuda_graph_bs:
        ladder, max_bs, max_bs_from = sorted(args.cuda_graph_bs), max(args.cuda_graph_bs), "--cuda-graph-bs"
    else:
        given = args.cuda_graph_max_bs
        max_bs = given or _cuda_graph_max_bs(gpu_memory_mib, args.tp)
        max_bs_from = "--cuda-graph-max-bs" if given else "sglang's default for %s MiB GPUs at tp %d" % (
            int(gpu_memory_mib) if gpu_memory_mib else "unknown", args.tp)
        ladder = _cuda_graph_ladder(max_bs, algorithm is not None, args.disable_cuda_graph_padding)
    if max_running is not None:
        ladder = sorted({bs for bs in ladder if bs <= max_running} | ({max_running} if max(ladder) > max_running
                                                                    else set()))
    batches = [bs for bs in ladder if bs * tokens_per_batch <= workspace_tokens]
    if not batches:
        raise ValueError("no captured batch of %d tokens per request fits the fusion workspace of %d tokens"
                         % (tokens_per_batch, workspace_tokens))
    weighed = sorted({next((bs for bs in batches if bs >= int(want)), batches[-1]) for want in weigh_batches})
    return {"graphs": not args.disable_cuda_graph, "tokens_per_batch": tokens_per_batch,
            "cuda_graph_max_bs": max_bs, "max_bs_from": max_bs_from, "max_running_requests": max_running,
            "batch_sizes": batches, "decode_tokens": [bs * tokens_per_batch for bs in batches],
            "weighed_batches": weighed, "weighed_tokens": [bs * tokens_per_batch for bs in weighed],
            "comm": {flag: bool(getattr(args, flag)) for flag in COMM_FLAGS}}


# --- the GPU part (one process per rank) -----------------------------------------------------------

def rms_norm_reference(x, weight, eps):
    import torch
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def graph_timed(fns, reps, replays, capture=None):
    """Per-call microseconds of each of `fns` as sglang decodes: each captured once in its own CUDA graph,
    `reps` calls in a row (so no Python and no launch gap between two calls counts), the graph replayed
    `replays` times, each replay timed by one event pair; the median replay over `reps`.

    capture: a context manager whose value has `.stream` (sglang's graph_capture() for the TP group: it
    enables pynccl and the custom all-reduce's graph mode inside, and registers the graph's buffers on
    leaving). Every graph is captured inside one such block, as sglang's CudaGraphRunner does, and
    replayed only after it."""
    import contextlib
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside any graph: lazy initialisation, JIT, workspaces
        for fn in fns:
            for _ in range(3):
                fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs = [torch.cuda.CUDAGraph() for _ in fns]
    with (capture() if capture else contextlib.nullcontext()) as context:
        stream = getattr(context, "stream", None)
        for graph, fn in zip(graphs, fns):
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(reps):
                    fn()
    torch.cuda.synchronize()
    results = []
    for graph in graphs:
        graph.replay()  # the first replay uploads the graph
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0 / reps)
        results.append(sorted(times)[len(times) // 2])
    del graphs
    return results


def graph_baseline(group, x):
    """The all-reduce sglang's GroupCoordinator.all_reduce (srt/distributed/parallel_state.py) takes for `x`
    inside a CUDA graph: the first out-of-place method that will take it, else pynccl in place (enabled
    under graph_capture(); outside a graph it is torch.distributed's)."""
    if group.world_size == 1:
        return "none (one rank)"
    for name, comm, will in (("custom all-reduce", group.ca_comm, "should_custom_ar"),
                             ("quick all-reduce", getattr(group, "qr_comm", None), "should_quick_allreduce"),
                             ("mscclpp", group.pymscclpp_comm, "should_mscclpp_allreduce"),
                             ("torch symmetric memory", group.torch_symm_mem_comm, "should_torch_symm_mem_allreduce")):
        if comm is not None and not comm.disabled and getattr(comm, will)(x):
            return name
    return "pynccl" if group.pynccl_comm is not None else "torch.distributed"


def timed(fn, iters, warmup=3):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return sorted(times)[len(times) // 2]


class BaselineError(RuntimeError):
    """sglang's own unfused path could not be set up on this host: the test could not run."""


def sglang_tp_group(rank, world_size, settings):
    """sglang's tensor-parallel group for this world, set up as its model runner sets it up
    (srt/model_executor/model_runner.py: the all-reduce switches, then the groups), and the name of
    the all-reduce it holds: what a server without fusion runs between a layer and the next."""
    try:
        from sglang.srt.distributed import parallel_state as ps
        comm = settings["comm"]
        if comm["enable_symm_mem"]:  # sglang reads it from its global server args, which this test has not
            raise BaselineError("the server runs --enable-symm-mem (NCCL symmetric memory), a path this self-test "
                                "does not set up: no baseline to time against")
        ps.set_custom_all_reduce(not comm["disable_custom_all_reduce"])
        ps.set_mscclpp_all_reduce(comm["enable_mscclpp"])
        ps.set_torch_symm_mem_all_reduce(comm["enable_torch_symm_mem"])
        ps.init_distributed_environment(world_size=world_size, rank=rank, local_rank=rank, backend="nccl")
        ps.initialize_model_parallel(tensor_model_parallel_size=world_size)
        group = ps.get_tp_group()
    except BaselineError:
        raise
    except Exception as exc:  # no verdict on the GPUs without the baseline to time against
        raise BaselineError("sglang's tensor-parallel group could not be set up: %s: %s"
                            % (type(exc).__name__, exc)) from exc
    held = [name for name, comm in (("custom all-reduce", group.ca_comm), ("mscclpp", group.pymscclpp_comm),
                                    ("torch symmetric memory", group.torch_symm_mem_comm))
            if comm is not None and not comm.disabled]
    return group, held[0] if held else "NCCL"


def run(rank, world_size, settings):
    """The real test on GPU `rank`: returns this rank's errors and timings per shape."""
    import torch
    import torch.distributed as dist
    import flashinfer.comm as comm
    from flashinfer.norm import fused_add_rmsnorm

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", rank))
    tp_group, baseline = sglang_tp_group(rank, world_size, settings)
    from sglang.srt.distributed import parallel_state as ps
    hidden, max_tokens, eps = settings["hidden"], settings["max_tokens"], settings["eps"]
    jit_start = time.monotonic()
    ipc_handles, workspace = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(
        rank, world_size, max_tokens, hidden, group=dist.group.WORLD)
    dist.barrier()
    shapes = []
    try:
        for tokens in settings["tokens"]:
            gen = torch.Generator(device="cuda").manual_seed(1000 + tokens)  # same on every rank
            residual = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
            weight = 1.0 + 0.1 * torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
            own = torch.Generator(device="cuda").manual_seed(rank * 7919 + tokens)  # differs per rank
            x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=own)
            norm_out, residual_out = torch.empty_like(x), torch.empty_like(residual)

            def fused():
                comm.trtllm_allreduce_fusion(
                    allreduce_in=x, world_size=world_size, world_rank=rank, token_num=tokens, hidden_dim=hidden,
                    workspace_ptrs=workspace, launch_with_pdl=True, use_oneshot=None,
                    trigger_completion_at_end=False, fp32_acc=False,
                    pattern_code=comm.AllReduceFusionPattern.kARResidualRMSNorm, allreduce_out=None,
                    residual_in=residual, residual_out=residual_out, norm_out=norm_out, quant_out=None,
                    scale_out=None, rms_gamma=weight, rms_eps=eps, scale_factor=None, layout_code=None)

            def reference():
                reduced = x.clone()
                dist.all_reduce(reduced)
                added = reduced + residual
                return rms_norm_reference(added, weight, eps), added

            # sglang without fusion: its all-reduce on the layer's output (in place for NCCL), then
            # flashinfer's fused add + RMSNorm in place. Normalising keeps the repeated values bounded.
            work, work_residual = x.clone(), residual.clone()

            def unfused():
                fused_add_rmsnorm(tp_group.all_reduce(work), work_residual, weight, eps)

            fused()
            torch.cuda.synchronize()
            if not shapes:
                jit_seconds = time.monotonic() - jit_start
            baseline_path = graph_baseline(tp_group, work)
            ref_norm, ref_residual = reference()
            err_norm = (norm_out.float() - ref_norm.float()).abs().max().item()
            err_res = (residual_out.float() - ref_residual.float()).abs().max().item()
            scale = ref_norm.float().abs().max().item()
            shapes.append({"tokens": tokens, "max_abs_err": max(err_norm, err_res), "norm_err": err_norm,
                           "residual_err": err_res, "ref_max_abs": scale,
                           "baseline": baseline_path,
                           # eager, one event pair per call: a diagnostic (sglang decodes in graphs)
                           "fused_eager_us": round(timed(fused, settings["iters"]), 1),
                           "unfused_eager_us": round(timed(unfused, settings["iters"]), 1)})
            dist.barrier()
            # sglang decodes in CUDA graphs: the decision's timings are graph replays
            fused_us, unfused_us = graph_timed([fused, unfused], settings["graph_reps"], settings["iters"],
                                               capture=ps.graph_capture)
            shapes[-1].update(fused_us=round(fused_us, 2), unfused_us=round(unfused_us, 2))
            dist.barrier()
    finally:
        dist.barrier()
        comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion(ipc_handles, group=dist.group.WORLD)
        from sglang.srt.distributed import parallel_state as ps
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()
        if dist.is_initialized():
            dist.destroy_process_group()
    return {"rank": rank, "shapes": shapes, "jit_seconds": round(jit_seconds, 1),
            "device": torch.cuda.get_device_name(rank), "baseline": baseline}


# --- the parent: one process per GPU, a watchdog, the verdict --------------------------------------

# What says the test could not run here, rather than anything about the GPUs: a module that does not
# import, a tool that is not on PATH (flashinfer's JIT runs `ninja`), a compile that failed.
SETUP_ERRORS = (ImportError, FileNotFoundError, subprocess.CalledProcessError, BaselineError)
SETUP_EXIT = 3
# What a sandbox does to a process it stops (EPERM: a device cgroup; EROFS: a read-only file system;
# EAFNOSUPPORT: a refused address family): the test could not run, which says nothing of the GPUs.
DENIED_ERRNOS = (errno.EPERM, errno.EROFS, errno.EAFNOSUPPORT)


def process_record():
    """What this process runs under, as the kernel says it: its unit (cgroup), user and confinement."""
    record = {"uid": os.getuid(), "user": None, "unit": None}
    try:
        record["user"] = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        pass
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in ("NoNewPrivs", "Seccomp", "CapBnd", "CapEff", "Umask"):
                    record[key] = value.strip()
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                if line.startswith("0::"):
                    record["cgroup"] = line[3:].strip()
                    record["unit"] = record["cgroup"].rsplit("/", 1)[-1] or None
    except OSError as exc:
        record["error"] = str(exc)
    return record


def rank_main(args):
    settings = json.loads(args.settings)
    try:
        worker = importlib.import_module(args.worker) if args.worker else sys.modules[__name__]
        result = worker.run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), settings)
    except Exception as exc:
        if not isinstance(exc, SETUP_ERRORS) and not (isinstance(exc, OSError) and exc.errno in DENIED_ERRNOS):
            raise
        detail = "%s: %s" % (type(exc).__name__, exc)
        if isinstance(exc, subprocess.CalledProcessError) and exc.output:
            detail += "\n" + str(exc.output)[-1000:]
        with open(args.rank_out, "w") as handle:
            json.dump({"setup_error": detail}, handle)
        print(detail, file=sys.stderr)
        return SETUP_EXIT
    with open(args.rank_out, "w") as handle:
        json.dump(result, handle)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(world_size, settings, args, workdir):
    """Runs every rank; returns (per-rank results or None, status, reason)."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world_size))
    procs = []
    for rank in range(world_size):
        out = os.path.join(workdir, "rank%d.json" % rank)
        log = open(os.path.join(workdir, "rank%d.log" % rank), "w")
        cmd = [sys.executable, os.path.abspath(__file__), "--rank-out", out, "--settings", json.dumps(settings)]
        if args.worker:
            cmd += ["--worker", args.worker]
        procs.append((subprocess.Popen(cmd, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True), out, log))
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and any(p.poll() is None for p, _, _ in procs):
        if any(p.poll() not in (None, 0) for p, _, _ in procs):
            time.sleep(2)  # let the others report, then stop them
            break
        time.sleep(0.5)
    hung = [rank for rank, (p, _, _) in enumerate(procs) if p.poll() is None]
    for p, _, _ in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    tails = {}
    for rank, (p, out, log) in enumerate(procs):
        log.close()
        with open(log.name, errors="replace") as handle:
            tails[rank] = handle.read()[-1500:]
    failed = [rank for rank, (p, _, _) in enumerate(procs) if p.returncode not in (0, None) and rank not in hung]
    sigsys = [rank for rank in failed if procs[rank][0].returncode == -signal.SIGSYS]
    if sigsys:
        return None, "error", ("rank %d was killed by SIGSYS: a system call it made is one this process's seccomp "
                               "filter kills (not a verdict on its GPUs, and not cached): %s"
                               % (sigsys[0], tails[sigsys[0]].strip()[-500:]))
    setup = [rank for rank in failed if procs[rank][0].returncode == SETUP_EXIT and os.path.exists(procs[rank][1])]
    if setup:
        with open(procs[setup[0]][1]) as handle:
            detail = json.load(handle)["setup_error"]
        return None, "error", ("rank %d could not run the test on this host (not a verdict on its GPUs, and not "
                               "cached: the next run tries again): %s" % (setup[0], detail))
    if failed:
        rank = failed[0]
        code = procs[rank][0].returncode
        how = "was killed by %s" % signal.Signals(-code).name if code < 0 else "exited with %d" % code
        return None, "fail", "rank %d %s: %s" % (rank, how, tails[rank].strip())
    if hung:
        return None, "hang", ("no result from rank(s) %s within %d s: the fused kernel or its IPC workspace hung "
                              "(peer-to-peer access between the GPUs is the usual cause)" % (hung, args.timeout))
    results = []
    for _, out, _ in procs:
        with open(out) as handle:
            results.append(json.load(handle))
    return results, None, None


def verdict(results, tolerance):
    """pass/fail from rank 0's shapes (every rank holds the same all-reduced values)."""
    worst = max(results, key=lambda r: max(s["max_abs_err"] for s in r["shapes"]))
    shapes = worst["shapes"]
    bad = [s for s in shapes if s["max_abs_err"] > tolerance["atol"] + tolerance["rtol"] * s["ref_max_abs"]]
    if bad:
        return "fail", ("fused result differs from NCCL all-reduce + add + RMSNorm: max error %.4g at %d tokens "
                        "(tolerance %g + %g x |ref|)" % (bad[0]["max_abs_err"], bad[0]["tokens"], tolerance["atol"],
                                                       tolerance["rtol"])), shapes
    return "pass", "max error %.4g within tolerance" % max(s["max_abs_err"] for s in shapes), shapes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", help="keep results here, keyed; a cached result is returned as is")
    parser.add_argument("--timeout", type=int, default=600, help="seconds before a run counts as hung")
    parser.add_argument("--server-args", default="[]", metavar="JSON",
                        help="the server's command line after `-m sglang.launch_server`, a JSON list: the decode "
                             "sizes and the unfused all-reduce are the ones it runs (see server_sizes)")
    parser.add_argument("--weigh-batches", default="1,8,32,48",
                        help="requests per decode step the decision weighs (each padded to a captured size)")
    parser.add_argument("--tokens", default="2048", help="token counts timed besides the decode sizes (prefill)")
    parser.add_argument("--hidden", type=int, default=7168, help="hidden size (Kimi-K2.5: 7168)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="workspace size, as sglang's")
    parser.add_argument("--eps", type=float, default=1e-6)
    parser.add_argument("--atol", type=float, default=0.0625, help="absolute tolerance (bf16)")
    parser.add_argument("--rtol", type=float, default=0.0078125, help="relative to the reference's largest value")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations (eager) and graph replays per shape")
    parser.add_argument("--graph-reps", type=int, default=50, help="calls captured in a row in each CUDA graph")
    parser.add_argument("--sandbox", action="append", default=[], metavar="PROPERTY",
                        help="a property of the transient unit it runs in (recorded, and part of the key)")
    parser.add_argument("--worker", default="", help="module that replaces the GPU part (the lab)")
    parser.add_argument("--rank-out", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_out:
        return rank_main(args)
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
        weigh = [int(b) for b in args.weigh_batches.split(",") if b.strip()]
    except ValueError:
        parser.error("--tokens and --weigh-batches take comma-separated integers")
    if not tokens or max(tokens) > args.max_tokens or min(tokens) < 1 or args.timeout < 1:
        parser.error("token counts must lie in 1..--max-tokens and --timeout must be positive")
    try:
        server_argv = json.loads(args.server_args)
        assert isinstance(server_argv, list)
    except (ValueError, AssertionError):
        parser.error("--server-args takes a JSON list of the server's arguments")
    settings = {"tokens": tokens, "hidden": args.hidden, "max_tokens": args.max_tokens, "eps": args.eps,
                "iters": args.iters, "graph_reps": args.graph_reps, "worker": args.worker, "sandbox": args.sandbox}
    tolerance = {"atol": args.atol, "rtol": args.rtol}
    started = time.monotonic()
    result = {"status": "error", "reason": "", "cached": False, "tolerance": tolerance, "settings": settings,
              "process": process_record()}
    try:
        gpus = host_gpus()
        memory = [g[3] for g in gpus if g[3]]
        sizes = server_sizes(server_argv, min(memory) if memory else None, args.max_tokens, weigh)
        settings.update(tokens=sorted(set(sizes["decode_tokens"]) | set(tokens)), comm=sizes["comm"],
                        weighed_tokens=sizes["weighed_tokens"])
        result["sizes"] = sizes
        _, p2p = nvidia_smi("topo", "-p2p", "r")
        flashinfer = flashinfer_state()
        # The timeout is part of the key: a hang at one timeout is not a verdict for another.
        key = cache_key(dict(settings, tolerance=tolerance, timeout=args.timeout), gpus, p2p, flashinfer)
        result.update(key=key, world_size=len(gpus), gpus=[g[1] for g in gpus],
                      driver=gpus[0][2] if gpus else None, flashinfer=flashinfer)
        cached = os.path.join(args.cache_dir, key + ".json") if args.cache_dir else None
        if cached and os.path.exists(cached):
            with open(cached) as handle:
                print(json.dumps(dict(json.load(handle), cached=True)))
            return 0
        if flashinfer["version"] is None and not args.worker:
            result.update(status="error", reason="flashinfer-python is not installed in %s" % sys.prefix)
        elif len(gpus) < 2:
            result.update(status="single-gpu", reason="%d GPU: allreduce fusion has nothing to fuse (an all-reduce "
                                                      "over one GPU is a copy); sglang skips it at tp 1" % len(gpus))
        else:
            with tempfile.TemporaryDirectory(prefix="fusion-selftest-") as workdir:
                results, status, reason = launch(len(gpus), settings, args, workdir)
            if results is None:
                result.update(status=status, reason=reason)
            else:
                status, reason, shapes = verdict(results, tolerance)
                for shape in shapes:  # what the decision reads: the sizes that weigh, and which are decode
                    shape.update(decode=shape["tokens"] in sizes["decode_tokens"],
                                 weighs=shape["tokens"] in sizes["weighed_tokens"])
                result.update(status=status, reason=reason, shapes=shapes,
                              jit_seconds=max(r.get("jit_seconds", 0) for r in results),
                              device=results[0].get("device"), baseline=results[0].get("baseline"))
    except Exception as exc:  # the verdict must always be a JSON object the caller can read
        result.update(status="error", reason="%s: %s" % (type(exc).__name__, exc))
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    if args.cache_dir and result.get("key") and result["status"] in ("pass", "fail", "hang", "single-gpu"):
        os.makedirs(args.cache_dir, exist_ok=True)
        partial = os.path.join(args.cache_dir, result["key"] + ".json.part")
        with open(partial, "w") as handle:
            json.dump(result, handle, indent=1)
        os.replace(partial, os.path.join(args.cache_dir, result["key"] + ".json"))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
