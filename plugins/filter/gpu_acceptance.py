# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance verdict: a host's measurement (roles/gpu_acceptance/files/gpu_acceptance.py) against
the floors of its GPUs' profile. A host with any failure is held out of service."""
from __future__ import annotations

import copy
import hashlib
import json
import re

DOCUMENTATION = r"""
name: acceptance_verdict
short_description: List where a GPU host's acceptance measurement falls below its floors
description:
  - Takes the measurement's JSON document and the floors table (profile name pattern -> floors);
    returns one failure per check below its floor, each naming the GPU, the check, the value and
    the floor. An empty list means the host is accepted.
  - Companion filters, C(acceptance_warnings) (what is worth saying but does not hold a host out),
    C(acceptance_floors) (the default table, merged with an inventory's overrides) and
    C(acceptance_fingerprint) (the key of the cached record).
positional: result, floors
options:
  result:
    description: The measurement, as gpu_acceptance.py prints it.
    type: dict
    required: true
  floors:
    description: The floors table, as C(acceptance_floors) returns it.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: A host below a floor is held out
  ansible.builtin.fail:
    msg: "{{ measured | acceptance_verdict(floors) | map(attribute='message') | join('; ') }}"
  when: measured | acceptance_verdict(floors) | length > 0
"""

RETURN = r"""
_value:
  description: One failure per check below its floor (gpu, check, value, floor, message); empty when accepted.
  type: list
  elements: dict
"""

# XIDs that keep a host out until it is serviced or reset, from NVIDIA's Xid catalog ("Analyzing Xid
# Errors with the Xid Catalog", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: the
# codes whose resolution is a GPU reset, node reboot or RMA, not an application restart). XIDs an
# application causes (13, 31, 43, 45: its own fault, its own channel) are warnings.
FATAL_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded (reset pending)",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

# nvml.h's clock event (throttle) reason bits. Hardware slowdown, thermal or power-brake, means the
# board itself slows the GPU (overheating, a power supply asserting its brake): a failure. The
# software power cap is what a full GEMM meets on a healthy card; software thermal slowdown is said.
HW_SLOWDOWN = {0x8: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
SW_THERMAL_SLOWDOWN = 0x20

# PCIe Gen5 x16, per direction: 32 GT/s x 16 lanes x 128/130 encoding / 8 bits = 63.0 GB/s.
PCIE_GEN5_X16_GBPS = 63.0

# The floors, per GPU profile, keyed by a regular expression searched in nvidia-smi's name. The first
# profile whose pattern matches a GPU's name judges it. Rates are decimal GB/s and TFLOP/s.
#
# RTX PRO 6000 Blackwell Server Edition: from NVIDIA's published figures, times a margin.
#  - bf16 dense tensor: 503.8 TFLOP/s (NVIDIA lists 4000 AI TOPS, FP4 with sparsity; dense bf16 is a
#    quarter of dense FP4, half of sparse: the spec tables (hmc-tech.com, "RTX PRO 6000 Blackwell")
#    give 503.8 TFLOP/s bf16 dense with FP32 accumulate). Floor 0.6 x 503.8: cuBLAS at 8192^3 reaches
#    70-80 % of a datasheet's dense peak on a healthy card at its power limit (the H200 here: 67 %),
#    so 0.6 holds a card whose clocks sag or whose power is capped low and passes a healthy one.
#  - memory: 1792 GB/s (GDDR7, 512-bit at 28 Gbps, NVIDIA's launch figures). Floor 0.75 x 1792: a
#    device copy reaches 85-90 % of the pin rate (the H200 here: 88 % of 4.8 TB/s).
#  - host link: PCIe Gen5 x16 (NVIDIA's datasheet), 63.0 GB/s per direction raw. Floor 0.6 x 63.0:
#    pinned copies reach about 88 % (the H200 here, Gen5 x16: 55.2 GB/s), a Gen4 x16 or Gen5 x8
#    link (31.5 GB/s raw) fails.
#  - P2P and all-reduce: no published figure (PCIe, through the host's switches or root complex);
#    floors of 0.4 and 0.3 of the link's raw rate, below what a Gen5 x16 P2P path carries, above
#    what a path through a Gen4 or x8 link carries. Set them from the first host's measurement.
# NVIDIA H200: measured on the device host (tests/fixtures/hosts/h200-driver580/acceptance/), times
# 0.8: run-to-run spread of GEMM (clocks) is a few percent; a card at 80 % of a healthy one's rate
# has a fault worth holding it for. Specification for comparison: 989 TFLOP/s bf16 dense, 4.8 TB/s.
MEASURED_MARGIN = 0.8
FLOORS = {
    "RTX PRO 6000 Blackwell Server Edition": {
        "profile": "RTX PRO 6000 Blackwell Server Edition",
        "gemm_bf16_tflops": round(0.6 * 503.8, 1),
        "memory_bandwidth_gbps": round(0.75 * 1792, 1),
        "h2d_gbps": round(0.6 * PCIE_GEN5_X16_GBPS, 1),
        "d2h_gbps": round(0.6 * PCIE_GEN5_X16_GBPS, 1),
        "p2p_gbps": round(0.4 * PCIE_GEN5_X16_GBPS, 1),
        "allreduce_busbw_gbps": round(0.3 * PCIE_GEN5_X16_GBPS, 1),
        "pcie_gen_min": 5,
        "pcie_width_min": 16,
        "temperature_max_c": 85,
    },
    "H200": {
        "profile": "NVIDIA H200",
        "gemm_bf16_tflops": round(MEASURED_MARGIN * 666.3, 1),
        "memory_bandwidth_gbps": round(MEASURED_MARGIN * 4221.5, 1),
        "h2d_gbps": round(MEASURED_MARGIN * 55.2, 1),
        "d2h_gbps": round(MEASURED_MARGIN * 55.3, 1),
        "p2p_gbps": None,                 # one GPU on the device host: nothing measured, no floor
        "allreduce_busbw_gbps": None,
        "pcie_gen_min": 5,
        "pcie_width_min": 16,
        "temperature_max_c": 85,
    },
}

# The per-GPU rates: (result key, check name, unit).
RATES = (
    ("gemm_bf16_tflops", "gemm_bf16_tflops", "TFLOP/s"),
    ("memory_bandwidth_gbps", "memory_bandwidth_gbps", "GB/s"),
    ("h2d_gbps", "h2d_gbps", "GB/s"),
    ("d2h_gbps", "d2h_gbps", "GB/s"),
)


def acceptance_floors(overrides=None, table=None):
    """The floors table (FLOORS unless table), each profile's entries replaced by overrides' (an
    inventory's {pattern: {check: floor}}; a new pattern adds a profile)."""
    merged = copy.deepcopy(FLOORS if table is None else table)
    for pattern, floors in (overrides or {}).items():
        merged.setdefault(pattern, {}).update(floors or {})
    return merged


def profile_floors(name, floors):
    """(pattern, floors) of the first profile whose pattern is found in the GPU's name; (None, None)."""
    for pattern, entry in floors.items():
        if re.search(pattern, name or ""):
            return pattern, entry
    return None, None


def _yes(value):
    return value in (1, True) or str(value).strip().lower() in ("yes", "1", "true")


def _failure(gpu, check, value, floor, what):
    return {"gpu": gpu, "check": check, "value": value, "floor": floor,
            "message": "%s: %s: %s (floor: %s)" % (gpu, check, what if what is not None else value, floor)}


def _gpu_label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("uuid") or gpu.get("pci_bus_id") or "?")


def _kernel_pci(bus_id):
    match = re.search(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?$", bus_id or "")
    return ("%s:%s:%s" % match.groups()).lower() if match else (bus_id or "").lower()


def _health_failures(label, gpu, floors):
    # The kernel log's XIDs hold whether or not nvidia-smi could be read under load.
    found = [_failure(label, "xid", xid, "no fatal XID since boot", "XID %d since boot, %s" % (xid, FATAL_XIDS[xid]))
             for xid in sorted(set(gpu.get("xids") or [])) if xid in FATAL_XIDS]
    health = gpu.get("health")
    if not health:
        return found + [_failure(label, "health_under_load", None, "read while the GEMM runs", "not read")]
    volatile = health.get("ecc_uncorrected_volatile")
    if isinstance(volatile, int) and volatile > 0:
        found.append(_failure(label, "ecc_uncorrected_volatile", volatile, 0,
                              "%d uncorrected ECC errors since the driver loaded" % volatile))
    for key, what in (("retired_pages_pending", "a retired page waits for a reset"),
                      ("remapped_rows_pending", "a remapped row waits for a reset"),
                      ("remapped_rows_failure", "a row remapping failed")):
        if _yes(health.get(key)):
            found.append(_failure(label, key, health.get(key), "No", what))

    for part, unit in (("gen", "Gen"), ("width", "x")):
        current, maximum = health.get("pcie_%s_current" % part), health.get("pcie_%s_max" % part)
        wanted = floors.get("pcie_%s_min" % part)
        if not isinstance(current, int) or not isinstance(maximum, int):
            found.append(_failure(label, "pcie_%s" % part, current, "readable", "PCIe link %s not read" % part))
            continue
        if current < maximum:
            found.append(_failure(label, "pcie_%s" % part, current, maximum,
                                  "PCIe link under load %s%d, below its max %s%d" % (unit, current, unit, maximum)))
        if wanted and maximum < wanted:
            found.append(_failure(label, "pcie_%s_max" % part, maximum, wanted,
                                  "PCIe link max %s%d, the profile wants %s%d" % (unit, maximum, unit, wanted)))

    reasons = health.get("throttle_reasons_active")
    if isinstance(reasons, int):
        for bit, name in HW_SLOWDOWN.items():
            if reasons & bit:
                found.append(_failure(label, "throttle", name, "no hardware slowdown",
                                      "clocks slowed by %s (reasons 0x%x)" % (name, reasons)))
    ceiling = floors.get("temperature_max_c")
    temperature = health.get("temperature_c")
    if ceiling is not None and isinstance(temperature, (int, float)) and temperature > ceiling:
        found.append(_failure(label, "temperature_c", temperature, ceiling,
                              "%s C under load, above %s C" % (temperature, ceiling)))
    return found


def acceptance_verdict(result, floors):
    """Every failure of the measurement against the floors: [{gpu, check, value, floor, message}]."""
    failures = []
    for error in result.get("errors") or []:
        failures.append(_failure("host", "measurement", error, "no error", error))
    gpus = result.get("gpus") or []
    if not gpus:
        failures.append(_failure("host", "gpus", 0, "at least one GPU", "no GPU measured"))
    kernel_log = result.get("kernel_log") or {}
    if not kernel_log.get("source"):
        failures.append(_failure("host", "kernel_log", None, "readable (XIDs since boot)",
                                 "kernel log not read: %s" % kernel_log.get("error", "no source")))
    # An XID on a device no GPU of the list has: a GPU that fell off the bus may be gone from nvidia-smi.
    known = {_kernel_pci(gpu.get("pci_bus_id")) for gpu in gpus}
    for event in kernel_log.get("xids") or []:
        if event.get("pci") not in known and event.get("xid") in FATAL_XIDS:
            failures.append(_failure("PCI %s" % event["pci"], "xid", event["xid"], "no fatal XID since boot",
                                     "XID %d on a device nvidia-smi no longer lists, %s"
                                     % (event["xid"], FATAL_XIDS[event["xid"]])))
    for skipped in result.get("skipped") or []:
        if skipped.get("phase") != "allreduce" or len(gpus) > 1:
            failures.append(_failure("host", skipped["phase"], None, "measured",
                                     "%s not measured: %s" % (skipped["phase"], skipped.get("why"))))

    host_floors = None
    for gpu in gpus:
        label = _gpu_label(gpu)
        pattern, gpu_floors = profile_floors(gpu.get("name"), floors)
        if gpu_floors is None:
            failures.append(_failure(label, "profile", gpu.get("name"), "a floors profile",
                                     "no floors for %s" % gpu.get("name")))
            continue
        host_floors = host_floors or gpu_floors
        failures.extend(_health_failures(label, gpu, gpu_floors))
        for key, check, unit in RATES:
            floor = gpu_floors.get(key)
            if floor is None:
                continue
            value = gpu.get(key)
            if not isinstance(value, (int, float)):
                why = (gpu.get("gemm_bf16") or {}).get("error") if key == "gemm_bf16_tflops" else None
                failures.append(_failure(label, check, None, floor, "not measured" + (": " + why if why else "")))
            elif value < floor:
                failures.append(_failure(label, check, value, floor, "%s %s" % (value, unit)))

    if host_floors and len(gpus) > 1:
        failures.extend(_interconnect_failures(result, gpus, host_floors))
    return failures


def _interconnect_failures(result, gpus, floors):
    found = []
    p2p_floor = floors.get("p2p_gbps")
    matrix = result.get("p2p_gbps")
    if p2p_floor is not None and matrix:
        for src, row in enumerate(matrix):
            for dst, value in enumerate(row):
                if src != dst and value is not None and value < p2p_floor:
                    found.append(_failure("GPU %d -> GPU %d" % (src, dst), "p2p_gbps", value, p2p_floor,
                                          "%s GB/s peer to peer" % value))
    bus_floor = floors.get("allreduce_busbw_gbps")
    if bus_floor is not None:
        allreduce = result.get("allreduce") or {}
        value = allreduce.get("peak_busbw_gbps")
        if allreduce.get("error") or not isinstance(value, (int, float)):
            found.append(_failure("host", "allreduce_busbw_gbps", None, bus_floor,
                                  "not measured: %s" % (allreduce.get("error") or "no all-reduce result")))
        elif allreduce.get("correct") is False:
            found.append(_failure("host", "allreduce_correct", False, True, "the all-reduce summed wrong"))
        elif value < bus_floor:
            found.append(_failure("host", "allreduce_busbw_gbps", value, bus_floor,
                                  "%s GB/s bus bandwidth across %s GPUs" % (value, allreduce.get("world_size"))))
    return found


def acceptance_warnings(result, floors=None):
    """What the report says that does not hold a host out."""
    warnings = []
    for gpu in result.get("gpus") or []:
        label = _gpu_label(gpu)
        health = gpu.get("health") or gpu.get("health_idle") or {}
        # Persistence mode off is not a fault of the GPU: without it the driver tears the GPU's state
        # down when its last client exits and the next start pays the initialisation again (seconds per
        # GPU); the server's gpu-init unit turns it on before the server starts. It does not make a GPU
        # slower while it serves, so it is said, not held against the host.
        if str(health.get("persistence_mode", "")).lower() == "disabled":
            warnings.append("%s: persistence mode is off (the server's gpu-init unit sets it)" % label)
        reasons = health.get("throttle_reasons_active")
        if isinstance(reasons, int) and reasons & SW_THERMAL_SLOWDOWN:
            warnings.append("%s: software thermal slowdown under load (reasons 0x%x)" % (label, reasons))
        aggregate = health.get("ecc_uncorrected_aggregate")
        if isinstance(aggregate, int) and aggregate > 0:
            warnings.append("%s: %d uncorrected ECC errors over its life (none pending remap)" % (label, aggregate))
        for xid in sorted(set(gpu.get("xids") or [])):
            if xid not in FATAL_XIDS:
                warnings.append("%s: XID %d since boot (an application's fault, not the GPU's)" % (label, xid))
    return warnings


def acceptance_fingerprint(gpu_uuids, driver, cuda, install_id):
    """The key of a host's acceptance record: the same GPUs, driver, CUDA and install measure the same.
    A changed GPU, driver, CUDA release or install runs the measurement again."""
    uuids = sorted(str(uuid).strip() for uuid in (gpu_uuids or []) if str(uuid).strip())
    key = json.dumps({"gpus": uuids, "driver": str(driver or ""), "cuda": str(cuda or ""),
                      "install": str(install_id or "")}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]



def acceptance_gpu_rows(measured, failures=()):
    """One row per GPU for the reports: its rates, its link and temperature under load, its XIDs, and
    the checks it failed (the verdict's failures that name it)."""
    rows = []
    for gpu in (measured or {}).get("gpus") or []:
        health = gpu.get("health") or {}
        label = _gpu_label(gpu)
        link = None
        if isinstance(health.get("pcie_gen_current"), int) and isinstance(health.get("pcie_width_current"), int):
            link = "Gen%s x%s (max Gen%s x%s)" % (health["pcie_gen_current"], health["pcie_width_current"],
                                                  health.get("pcie_gen_max", "?"), health.get("pcie_width_max", "?"))
        rows.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "name": gpu.get("name"),
                     **{key: gpu.get(key) if isinstance(gpu.get(key), (int, float)) else None
                        for key, _check, _unit in RATES},
                     "pcie_link": link, "temperature_c": health.get("temperature_c"),
                     "xids": sorted(set(gpu.get("xids") or [])),
                     "failed": sorted({f["check"] for f in failures or () if f.get("gpu") == label})})
    return rows


def acceptance_report(hostnames, hostvars):
    """The acceptance part of the reports, per GPU host that has a verdict in this run (the stage's or its
    record's): {host: {passed, fingerprint, gpus: rows, failures: messages}}. A host held out is in it."""
    report = {}
    for name in hostnames:
        facts = hostvars[name] if name in hostvars else {}
        measured = facts.get("gpu_acceptance_measured")
        if not measured:
            continue
        failures = list(facts.get("gpu_acceptance_failures") or [])
        report[name] = {"passed": not failures, "fingerprint": facts.get("gpu_acceptance_fingerprint") or "",
                        "gpus": acceptance_gpu_rows(measured, failures),
                        "failures": [f["message"] for f in failures]}
    return report

class FilterModule:
    def filters(self):
        return {"acceptance_verdict": acceptance_verdict, "acceptance_warnings": acceptance_warnings,
                "acceptance_floors": acceptance_floors, "acceptance_fingerprint": acceptance_fingerprint,
                "acceptance_gpu_rows": acceptance_gpu_rows, "acceptance_report": acceptance_report}
