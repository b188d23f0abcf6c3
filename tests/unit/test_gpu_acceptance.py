"""The acceptance stage: the measurement's parsing and all-reduce orchestration, and the verdict that
holds a degraded host out (a link at x8, an XID 79, a low GEMM rate), replayed on the H200 capture."""
import copy
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, H200, ROOT
from gpu_acceptance import (FLOORS, FilterModule, acceptance_fingerprint, acceptance_floors, acceptance_verdict,
                            acceptance_warnings)

SCRIPT = ROOT / "roles/gpu_acceptance/files/gpu_acceptance.py"
CAPTURE = H200 / "acceptance"
OWN = FIXTURES / "gpu_acceptance"


def _load_script():
    # The filter is importable as gpu_acceptance (plugins/filter): the script is loaded under its own name.
    spec = importlib.util.spec_from_file_location("gpu_acceptance_measure", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


measure = _load_script()


def h200():
    return json.loads((CAPTURE / "acceptance.json").read_text())


def rtx_host():
    """An 8-GPU RTX PRO 6000 host that passes: every rate above its floor, links at Gen5 x16."""
    health = {"persistence_mode": "Enabled", "temperature_c": 62, "ecc_uncorrected_volatile": 0,
              "ecc_uncorrected_aggregate": 0, "retired_pages_pending": None, "remapped_rows_pending": "No",
              "remapped_rows_failure": "No", "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16,
              "pcie_width_max": 16, "throttle_reasons_active": 0x4}
    gpus = []
    for index in range(8):
        gpus.append({"index": index, "uuid": "GPU-%08d" % index, "pci_bus_id": "00000000:%02X:00.0" % (0x18 + index),
                     "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "health": dict(health), "xids": [],
                     "gemm_bf16_tflops": 395.0, "memory_bandwidth_gbps": 1540.0, "h2d_gbps": 53.0, "d2h_gbps": 52.5})
    return {"gpus": gpus, "errors": [], "skipped": [], "kernel_log": {"source": "dmesg", "xids": []},
            "p2p_gbps": [[None if i == j else 41.0 for j in range(8)] for i in range(8)],
            "allreduce": {"backend": "nccl", "world_size": 8, "correct": True, "peak_busbw_gbps": 38.0}}


# --- The verdict ---------------------------------------------------------------------------------

def test_a_healthy_host_passes_with_nothing_to_say():
    assert acceptance_verdict(rtx_host(), FLOORS) == []
    assert acceptance_warnings(rtx_host(), FLOORS) == []


def test_a_link_at_x8_under_load_fails_naming_gpu_value_and_floor():
    host = rtx_host()
    host["gpus"][3]["health"]["pcie_width_current"] = 8
    [failure] = acceptance_verdict(host, FLOORS)
    assert (failure["gpu"], failure["check"], failure["value"], failure["floor"]) == \
        ("GPU 3 (GPU-00000003)", "pcie_width", 8, 16)
    assert failure["message"] == "GPU 3 (GPU-00000003): pcie_width: PCIe link under load x8, below its max x16 (floor: 16)"


def test_a_gpu_in_a_gen4_slot_fails_though_it_runs_at_its_max():
    host = rtx_host()
    host["gpus"][0]["health"].update(pcie_gen_current=4, pcie_gen_max=4)
    assert [(f["check"], f["value"], f["floor"]) for f in acceptance_verdict(host, FLOORS)] == [("pcie_gen_max", 4, 5)]


def test_an_xid_79_fails_the_gpu_and_an_application_xid_is_only_said():
    host = rtx_host()
    host["gpus"][5]["xids"] = [79, 13]
    [failure] = acceptance_verdict(host, FLOORS)
    assert (failure["gpu"], failure["check"], failure["value"]) == ("GPU 5 (GPU-00000005)", "xid", 79)
    assert "fallen off the bus" in failure["message"]
    assert acceptance_warnings(host) == ["GPU 5 (GPU-00000005): XID 13 since boot (an application's fault, not the GPU's)"]


def test_an_xid_on_a_gpu_nvidia_smi_no_longer_lists_fails_the_host():
    host = rtx_host()
    host["kernel_log"]["xids"] = [{"pci": "0000:99:00", "xid": 79, "line": "..."}]
    [failure] = acceptance_verdict(host, FLOORS)
    assert (failure["gpu"], failure["check"], failure["value"]) == ("PCI 0000:99:00", "xid", 79)


def test_a_low_gemm_rate_fails_with_value_and_floor():
    host = rtx_host()
    host["gpus"][2]["gemm_bf16_tflops"] = 180.0
    [failure] = acceptance_verdict(host, FLOORS)
    assert (failure["check"], failure["value"], failure["floor"]) == ("gemm_bf16_tflops", 180.0, 302.3)
    assert failure["message"] == "GPU 2 (GPU-00000002): gemm_bf16_tflops: 180.0 TFLOP/s (floor: 302.3)"


@pytest.mark.parametrize("change,check", [
    ({"remapped_rows_pending": "Yes"}, "remapped_rows_pending"),
    ({"remapped_rows_failure": "Yes"}, "remapped_rows_failure"),
    ({"retired_pages_pending": "Yes"}, "retired_pages_pending"),
    ({"ecc_uncorrected_volatile": 2}, "ecc_uncorrected_volatile"),
    ({"throttle_reasons_active": 0x4 | 0x40}, "throttle"),      # hardware thermal slowdown
    ({"throttle_reasons_active": 0x80}, "throttle"),            # power brake
    ({"temperature_c": 91}, "temperature_c"),
])
def test_each_health_fault_fails(change, check):
    host = rtx_host()
    host["gpus"][1]["health"].update(change)
    assert [f["check"] for f in acceptance_verdict(host, FLOORS)] == [check]


def test_persistence_mode_off_is_a_warning_not_a_failure():
    host = rtx_host()
    host["gpus"][0]["health"]["persistence_mode"] = "Disabled"
    assert acceptance_verdict(host, FLOORS) == []
    assert acceptance_warnings(host) == ["GPU 0 (GPU-00000000): persistence mode is off (the server's gpu-init unit sets it)"]


def test_slow_p2p_pair_and_low_bus_bandwidth_fail():
    host = rtx_host()
    host["p2p_gbps"][6][7] = 12.0
    host["allreduce"]["peak_busbw_gbps"] = 9.5
    assert [(f["gpu"], f["check"], f["value"]) for f in acceptance_verdict(host, FLOORS)] == [
        ("GPU 6 -> GPU 7", "p2p_gbps", 12.0), ("host", "allreduce_busbw_gbps", 9.5)]


@pytest.mark.parametrize("change,check", [
    (lambda h: h["gpus"][4].pop("memory_bandwidth_gbps"), "memory_bandwidth_gbps"),
    (lambda h: h["skipped"].append({"phase": "p2p", "why": "4 s left"}), "p2p"),
    (lambda h: h.update(allreduce={"backend": "nccl", "world_size": 8, "error": "not done within 60 s"}),
     "allreduce_busbw_gbps"),
    (lambda h: h.update(kernel_log={"source": None, "error": "dmesg: Operation not permitted", "xids": []}),
     "kernel_log"),
    (lambda h: h["gpus"][0].pop("health"), "health_under_load"),
    (lambda h: h["errors"].append("torch sees 7 GPUs, nvidia-smi 8"), "measurement"),
])
def test_what_was_not_measured_fails(change, check):
    host = rtx_host()
    change(host)
    assert check in [f["check"] for f in acceptance_verdict(host, FLOORS)]


def test_a_gpu_of_no_profile_fails():
    host = rtx_host()
    host["gpus"][0]["name"] = "NVIDIA L40S"
    [failure] = acceptance_verdict(host, FLOORS)
    assert (failure["check"], failure["value"]) == ("profile", "NVIDIA L40S")


def test_inventory_overrides_replace_one_floor_and_keep_the_rest():
    floors = acceptance_floors({"RTX PRO 6000 Blackwell Server Edition": {"gemm_bf16_tflops": 400}})
    assert floors["RTX PRO 6000 Blackwell Server Edition"]["memory_bandwidth_gbps"] == 1344.0
    assert [f["check"] for f in acceptance_verdict(rtx_host(), floors)] == ["gemm_bf16_tflops"] * 8
    assert FLOORS["RTX PRO 6000 Blackwell Server Edition"]["gemm_bf16_tflops"] == 302.3


# --- The H200 capture, replayed ------------------------------------------------------------------

def test_the_h200_capture_passes_at_the_h200_floors():
    result = h200()
    assert result["gpus"][0]["name"] == "NVIDIA H200" and result["kernel_log"]["source"] == "dmesg"
    assert acceptance_verdict(result, FLOORS) == []
    assert acceptance_warnings(result) == []


@pytest.mark.parametrize("key", ["gemm_bf16_tflops", "memory_bandwidth_gbps", "h2d_gbps", "d2h_gbps"])
def test_the_h200_capture_fails_when_one_rate_is_below_its_floor(key):
    result = h200()
    floor = FLOORS["H200"][key]
    result["gpus"][0][key] = round(floor * 0.97, 1)
    assert [(f["check"], f["value"], f["floor"]) for f in acceptance_verdict(result, FLOORS)] == \
        [(key, round(floor * 0.97, 1), floor)]


def test_the_h200_floors_are_the_capture_times_the_stated_margin():
    gpu = h200()["gpus"][0]
    for key in ("gemm_bf16_tflops", "memory_bandwidth_gbps", "h2d_gbps", "d2h_gbps"):
        assert FLOORS["H200"][key] == round(0.8 * gpu[key], 1)


def test_the_h200_health_was_read_under_load():
    result = h200()
    health = result["gpus"][0]["health"]
    assert result["health_read_under_load"] is True
    assert health["power_draw_w"] > 500 and (health["pcie_gen_current"], health["pcie_width_current"]) == (5, 16)
    degraded = copy.deepcopy(result)
    degraded["gpus"][0]["health"]["pcie_gen_current"] = 3
    assert [f["check"] for f in acceptance_verdict(degraded, FLOORS)] == ["pcie_gen"]


def test_every_health_field_is_one_driver_580_knows():
    listed = (CAPTURE / "nvidia-smi-help-query-gpu.txt").read_text()
    for _key, names in measure.HEALTH_FIELDS:
        assert '"%s"' % names[0] in listed, names[0]


# --- The fingerprint -----------------------------------------------------------------------------

def test_fingerprint_is_stable_and_changes_with_each_input():
    base = acceptance_fingerprint(["GPU-b", "GPU-a"], "580.159.04", "13.0", "0.5.9-9559f4d77ef0")
    assert base == acceptance_fingerprint(["GPU-a", "GPU-b"], "580.159.04", "13.0", "0.5.9-9559f4d77ef0")
    others = {acceptance_fingerprint(["GPU-a", "GPU-c"], "580.159.04", "13.0", "0.5.9-9559f4d77ef0"),
              acceptance_fingerprint(["GPU-a", "GPU-b"], "580.95.05", "13.0", "0.5.9-9559f4d77ef0"),
              acceptance_fingerprint(["GPU-a", "GPU-b"], "580.159.04", "12.9", "0.5.9-9559f4d77ef0"),
              acceptance_fingerprint(["GPU-a", "GPU-b"], "580.159.04", "13.0", "0.5.10-aaaaaaaaaaaa")}
    assert base not in others and len(others) == 4 and len(base) == 16
    assert set(FilterModule().filters()) == {"acceptance_verdict", "acceptance_warnings", "acceptance_floors",
                                             "acceptance_fingerprint", "acceptance_gpu_rows", "acceptance_report"}


# --- The measurement's pure parts ------------------------------------------------------------------

@pytest.mark.parametrize("ranks,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_is_algbw_times_2_n_minus_1_over_n(ranks, factor):
    algbw, bus = measure.busbw(1 << 30, 0.05, ranks)
    assert algbw == pytest.approx((1 << 30) / 0.05 / 1e9)
    assert bus == pytest.approx(algbw * factor)


def test_busbw_refuses_a_time_that_is_no_time():
    with pytest.raises(ValueError):
        measure.busbw(1 << 20, 0.0, 8)


def test_sizes_run_from_1_mib_to_1_gib():
    sizes = measure.allreduce_sizes()
    assert (sizes[0], sizes[-1], len(sizes)) == (1 << 20, 1 << 30, 11)


def test_nvidia_smi_csv_cells_parse_as_a_driver_writes_them():
    keys = ["index", "name", "pcie_width_current", "retired_pages_pending", "throttle_reasons_active", "power_draw_w",
            "remapped_rows_pending"]
    rows = measure.parse_query_csv("0, NVIDIA H200, 16, [N/A], 0x0000000000000004, 691.30, No\n"
                                   "1, NVIDIA H200, 8, [Not Supported], 0x0000000000000048, 120.05, Yes\n", keys)
    assert rows[0] == {"index": 0, "name": "NVIDIA H200", "pcie_width_current": 16, "retired_pages_pending": None,
                       "throttle_reasons_active": 4, "power_draw_w": 691.3, "remapped_rows_pending": "No"}
    assert rows[1]["throttle_reasons_active"] == 0x48 and rows[1]["retired_pages_pending"] is None
    with pytest.raises(ValueError, match="2 values where 7"):
        measure.parse_query_csv("0, NVIDIA H200\n", keys)


def test_xid_lines_parse_from_dmesg_and_kmsg_and_map_to_nvidia_smi_bus_ids():
    dmesg = measure.parse_xids((OWN / "kernel-log-xid79.txt").read_text().splitlines())
    assert [(e["pci"], e["xid"]) for e in dmesg] == [("0000:5e:00", 79), ("0000:3b:00", 13)]
    kmsg = measure.parse_xids((OWN / "kmsg-xid63.txt").read_text().splitlines())
    assert [(e["pci"], e["xid"]) for e in kmsg] == [("0000:3b:00", 63)]
    assert measure.kernel_pci("00000000:5E:00.0") == "0000:5e:00"


def test_the_health_read_falls_back_to_a_fields_older_name_and_names_what_it_left_out(monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", str(OWN / "two-gpus.json"))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_UNKNOWN", "clocks_throttle_reasons.active,power.draw")
    rows, unavailable = measure.query_health(str(OWN / "fake_nvidia_smi.py"))
    assert unavailable == ["power.draw"]
    assert [(r["pcie_width_current"], r["throttle_reasons_active"]) for r in rows] == [(16, 4), (8, 4)]
    assert "power_draw_w" not in rows[0]


# --- The all-reduce orchestration, gloo on the CPU -------------------------------------------------

@pytest.mark.parametrize("ranks", [2, 4])
def test_the_allreduce_runs_one_process_per_rank_and_sums_right(ranks, tmp_path):
    """The script itself, as the stage runs it (its __main__ guard keeps spawned ranks from measuring
    again), with gloo on the CPU and small sizes; the GPUs' XIDs are the kernel log's."""
    pytest.importorskip("torch")
    env = dict(os.environ, FAKE_NVIDIA_SMI_GPUS=str(OWN / "two-gpus.json"))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--nvidia-smi", str(OWN / "fake_nvidia_smi.py"),
         "--kernel-log", str(OWN / "kernel-log-xid79.txt"), "--only", "allreduce", "--backend", "gloo",
         "--world-size", str(ranks), "--allreduce-min-bytes", "4096", "--allreduce-max-bytes", "65536",
         "--budget-seconds", "60"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=90)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    allreduce = result["allreduce"]
    assert (allreduce["backend"], allreduce["world_size"], allreduce["correct"]) == ("gloo", ranks, True)
    assert [row["bytes"] for row in allreduce["sizes"]] == [4096, 8192, 16384, 32768, 65536]
    for row in allreduce["sizes"]:
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (ranks - 1) / ranks, rel=1e-3)
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9, rel=1e-3)
    assert "all-reduce across %d ranks (gloo)" % ranks in done.stderr
    assert [gpu["xids"] for gpu in result["gpus"]] == [[13], [79]]
    assert time.monotonic() - started < 60


def test_an_xid_fails_the_gpu_even_when_its_health_could_not_be_read_under_load():
    host = rtx_host()
    host["gpus"][5]["xids"] = [79]
    del host["gpus"][5]["health"]
    assert [(f["check"], f["value"]) for f in acceptance_verdict(host, FLOORS)] == [("xid", 79), ("health_under_load", None)]


# --- The lab's stand-in for the GPU part ----------------------------------------------------------------

def lab_node(tmp_path, fault, merged=False):
    """A lab node as files/lab/provision.yml leaves it (8 RTX PRO 6000, GPU 0 at `fault`): its nvidia-smi,
    kernel log, the acceptance fixture's rates, and the fixture under the name the node's python finds."""
    gpus = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0",
             "memory_mib": 97887, "uuid": "GPU-lab-%d" % i, "pci_bus_id": "00000000:%02X:00.0" % (i + 1),
             "sensors": {"pcie.link.width.current": 8} if i == 0 and fault == "pcie-x8" else {}} for i in range(8)]
    (tmp_path / "gpus.json").write_text(json.dumps({"state": "ok", "driver_version": "580.95.05",
                                                    "cuda_version": "13.0", "gpus": gpus}))
    rates = {"gemm_bf16_tflops": 395.0, "memory_bandwidth_gbps": 1540.0, "h2d_gbps": 53.0, "d2h_gbps": 52.5}
    first = dict(rates, gemm_bf16_tflops=180.0) if fault == "slow-gemm" else rates
    (tmp_path / "acceptance.json").write_text(json.dumps({"cuda": "13.0", "p2p_gbps": 41.0, "busbw_gbps": 38.0,
                                                          "gpus": [first] + [rates] * 7}))
    (tmp_path / "kernel.log").write_text("[ 4242.424242] NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen "
                                         "off the bus.\n" if fault == "xid79" else "")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, ROOT / "files/lab/nvidia-smi.py"))
    smi.chmod(0o755)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sglang_fleet_lab_acceptance.py").write_text((ROOT / "files/lab/sglang_lab_acceptance.py").read_text())
    env = dict(os.environ, LAB_GPU_CONFIG=str(tmp_path / "gpus.json"), PYTHONPATH=str(site),
               LAB_ACCEPTANCE_CONFIG=str(tmp_path / "acceptance.json"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--nvidia-smi", str(smi), "--devices",
                           "sglang_fleet_lab_acceptance", "--kernel-log", str(tmp_path / "kernel.log"),
                           "--gemm-seconds", "0.6", "--budget-seconds", "120"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    if merged:
        return done.stdout
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("fault, check, message", [
    ("healthy", None, None),
    ("pcie-x8", "pcie_width", "GPU 0 (GPU-lab-0): pcie_width: PCIe link under load x8, below its max x16 (floor: 16)"),
    ("xid79", "xid", "GPU 0 (GPU-lab-0): xid: XID 79 since boot"),
    ("slow-gemm", "gemm_bf16_tflops", "GPU 0 (GPU-lab-0): gemm_bf16_tflops: 180.0"),
])
def test_the_lab_node_is_measured_by_the_real_script_and_its_fault_judged_on_gpu_0(tmp_path, fault, check, message):
    """The lab's path (bin/lab, the default scenario): the script's own health read through the lab's
    nvidia-smi, under the fixture's load, its kernel-log parsing, every phase in its budget."""
    result, progress = lab_node(tmp_path, fault)
    assert result["torch"] == "lab (simulated)" and result["errors"] == [] and result["skipped"] == []
    assert len(result["gpus"]) == 8 and result["health_read_under_load"] is True
    assert result["allreduce"]["world_size"] == 8 and len(result["p2p_gbps"]) == 8
    assert "bf16 GEMM 8192^3 on 8 GPUs" in progress
    failures = acceptance_verdict(result, FLOORS)
    if check is None:
        assert failures == [] and acceptance_warnings(result, FLOORS) == []
    else:
        assert [(f["gpu"], f["check"]) for f in failures] == [("GPU 0 (GPU-lab-0)", check)]
        assert failures[0]["message"].startswith(message), failures[0]["message"]


def test_the_document_is_the_last_line_when_progress_shares_its_stream(tmp_path):
    """Over SSH the script module runs the script on a tty, which merges stderr into stdout (the lab's
    SSH nodes showed it: the whole stdout did not parse): the role reads the last line."""
    lines = lab_node(tmp_path, "healthy", merged=True).splitlines()
    assert lines[0].startswith("gpu_acceptance: kernel log:")
    document = json.loads(lines[-1])
    assert len(document["gpus"]) == 8 and acceptance_verdict(document, FLOORS) == []
