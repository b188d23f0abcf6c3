"""Lab fixture: stands in for the GPU part of the server role's fusion self-test
(roles/sglang_server/files/fusion_selftest.py --worker sglang_fleet_lab_fusion). Lab nodes have no
GPU; everything around it (one process per GPU, the watchdog, the verdict, the keyed cache, the
role's auto/on/off switch) is the real code.

Behaviour comes from /etc/lab-gpu/fusion.json (files/lab/provision.yml): {"result": "pass" | "fail"
| "hang" | "no-ninja", "speedup": unfused/fused time (optional: a correct kernel that is barely
faster, or slower, than sglang's unfused path)}. fail returns an error far beyond bf16's; hang never returns; no-ninja fails
as flashinfer's JIT does on a real host whose PATH lacks the venv's bin
(tests/fixtures/hosts/h200x2-driver580/). Like flashinfer's JIT, it leaves its build under the
running user's ~/.cache/flashinfer (FLASHINFER_WORKSPACE_BASE if set), so the tests see whose
cache the self-test fills. Like NCCL and torch, each rank pins itself to its CPUs (sched_setaffinity,
in @resources, which the server unit's SystemCallFilter= keeps for that reason): a hardening line that
kills it kills the fixture as it would a real rank, and the self-test's verdict must name it.
"""
import json
import os
import time

CONFIG = os.environ.get("LAB_FUSION_CONFIG", "/etc/lab-gpu/fusion.json")


def leave_jit_build():
    """Where flashinfer 0.6.3 keeps its JIT builds (flashinfer/jit/env.py), one marker file."""
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE", os.path.expanduser("~"))
    folder = os.path.join(base, ".cache", "flashinfer", "0.6.3", "lab", "cached_ops")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "trtllm_comm.lab"), "w") as handle:
        handle.write("built by uid %d\n" % os.getuid())


def run(rank, world_size, settings):
    os.sched_setaffinity(0, os.sched_getaffinity(0))  # as NCCL pins its threads to the GPU's CPUs
    if rank == 0:
        leave_jit_build()
    try:
        with open(CONFIG) as handle:
            config = json.load(handle)
    except OSError:
        config = {}
    result, speedup = config.get("result", "pass"), config.get("speedup")
    if result == "no-ninja":
        raise FileNotFoundError(2, "No such file or directory", "ninja")
    if result == "hang":
        while True:
            time.sleep(60)
    err = 0.75 if result == "fail" else 0.0078125
    shapes = [{"tokens": t, "max_abs_err": err, "norm_err": err, "residual_err": 0.0, "ref_max_abs": 5.0,
               "fused_us": round(20 + t * 0.06, 1),
               "unfused_us": round((20 + t * 0.06) * speedup if speedup else 280 + t * 0.08, 1)}
              for t in settings["tokens"]]
    return {"rank": rank, "shapes": shapes, "jit_seconds": 0.0, "device": "lab (simulated)",
            "baseline": "lab (simulated)"}
