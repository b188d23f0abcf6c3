#!/usr/bin/python3
"""Lab fixture: an nvidia-smi for containers that pose as GPU nodes.

Emulates the real CLI for what sglang-fleet queries: the default table (its header carries
`Driver Version` and `CUDA Version`), `--query-gpu=FIELDS --format=csv[,noheader][,nounits]` and
`--query-compute-apps=FIELDS` (the same formats), with the real error texts and exit codes.

A lab node's compute processes (there are no GPUs to ask) are its processes that pose as one: the lab
server (`-m sglang_fleet_lab_server`, holding SERVER_MEMORY_FRACTION of every GPU, as sglang's
--mem-fraction-static does) and any process started with LAB_GPU_MEMORY_MIB=N in its environment
(N MiB on each GPU of LAB_GPU_INDEXES, a comma list, or on all): a stray a test leaves behind. The simulated hardware is read from
/etc/lab-gpu/gpus.json (written by files/lab/provision.yml). Never installed on a real host.
"""
import json
import os
import sys
import time

CONFIG = os.environ.get("LAB_GPU_CONFIG", "/etc/lab-gpu/gpus.json")
NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.\n")
FIELDS = {  # query field -> (header with units, value with units, value without units)
    "index": lambda g, c: ("index", str(g["index"]), str(g["index"])),
    "name": lambda g, c: ("name", g["name"], g["name"]),
    "uuid": lambda g, c: ("uuid", g["uuid"], g["uuid"]),
    "pci.bus_id": lambda g, c: ("pci.bus_id", g["pci_bus_id"], g["pci_bus_id"]),
    "compute_cap": lambda g, c: ("compute_cap", g["compute_cap"], g["compute_cap"]),
    "memory.total": lambda g, c: ("memory.total [MiB]", "%d MiB" % g["memory_mib"], str(g["memory_mib"])),
    "driver_version": lambda g, c: ("driver_version", c["driver_version"], c["driver_version"]),
    "count": lambda g, c: ("count", str(len(c["gpus"])), str(len(c["gpus"]))),
}
# The GPU textfile collector's fields (files/monitoring/nvidia_smi_textfile.py): field -> (header, unit,
# the lab's idle value), headers and units as driver 580 prints them (tests/fixtures/nvidia-smi/
# h200-monitoring-*.csv). A GPU's "sensors" in gpus.json override the idle values.
REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
           "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost")
SENSORS = {
    "utilization.gpu": ("utilization.gpu [%]", " %", "0"),
    "utilization.memory": ("utilization.memory [%]", " %", "0"),
    "memory.used": ("memory.used [MiB]", " MiB", "0"),
    "temperature.gpu": ("temperature.gpu", "", "30"),
    "temperature.memory": ("temperature.memory", "", "32"),
    "power.draw": ("power.draw [W]", " W", "60.00"),
    "power.limit": ("power.limit [W]", " W", "600.00"),
    "clocks.sm": ("clocks.current.sm [MHz]", " MHz", "180"),
    "clocks.mem": ("clocks.current.memory [MHz]", " MHz", "405"),
    "clocks.max.sm": ("clocks.max.sm [MHz]", " MHz", "3090"),
    "clocks.max.mem": ("clocks.max.memory [MHz]", " MHz", "14001"),
    "pstate": ("pstate", "", "P8"),
    "fan.speed": ("fan.speed [%]", " %", "[N/A]"),
    "clocks_event_reasons.active": ("clocks_event_reasons.active", "", "0x0000000000000001"),
    **{"clocks_event_reasons." + r: ("clocks_event_reasons." + r, "", "Active" if r == "gpu_idle" else "Not Active")
       for r in REASONS},
    "ecc.mode.current": ("ecc.mode.current", "", "Enabled"),
    **{"ecc.errors.%s.%s.total" % (kind, span): ("ecc.errors.%s.%s.total" % (kind, span), "", "0")
       for kind in ("corrected", "uncorrected") for span in ("volatile", "aggregate")},
    "retired_pages.pending": ("retired_pages.pending", "", "[N/A]"),
    "remapped_rows.correctable": ("remapped_rows.correctable", "", "0"),
    "remapped_rows.uncorrectable": ("remapped_rows.uncorrectable", "", "0"),
    "remapped_rows.pending": ("remapped_rows.pending", "", "No"),
    "remapped_rows.failure": ("remapped_rows.failure", "", "No"),
    # The acceptance stage's health read (roles/gpu_acceptance/files/gpu_acceptance.py). The lab's links
    # stay at Gen5 x16 idle or not (a real GPU drops its link's generation when idle).
    "persistence_mode": ("persistence_mode", "", "Enabled"),
    "pcie.link.gen.current": ("pcie.link.gen.current", "", "5"),
    "pcie.link.gen.gpucurrent": ("pcie.link.gen.gpucurrent", "", "5"),
    "pcie.link.gen.max": ("pcie.link.gen.max", "", "5"),
    "pcie.link.width.current": ("pcie.link.width.current", "", "16"),
    "pcie.link.width.max": ("pcie.link.width.max", "", "16"),
}


SERVER_MEMORY_FRACTION = 0.85
# field -> (header with units, value with units, value without units) of one (process, GPU) row
APP_FIELDS = {
    "pid": lambda a: ("pid", str(a["pid"]), str(a["pid"])),
    "process_name": lambda a: ("process_name", a["name"], a["name"]),
    "used_memory": lambda a: ("used_gpu_memory [MiB]", "%d MiB" % a["mib"], str(a["mib"])),
    "used_gpu_memory": lambda a: ("used_gpu_memory [MiB]", "%d MiB" % a["mib"], str(a["mib"])),
    "gpu_uuid": lambda a: ("gpu_uuid", a["gpu"]["uuid"], a["gpu"]["uuid"]),
    "gpu_bus_id": lambda a: ("gpu_bus_id", a["gpu"]["pci_bus_id"], a["gpu"]["pci_bus_id"]),
    "gpu_name": lambda a: ("gpu_name", a["gpu"]["name"], a["gpu"]["name"]),
}


def compute_apps(cfg, proc="/proc"):
    """One row per (lab GPU process, GPU), by pid then GPU index."""
    rows = []
    for pid in sorted(int(p) for p in os.listdir(proc) if p.isdigit()):
        try:
            with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(os.path.join(proc, str(pid), "environ"), "rb") as handle:
                env = dict(item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item)
            with open(os.path.join(proc, str(pid), "stat")) as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if b"sglang_fleet_lab_server" in argv:
            gpus, mib = cfg["gpus"], None
        elif b"LAB_GPU_MEMORY_MIB" in env:
            wanted = env.get(b"LAB_GPU_INDEXES", b"").decode()
            gpus = [g for g in cfg["gpus"] if not wanted or str(g["index"]) in wanted.split(",")]
            mib = int(env[b"LAB_GPU_MEMORY_MIB"])
        else:
            continue
        # argv[0] as the process was started, as a real host lists it: a venv's python3 by its venv path,
        # not the interpreter the link resolves to, nor the name sglang's processes set for themselves.
        name = argv[0].decode("utf-8", "replace") if argv and argv[0] else "?"
        for gpu in gpus:
            rows.append({"pid": pid, "name": name, "gpu": gpu,
                         "mib": mib if mib is not None else int(gpu["memory_mib"] * SERVER_MEMORY_FRACTION)})
    return rows


def query_apps(cfg, fields, fmt):
    header_row = {"pid": 0, "name": "", "mib": 0, "gpu": cfg["gpus"][0]}
    return answer_csv("--query-compute-apps", fields, fmt, APP_FIELDS, lambda f, app: APP_FIELDS[f](app),
                      compute_apps(cfg), header_row)


def sensor(field):
    header, unit, idle = SENSORS[field]

    def read(g, c):
        value = str(g.get("sensors", {}).get(field, idle))
        return header, value + unit if unit and not value.startswith("[") else value, value
    return read


FIELDS.update({field: sensor(field) for field in SENSORS})


def table(cfg):
    drv, cuda = cfg["driver_version"], cfg["cuda_version"]
    sep = "+-----------------------------------------+------------------------+----------------------+"
    out = [time.strftime("%a %b %d %H:%M:%S %Y") + "       ",
           "+" + "-" * 89 + "+",
           "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (drv, drv, cuda),
           sep,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for g in cfg["gpus"]:
        name = g["name"][:25] if len(g["name"]) <= 25 else g["name"][:22] + "..."
        mem = "%dMiB / %dMiB" % (0, g["memory_mib"])
        out += ["| %3d  %-25s      On  |   %-16s Off |                    0 |" % (g["index"], name, g["pci_bus_id"]),
                "| N/A   30C    P0             60W /  600W | %22s |      0%%      Default |" % mem,
                "|                                         |                        |             Disabled |",
                sep]
    out += ["", "+" + "-" * 89 + "+",
            "| Processes:" + " " * 78 + "|",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|",
            "|  No running processes found" + " " * 61 + "|",
            "+" + "-" * 89 + "+"]
    return "\n".join(out) + "\n"


def answer_csv(option, fields, fmt, known, cell, items, header_item):
    """A --query-* answer as the real CLI prints it: one row per item, `cell(field, item)` giving (header with
    units, value with units, value without units); the header from `header_item` (None: the field names)."""
    for field in fields:
        if field not in known:
            sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % field)
            return 2
    if fmt[0] != "csv":
        sys.stdout.write("Only CSV format is supported for %s.\n" % option)
        return 2
    rows = [[cell(f, item) for f in fields] for item in items]
    if "noheader" not in fmt:
        sys.stdout.write(", ".join(cell(f, header_item)[0] if header_item is not None else f for f in fields) + "\n")
    column = 2 if "nounits" in fmt else 1
    for row in rows:
        sys.stdout.write(", ".join(c[column] for c in row) + "\n")
    return 0


def query(cfg, fields, fmt):
    return answer_csv("--query-gpu", fields, fmt, FIELDS, lambda f, g: FIELDS[f](g, cfg), cfg["gpus"],
                      cfg["gpus"][0] if cfg["gpus"] else None)


P2P_LEGEND = """
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""
LINK_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo(cfg, argv):
    """`topo -p2p r|w|n|a|p` and `topo -m`, laid out as driver 580's (tests compare with a capture)."""
    n = len(cfg["gpus"])
    names = ["GPU%d" % i for i in range(n)]
    underline = lambda cols: "\x1b[4m" + "\t".join(cols) + "\t\x1b[0m"
    if argv[:1] == ["-m"]:
        out = ["\t" + underline(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
        for i in range(n):
            cells = [" X " if i == j else cfg.get("link", "NODE") for j in range(n)]
            out.append("GPU%d\t" % i + "\t".join(cells) + "\t0-%d\t0\t\tN/A" % (os.cpu_count() - 1))
        sys.stdout.write("\n".join(out) + "\n" + LINK_LEGEND)
        return 0
    if argv[:1] == ["-p2p"] and argv[1:2] and argv[1] in ("r", "w", "n", "a", "p"):
        status = cfg.get("p2p", "OK")
        out = [" \t" + underline(names)]
        for i in range(n):
            out.append(" GPU%d\t" % i + "\t".join("X" if i == j else status for j in range(n)) + "\t")
        sys.stdout.write("\n".join(out) + "\n" + P2P_LEGEND)
        return 0
    sys.stdout.write("Invalid p2p capability index specified at the command-line\n")
    return 2


def main(argv):
    with open(CONFIG) as handle:
        cfg = json.load(handle)
    if cfg.get("state") == "driver-not-loaded":
        sys.stdout.write(NOT_LOADED)
        return 9
    if cfg.get("state") == "no-devices" or not cfg["gpus"]:
        sys.stdout.write("No devices were found\n")
        return 6
    if argv[:1] == ["topo"]:
        return topo(cfg, argv[1:])
    opts = dict(arg.split("=", 1) if "=" in arg else (arg, "") for arg in argv)
    if "--query-gpu" in opts:
        return query(cfg, opts["--query-gpu"].split(","), opts.get("--format", "").split(","))
    if "--query-compute-apps" in opts:
        return query_apps(cfg, opts["--query-compute-apps"].split(","), opts.get("--format", "").split(","))
    if argv:
        sys.stdout.write("lab nvidia-smi: unsupported arguments %s\n" % " ".join(argv))
        return 2
    sys.stdout.write(table(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
