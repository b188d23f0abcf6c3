"""Lab fixture: stands in for the GPU part of the acceptance stage's measurement
(roles/gpu_acceptance/files/gpu_acceptance.py --devices sglang_fleet_lab_acceptance). Lab nodes have no
GPU; everything around it (the kernel log's XIDs, nvidia-smi's health read taken while the load runs,
the budget, the document, the record keyed by fingerprint, the verdict against the floors) is the
real code.

The rates come from /etc/lab-gpu/acceptance.json (files/lab/provision.yml): {"gpus": [{"gemm_bf16_tflops",
"memory_bandwidth_gbps", "h2d_gbps", "d2h_gbps"}, ...], "p2p_gbps": rate between any two GPUs,
"busbw_gbps": all-reduce bus bandwidth}, one entry per GPU that nvidia-smi lists. The GEMM load lasts
its seconds, as a real one does, so the health read is taken while it runs.
"""
import json
import os
import threading
import time

CONFIG = os.environ.get("LAB_ACCEPTANCE_CONFIG", "/etc/lab-gpu/acceptance.json")


def load_config():
    with open(CONFIG) as handle:
        return json.load(handle)


class GemmLoad(threading.Thread):
    """The GEMM load's interface (gpu_acceptance.GemmLoad): warm a third of the way in, the rate at the end."""

    def __init__(self, device, size, seconds, tflops):
        super().__init__(daemon=True)
        self.device, self.size, self.seconds, self.tflops = device, size, seconds, tflops
        self.warm = threading.Event()

    def run(self):
        time.sleep(self.seconds / 3)
        self.warm.set()
        time.sleep(self.seconds * 2 / 3)

    def result(self):
        return {"tflops": self.tflops, "min_tflops": self.tflops, "max_tflops": self.tflops, "batches": 3,
                "size": self.size, "simulated": True}


class Devices:
    """gpu_acceptance.TorchDevices' methods, with the rates /etc/lab-gpu/acceptance.json gives."""

    def __init__(self):
        self.config = load_config()

    def gpu(self, index):
        return self.config["gpus"][index]

    def describe(self):
        return {"torch": "lab (simulated)", "cuda": self.config.get("cuda"), "count": len(self.config["gpus"])}

    def gemm_load(self, index, size, seconds):
        return GemmLoad(index, size, seconds, self.gpu(index)["gemm_bf16_tflops"])

    def memory_bandwidth(self, index):
        return self.gpu(index)["memory_bandwidth_gbps"]

    def host_bandwidth(self, index):
        return self.gpu(index)["h2d_gbps"], self.gpu(index)["d2h_gbps"]

    def p2p_bandwidth(self, count):
        rate = self.config["p2p_gbps"]
        return [[None if i == j else rate for j in range(count)] for i in range(count)]

    def allreduce(self, world, backend, sizes, seconds_per_size, timeout):
        bus = self.config["busbw_gbps"]
        rows = [{"bytes": size, "busbw_gbps": bus, "simulated": True} for size in sizes]
        return {"backend": backend, "world_size": world, "correct": True, "sizes": rows,
                "peak_busbw_gbps": bus, "largest_busbw_gbps": bus}
