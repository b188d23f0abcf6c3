"""Lab fixture: stands in for the GPU part of the server role's fusion self-test
(roles/sglang_server/files/fusion_selftest.py --worker sglang_fleet_lab_fusion). Lab nodes have no
GPU; everything around it (one process per GPU, the watchdog, the verdict, the keyed cache, the
role's auto/on/off switch) is the real code.

Behaviour comes from /etc/lab-gpu/fusion.json (files/lab/provision.yml): {"result": "pass" | "fail"
| "hang"}. fail returns an error far beyond bf16's; hang never returns.
"""
import json
import os
import time

CONFIG = os.environ.get("LAB_FUSION_CONFIG", "/etc/lab-gpu/fusion.json")


def run(rank, world_size, settings):
    try:
        with open(CONFIG) as handle:
            result = json.load(handle).get("result", "pass")
    except OSError:
        result = "pass"
    if result == "hang":
        while True:
            time.sleep(60)
    err = 0.75 if result == "fail" else 0.0078125
    shapes = [{"tokens": t, "max_abs_err": err, "norm_err": err, "residual_err": 0.0, "ref_max_abs": 5.0,
               "fused_us": round(20 + t * 0.06, 1), "unfused_us": round(280 + t * 0.08, 1)} for t in settings["tokens"]]
    return {"rank": rank, "shapes": shapes, "jit_seconds": 0.0, "device": "lab (simulated)"}
