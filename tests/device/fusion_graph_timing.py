#!/usr/bin/env python3
"""The fusion self-test's graph timing on one GPU: what exists at world size 1.

    PYTHONUNBUFFERED=1 python3 tests/device/fusion_graph_timing.py OUT_DIR

An all-reduce over one rank is nothing (sglang returns its input), and the fused kernel needs two, so
what runs here is the unfused side's norm path at the sizes the fleet's server decodes at (the role's
default command line, EAGLE-3 at tp 8 on this GPU's memory: server_sizes), timed by the self-test's
own code both ways: eager (timed: one event pair per call, the old way) and in CUDA graphs
(graph_timed: captured once, many calls per graph, replays timed). flashinfer's fused add + RMSNorm
where it is installed, else torch's add then RMSNorm; sglang's graph_capture() where sglang is
installed, else a plain side stream (named in the result). Writes OUT_DIR/fusion-graph-timing.json.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
for candidate in (HERE.parents[2] / "roles/sglang_server/files", HERE.parent):
    sys.path.insert(0, str(candidate))
import fusion_selftest as selftest  # noqa: E402

# The role's defaults (roles/sglang_server/defaults/main.yml) at tp 8: what the fleet's unit runs.
SERVER = ["--tp", "8", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def main(out_dir):
    import torch
    gpus = selftest.host_gpus()
    memory = min(g[3] for g in gpus)
    sizes = selftest.server_sizes(SERVER, memory, 2048, [1, 8, 32, 48])
    tokens = sizes["decode_tokens"] + [2048]
    hidden, eps, reps, replays = 7168, 1e-6, 50, 20
    try:
        from flashinfer.norm import fused_add_rmsnorm
        norm_path = "flashinfer fused_add_rmsnorm"
    except ImportError:
        fused_add_rmsnorm = None
        norm_path = "torch add + rms_norm (flashinfer not installed)"
    try:
        from sglang.srt.distributed import parallel_state as ps
        capture, capture_by = ps.graph_capture, "sglang graph_capture()"
    except ImportError:
        capture, capture_by = None, "a side stream (sglang not installed: no TP group at world size 1 either)"
    shapes = []
    started = time.monotonic()
    for count in tokens:
        gen = torch.Generator(device="cuda").manual_seed(count)
        work = torch.randn(count, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        residual = torch.randn(count, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        weight = 1.0 + 0.1 * torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=gen)

        if fused_add_rmsnorm is not None:
            def unfused():
                fused_add_rmsnorm(work, residual, weight, eps)  # the all-reduce over one rank is its input
        else:
            def unfused():
                residual.add_(work)
                work.copy_(torch.nn.functional.rms_norm(residual, (hidden,), weight, eps))

        eager = selftest.timed(unfused, replays)
        graph, = selftest.graph_timed([unfused], reps, replays, capture=capture)
        shapes.append({"tokens": count, "weighs": count in sizes["weighed_tokens"], "decode": count != 2048,
                       "unfused_eager_us": round(eager, 2), "unfused_us": round(graph, 2),
                       "eager_over_graph": round(eager / graph, 2)})
        print(shapes[-1], flush=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    result = {"world_size": 1, "gpu": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
              "server_args": SERVER, "sizes": sizes, "norm_path": norm_path, "graph_capture": capture_by,
              "hidden": hidden, "graph_reps": reps, "replays": replays, "shapes": shapes,
              "elapsed_s": round(time.monotonic() - started, 1)}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "fusion-graph-timing.json"), "w") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
