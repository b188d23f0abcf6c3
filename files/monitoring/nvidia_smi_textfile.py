#!/usr/bin/env python3
"""GPU metrics for node_exporter's textfile collector, from nvidia-smi and the kernel log.

    nvidia_smi_textfile.py [--output FILE] [--nvidia-smi PATH] [--expect-gpus N]
                           [--kernel-log auto|journalctl|dmesg|none] [--state FILE]
    nvidia_smi_textfile.py --print-query

Runs `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits` once and writes one gauge or
counter per field and GPU, labelled gpu (index), uuid and name: utilisation, memory, temperatures,
power draw and limit, clocks, the performance state, clock event (throttle) reasons as nvidia-smi's
bitmask and one series per reason, ECC error counts and remapped rows. A field a GPU does not
report ("[N/A]", "[Not Supported]", ...) is left out, not written as 0. A driver that knows only the
older clocks_throttle_reasons.* names gets those instead.

XID errors come from the kernel log (`journalctl -k -b 0`, else `dmesg`): each
"NVRM: Xid (PCI:0000:3b:00): 79, ..." line is counted once, per PCI device and XID, in
nvidia_smi_xid_errors_total. With --state the counts survive the ring buffer wrapping and the
collector's restarts (each run reads only lines newer than the last it counted in this boot).

The file is written as FILE.tmp and renamed over FILE, so node_exporter never reads half of it.
Python 3 standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

# (query field, metric, type, help, converter) in the order of the query. Metric None: a label.
# The order is the capture's: tests/fixtures/nvidia-smi/h200-monitoring-*.csv.
MIB = 1024 * 1024
MHZ = 1000 * 1000
FIELDS = [
    ("index", None, None, None, None),
    ("uuid", None, None, None, None),
    ("name", None, None, None, None),
    ("pci.bus_id", None, None, None, None),
    ("utilization.gpu", "nvidia_smi_utilization_gpu_ratio", "gauge",
     "Fraction of the last sample period during which a kernel ran on the GPU.", "percent"),
    ("utilization.memory", "nvidia_smi_utilization_memory_ratio", "gauge",
     "Fraction of the last sample period during which device memory was read or written.", "percent"),
    ("memory.used", "nvidia_smi_memory_used_bytes", "gauge", "Device memory in use.", "mib"),
    ("memory.total", "nvidia_smi_memory_total_bytes", "gauge", "Device memory in all.", "mib"),
    ("temperature.gpu", "nvidia_smi_temperature_gpu_celsius", "gauge", "GPU core temperature.", "number"),
    ("temperature.memory", "nvidia_smi_temperature_memory_celsius", "gauge", "HBM temperature.", "number"),
    ("power.draw", "nvidia_smi_power_draw_watts", "gauge", "Power drawn by the board.", "number"),
    ("power.limit", "nvidia_smi_power_limit_watts", "gauge", "Software power limit.", "number"),
    ("clocks.sm", "nvidia_smi_clock_sm_hertz", "gauge", "SM clock.", "mhz"),
    ("clocks.mem", "nvidia_smi_clock_memory_hertz", "gauge", "Memory clock.", "mhz"),
    ("clocks.max.sm", "nvidia_smi_clock_max_sm_hertz", "gauge", "Highest SM clock.", "mhz"),
    ("clocks.max.mem", "nvidia_smi_clock_max_memory_hertz", "gauge", "Highest memory clock.", "mhz"),
    ("pstate", "nvidia_smi_pstate", "gauge", "Performance state (0 is P0, the fastest).", "pstate"),
    ("fan.speed", "nvidia_smi_fan_speed_ratio", "gauge", "Intended fan speed, of the maximum.", "percent"),
    ("clocks_event_reasons.active", "nvidia_smi_clocks_event_reasons_active", "gauge",
     "Bitmask of the active clock event (throttle) reasons, as nvml.h defines them (0x1 idle).", "hex"),
    ("clocks_event_reasons.gpu_idle", "gpu_idle", None, None, "active"),
    ("clocks_event_reasons.applications_clocks_setting", "applications_clocks_setting", None, None, "active"),
    ("clocks_event_reasons.sw_power_cap", "sw_power_cap", None, None, "active"),
    ("clocks_event_reasons.hw_slowdown", "hw_slowdown", None, None, "active"),
    ("clocks_event_reasons.hw_thermal_slowdown", "hw_thermal_slowdown", None, None, "active"),
    ("clocks_event_reasons.hw_power_brake_slowdown", "hw_power_brake_slowdown", None, None, "active"),
    ("clocks_event_reasons.sw_thermal_slowdown", "sw_thermal_slowdown", None, None, "active"),
    ("clocks_event_reasons.sync_boost", "sync_boost", None, None, "active"),
    ("ecc.mode.current", "nvidia_smi_ecc_mode_enabled", "gauge", "1 when ECC is enabled.", "enabled"),
    ("ecc.errors.corrected.volatile.total", ("corrected", "volatile"), None, None, "number"),
    ("ecc.errors.uncorrected.volatile.total", ("uncorrected", "volatile"), None, None, "number"),
    ("ecc.errors.corrected.aggregate.total", ("corrected", "aggregate"), None, None, "number"),
    ("ecc.errors.uncorrected.aggregate.total", ("uncorrected", "aggregate"), None, None, "number"),
    ("retired_pages.pending", "nvidia_smi_retired_pages_pending", "gauge",
     "1 when pages wait to be retired at the next reset.", "yes"),
    ("remapped_rows.correctable", ("correctable",), None, None, "number"),
    ("remapped_rows.uncorrectable", ("uncorrectable",), None, None, "number"),
    ("remapped_rows.pending", "nvidia_smi_remapped_rows_pending", "gauge",
     "1 when a row remapping waits for the next reset.", "yes"),
    ("remapped_rows.failure", "nvidia_smi_remapped_rows_failure", "gauge",
     "1 when a row remapping has failed (the GPU needs service).", "yes"),
]
REASON, ECC, REMAP = "clocks_event_reasons.", "ecc.errors.", "remapped_rows."
FAMILIES = {
    "reason": ("nvidia_smi_clocks_event_reason_active", "gauge",
               "1 while this clock event (throttle) reason is active."),
    "ecc": ("nvidia_smi_ecc_errors_total", "counter",
            "ECC errors: volatile since the driver loaded, aggregate over the GPU's life."),
    "remap": ("nvidia_smi_remapped_rows_total", "counter", "Memory rows remapped after ECC errors."),
}
# Drivers before the rename (R535) know only the older names; nvidia-smi 580 takes both.
OLD_NAME = ("clocks_event_reasons.", "clocks_throttle_reasons.")
# What nvidia-smi prints for a value a GPU does not have or cannot read.
MISSING = re.compile(r"^\[.*\]$|^N/A$|^Not Supported$", re.IGNORECASE)
XID = re.compile(r"^\[\s*(?P<ts>\d+\.\d+)\].*NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                 r"(?:\.[0-9a-fA-F])?\): (?P<xid>\d+),")
KERNEL_LOGS = {
    "journalctl": ["journalctl", "-k", "-b", "0", "-o", "short-monotonic", "--no-pager", "-q"],
    "dmesg": ["dmesg"],
}


def query_fields(old_names=False):
    names = [field[0] for field in FIELDS]
    if old_names:
        names = [name.replace(*OLD_NAME) for name in names]
    return names


def convert(kind, text):
    """The number a field's text stands for, or None for a value the GPU does not report."""
    text = text.strip()
    if not text or MISSING.match(text):
        return None
    if kind == "hex":
        return int(text, 16)
    if kind == "active":
        return {"active": 1, "not active": 0}.get(text.lower())
    if kind == "enabled":
        return {"enabled": 1, "disabled": 0}.get(text.lower())
    if kind == "yes":
        return {"yes": 1, "no": 0}.get(text.lower())
    if kind == "pstate":
        return int(text[1:]) if re.match(r"^P\d+$", text) else None
    try:
        value = float(text)
    except ValueError:
        return None
    if kind == "percent":
        return value / 100.0
    if kind == "mib":
        return value * MIB
    if kind == "mhz":
        return value * MHZ
    return value


def parse_query(text):
    """One dict per GPU: labels (gpu, uuid, name), pci_bus_id, and (metric key, value) samples."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(FIELDS) or not cells[0].isdigit():
            continue  # an error line, or a GPU whose row nvidia-smi could not complete
        gpu = {"labels": {"gpu": cells[0], "uuid": cells[1], "name": cells[2]}, "pci_bus_id": cells[3],
               "samples": []}
        for (field, metric, _type, _help, kind), cell in zip(FIELDS, cells):
            if metric is None:
                continue
            value = convert(kind, cell)
            if value is not None:
                gpu["samples"].append((field, value))
        gpus.append(gpu)
    return gpus


def run_query(nvidia_smi):
    """(rc, stdout, stderr) of the query, with the older reason names when the driver needs them."""
    for old in (False, True):
        argv = [nvidia_smi, "--query-gpu=" + ",".join(query_fields(old)), "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return 127, "", str(error)
        said = done.stdout + done.stderr
        if done.returncode != 0 and "is not a valid field to query" in said and not old:
            continue
        return done.returncode, done.stdout, done.stderr
    return done.returncode, done.stdout, done.stderr


def pci_key(bus_id):
    """(domain, bus, device) of nvidia-smi's 00000000:3B:00.0 or the kernel's 0000:3b:00."""
    parts = bus_id.split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        return tuple(int(part, 16) for part in parts)
    except ValueError:
        return None


def xid_events(lines):
    """(monotonic seconds, PCI address as the kernel writes it, XID) of each Xid line."""
    for line in lines:
        match = XID.match(line.strip())
        if match:
            yield float(match.group("ts")), match.group("pci").lower(), match.group("xid")


def read_kernel_log(source):
    """(the source read, its lines) or (None, []) when no kernel log could be read."""
    for name in (["journalctl", "dmesg"] if source == "auto" else [source]):
        try:
            done = subprocess.run(KERNEL_LOGS[name], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        # A booted host's kernel log is never empty: journalctl's empty answer (exit 0) means no journal
        # holds it (no journald), not a log without XIDs.
        if done.returncode == 0 and (done.stdout.strip() or name != "journalctl"):
            return name, done.stdout.splitlines()
    return None, []


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def count_xids(lines, state):
    """Counts per (pci, xid): the state's, plus the lines newer than the last it counted this boot."""
    counts = dict(state.get("counts", {}))
    this_boot = boot_id()
    last = state.get("last", -1.0) if state.get("boot_id") == this_boot else -1.0
    newest = last
    for stamp, pci, xid in xid_events(lines):
        if stamp <= last:
            continue
        key = pci + "|" + xid
        counts[key] = counts.get(key, 0) + 1
        newest = max(newest, stamp)
    return counts, {"boot_id": this_boot, "last": newest, "counts": counts}


def load_state(path):
    if not path:
        return {}
    try:
        with open(path) as handle:
            state = json.load(handle)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample(metric, labels, value):
    text = ",".join('%s="%s"' % (key, escape(val)) for key, val in labels.items())
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        value = int(value)
    return "%s{%s} %s" % (metric, text, value) if text else "%s %s" % (metric, value)


def render(gpus, rc, expect_gpus=None, xid_counts=None, kernel_log=None, query_seconds=None):
    """The textfile: every family once, with its HELP and TYPE, in a stable order."""
    families = {}

    def declare(metric, kind, help_text):
        return families.setdefault(metric, {"type": kind, "help": help_text, "samples": []})

    def add(metric, kind, help_text, labels, value):
        declare(metric, kind, help_text)["samples"].append(sample(metric, labels, value))

    add("nvidia_smi_up", "gauge", "1 when nvidia-smi answered the query.", {}, 1 if rc == 0 else 0)
    add("nvidia_smi_gpus_visible", "gauge", "GPUs nvidia-smi reported.", {}, len(gpus))
    if expect_gpus is not None:
        add("nvidia_smi_gpus_expected", "gauge", "GPUs this host should have (the inventory's).", {},
            expect_gpus)
    if query_seconds is not None:
        add("nvidia_smi_query_duration_seconds", "gauge", "How long nvidia-smi took to answer.", {},
            round(query_seconds, 3))
    by_field = {field[0]: field for field in FIELDS}
    for gpu in gpus:
        labels = gpu["labels"]
        add("nvidia_smi_gpu_info", "gauge", "One series per GPU: its index, UUID, name and PCI bus id.",
            dict(labels, pci_bus_id=gpu["pci_bus_id"]), 1)
        for field, value in gpu["samples"]:
            _field, metric, kind, help_text, _conv = by_field[field]
            if field.startswith(REASON) and kind is None:
                add(*FAMILIES["reason"], dict(labels, reason=metric), value)
            elif field.startswith(ECC):
                add(*FAMILIES["ecc"], dict(labels, kind=metric[0], scope=metric[1]), value)
            elif field.startswith(REMAP) and isinstance(metric, tuple):
                add(*FAMILIES["remap"], dict(labels, kind=metric[0]), value)
            else:
                add(metric, kind, help_text, labels, value)
    if kernel_log is not None:
        name, readable = kernel_log
        add("nvidia_smi_kernel_log_readable", "gauge",
            "1 when the kernel log (for XID errors) could be read; source: journalctl or dmesg.",
            {"source": name or "none"}, 1 if readable else 0)
    if xid_counts is not None:
        by_pci = {pci_key(gpu["pci_bus_id"]): gpu["labels"] for gpu in gpus}
        declare("nvidia_smi_xid_errors_total", "counter",
                "XID errors the NVIDIA driver logged, per GPU (by PCI address) and XID.")
        for key in sorted(xid_counts):
            pci, xid = key.split("|")
            labels = by_pci.get(pci_key(pci), {"gpu": "", "uuid": "", "name": ""})
            add("nvidia_smi_xid_errors_total", "counter", None, dict(labels, pci_bus_id=pci, xid=xid),
                xid_counts[key])
    lines = []
    for metric, family in families.items():
        lines.append("# HELP %s %s" % (metric, family["help"]))
        lines.append("# TYPE %s %s" % (metric, family["type"]))
        lines.extend(family["samples"])
    return "\n".join(lines) + "\n"


def collect(args):
    started = time.monotonic()
    rc, out, err = run_query(args.nvidia_smi)
    query_seconds = time.monotonic() - started
    gpus = parse_query(out)
    if rc != 0:
        sys.stderr.write("nvidia-smi exited %d: %s\n" % (rc, (err or out).strip()[:500]))
    xid_counts = kernel = None
    if args.kernel_log != "none":
        source, lines = read_kernel_log(args.kernel_log)
        kernel = (source, source is not None)
        state = load_state(args.state)
        xid_counts, new_state = count_xids(lines, state)
        if args.state and source is not None:
            write_atomically(args.state, json.dumps(new_state) + "\n")
    text = render(gpus, rc, args.expect_gpus, xid_counts, kernel, query_seconds)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        write_atomically(args.output, text)
    return 0 if rc == 0 else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="/var/lib/prometheus/node-exporter/nvidia_smi.prom",
                        help="the .prom file node_exporter reads ('-' for stdout)")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--expect-gpus", type=int, help="GPUs this host should have")
    parser.add_argument("--kernel-log", choices=["auto", "journalctl", "dmesg", "none"], default="auto")
    parser.add_argument("--state", help="where XID counts are kept between runs (JSON)")
    parser.add_argument("--print-query", action="store_true", help="print the --query-gpu field list and exit")
    args = parser.parse_args(argv)
    if args.print_query:
        print(",".join(query_fields()))
        return 0
    return collect(args)


if __name__ == "__main__":
    sys.exit(main())
