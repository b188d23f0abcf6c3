#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the NVIDIA GPUs, driver and kernel module flavour of a host from nvidia-smi."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_info
short_description: Report the NVIDIA GPUs, driver version and kernel module flavour of a host
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) for the per-GPU data and
    the plain C(nvidia-smi) table for the CUDA version the driver supports.
  - Reads the driver's version file (C(/proc/driver/nvidia/version)) to tell the open kernel
    modules from the proprietary ones; Blackwell GPUs only work with the open ones.
  - With I(topology), also reads the peer-to-peer matrices (C(nvidia-smi topo -p2p r), and C(w)
    when the driver answers it) and the link matrix (C(nvidia-smi topo -m)), and returns per GPU
    pair its read and write status and link, and a summary. FlashInfer's allreduce fusion needs P2P between every
    pair.
  - Looks for C(nvidia-modprobe) the way it looks for nvidia-smi and says where it is, or that
    there is none (a driver installed without it, whose device nodes something else creates).
  - Read-only; fails with a precise message when nvidia-smi is missing, the driver is not
    loaded, no GPU is present or the output cannot be parsed.
options:
  topology:
    description: Also read the peer-to-peer and link matrices.
    type: bool
    default: false
  nvidia_smi:
    description: Name or path of the nvidia-smi binary. A bare name is looked up in C(PATH).
    type: str
    default: nvidia-smi
  driver_version_file:
    description: The kernel driver's version file.
    type: path
    default: /proc/driver/nvidia/version
  nvidia_modprobe:
    description: >-
      Name or path of nvidia-modprobe. A bare name is looked up in C(PATH), C(/usr/bin),
      C(/usr/sbin) and C(/usr/local/nvidia/bin).
    type: str
    default: nvidia-modprobe
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would change, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the GPUs of the host
  nvidia_gpu_info:
  register: gpu_info

- name: Show the compute capability of the first GPU
  ansible.builtin.debug:
    msg: "{{ gpu_info.gpus[0].compute_capability }}"
"""

RETURN = r"""
gpus:
  description: One entry per GPU, ordered by index.
  returned: success
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA RTX PRO 6000 Blackwell Server Edition
      uuid: GPU-5c52a68b-6ea6-dfd8-7182-2b3247b8097e
      pci_bus_id: "00000000:01:00.0"
      compute_capability: "12.0"
      memory_total_mib: 97887
gpu_count:
  description: Number of GPUs found.
  returned: success
  type: int
  sample: 8
cuda_archs:
  description: The distinct compute capabilities as CUDA arch numbers, sorted.
  returned: success
  type: list
  elements: str
  sample: ["120"]
driver_version:
  description: The NVIDIA driver version.
  returned: success
  type: str
  sample: "580.95.05"
cuda_driver_version:
  description: The highest CUDA version the driver supports, from the nvidia-smi table header.
  returned: success
  type: str
  sample: "13.0"
kernel_module:
  description: C(open), C(proprietary), or C(unknown) when the version file is unreadable.
  returned: success
  type: str
  sample: open
nvidia_modprobe:
  description: The nvidia-modprobe found, or an empty string when there is none.
  returned: success
  type: str
  sample: /usr/bin/nvidia-modprobe
p2p_pairs:
  description: >-
    With I(topology): one entry per GPU pair, its P2P read and write status (C(OK), C(NS) not
    supported, C(CNS) chipset not supported, C(GNS) GPU not supported, C(TNS) topology not
    supported, C(U) unknown; the worse of the two directions; write is null when the driver does
    not answer C(topo -p2p w)) and its link (C(NV18), C(PIX), C(NODE), C(SYS), ...).
  returned: when topology is true
  type: list
  elements: dict
  sample: [{gpus: [0, 1], read: OK, write: OK, link: NV18}]
p2p_all_ok:
  description: With I(topology), whether every pair reads (and, where answered, writes) peer to peer.
  returned: when topology is true
  type: bool
p2p_problems:
  description: With I(topology), one sentence per pair and direction that is not OK, or why the matrix could not be read.
  returned: when topology is true
  type: list
  elements: str
"""

import csv
import os
import re

from ansible.module_utils.basic import AnsibleModule

QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "compute_cap", "memory.total", "driver_version")
DRIVER_NOT_LOADED = "couldn't communicate with the NVIDIA driver"
NO_DEVICES = "No devices were found"
LIBRARY_MISMATCH = "Driver/library version mismatch"
# Where the driver's tools are when they are not in PATH: the H200 host of
# tests/fixtures/hosts/h200-driver580/ has them in /usr/local/nvidia/bin.
TOOL_DIRS = ["/usr/bin", "/usr/sbin", "/usr/local/nvidia/bin"]


class GpuInfoError(Exception):
    """A failure to report as the module's message."""


def query_command(nvidia_smi):
    return [nvidia_smi, "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]


def check_nvidia_smi_result(rc, out, err):
    """Turn nvidia-smi's known failure modes into clear errors."""
    text = (out or "") + (err or "")
    if DRIVER_NOT_LOADED in text:
        raise GpuInfoError(
            "the NVIDIA driver is not loaded: nvidia-smi could not communicate with it "
            "(after a driver install or upgrade a reboot is usually required): " + text.strip())
    if LIBRARY_MISMATCH in text:
        raise GpuInfoError(
            "driver/library version mismatch: the loaded NVIDIA kernel module is not the installed "
            "driver's, a reboot is required to finish the driver change: " + text.strip())
    if NO_DEVICES in text:
        raise GpuInfoError("nvidia-smi found no GPUs (No devices were found)")
    if rc != 0:
        raise GpuInfoError("nvidia-smi failed with exit code %d: %s" % (rc, text.strip() or "no output"))


def parse_query(out):
    """Parse the output of query_command() into a list of GPU dicts."""
    gpus = []
    for lineno, row in enumerate(csv.reader(out.splitlines(), skipinitialspace=True), start=1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(QUERY_FIELDS):
            raise GpuInfoError("malformed nvidia-smi output, line %d: expected %d fields (%s), got %d: %r"
                               % (lineno, len(QUERY_FIELDS), ", ".join(QUERY_FIELDS), len(row), ", ".join(row)))
        index, name, uuid, bus_id, cap, memory, driver = (field.strip() for field in row)
        if not index.isdigit() or not memory.isdigit() or not re.match(r"^\d+\.\d+$", cap):
            raise GpuInfoError("malformed nvidia-smi output, line %d: index %r, compute_cap %r and "
                               "memory.total %r must be numbers" % (lineno, index, cap, memory))
        gpus.append({"index": int(index), "name": name, "uuid": uuid, "pci_bus_id": bus_id,
                     "compute_capability": cap, "memory_total_mib": int(memory),
                     "driver_version": driver})
    if not gpus:
        raise GpuInfoError("nvidia-smi found no GPUs (empty output)")
    return sorted(gpus, key=lambda gpu: gpu["index"])


def parse_cuda_driver_version(table):
    """The 'CUDA Version: 13.0' field of the nvidia-smi table header."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", table)
    if not match:
        raise GpuInfoError("malformed nvidia-smi output: no 'CUDA Version' in the table header")
    return match.group(1)


def kernel_module_flavour(version_text):
    """'open' or 'proprietary', from the driver's version file."""
    if "Open Kernel Module" in version_text:
        return "open"
    if "Kernel Module" in version_text:
        return "proprietary"
    return "unknown"


P2P_STATUS = {"OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
              "TNS": "Topology not supported", "NS": "Not supported", "U": "Unknown"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_matrix(text):
    """{(i, j): cell} of the GPU columns of an nvidia-smi topo matrix (-p2p X or -m)."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    at = next((i for i, line in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", line)), None)
    if at is None:
        raise GpuInfoError("malformed nvidia-smi topo output: no GPU0 header: %r" % text.strip()[:200])
    columns = [int(h[3:]) for h in lines[at].split() if re.match(r"^GPU\d+$", h)]
    cells = {}
    for line in lines[at + 1:]:
        words = line.split()
        if len(words) > len(columns) and re.match(r"^GPU\d+$", words[0]):
            row = int(words[0][3:])
            for col, value in zip(columns, words[1:1 + len(columns)]):
                cells[(row, col)] = value
    if not cells:
        raise GpuInfoError("malformed nvidia-smi topo output: no GPU rows: %r" % text.strip()[:200])
    return cells


def worse(a, b):
    return a if a != "OK" else b


def p2p_summary(read_text, write_text, links_text):
    """p2p_pairs, p2p_all_ok, p2p_problems from the three matrices (write_text None: not answered)."""
    read = parse_matrix(read_text)
    write = parse_matrix(write_text) if write_text is not None else {}
    links = parse_matrix(links_text) if links_text is not None else {}
    gpus = sorted({i for i, _ in read})
    pairs, problems = [], []
    for a in gpus:
        for b in gpus:
            if b <= a:
                continue
            pair = {"gpus": [a, b], "read": worse(read.get((a, b), "U"), read.get((b, a), "U")),
                    "write": worse(write.get((a, b), "U"), write.get((b, a), "U")) if write else None,
                    "link": links.get((a, b))}
            pairs.append(pair)
            for mode in ("read", "write"):
                if pair[mode] not in (None, "OK"):
                    problems.append("GPU%d-GPU%d %s: %s (%s)" % (a, b, mode, pair[mode],
                                                             P2P_STATUS.get(pair[mode], "unknown code")))
    return {"p2p_pairs": pairs, "p2p_all_ok": not problems, "p2p_problems": problems}


def cuda_archs(gpus):
    return sorted({gpu["compute_capability"].replace(".", "") for gpu in gpus}, key=int)


def topology(run_command, nvidia_smi):
    """The P2P and link facts; a matrix nvidia-smi will not print is a problem, not a failure."""
    answers = {}
    for name, args in (("read", ["topo", "-p2p", "r"]), ("write", ["topo", "-p2p", "w"]), ("links", ["topo", "-m"])):
        rc, out, err = run_command([nvidia_smi] + args)
        answers[name] = out if rc == 0 else None
        if rc != 0:
            answers[name + "_error"] = "nvidia-smi %s failed (%d): %s" % (" ".join(args), rc, (out + err).strip())
    if answers["read"] is None:
        return {"p2p_pairs": [], "p2p_all_ok": False, "p2p_problems": [answers["read_error"]]}
    return p2p_summary(answers["read"], answers["write"], answers["links"])


def gather(run_command, nvidia_smi, driver_version_file, with_topology=False):
    """Everything the module returns; run_command(args) -> (rc, out, err)."""
    rc, out, err = run_command(query_command(nvidia_smi))
    check_nvidia_smi_result(rc, out, err)
    gpus = parse_query(out)
    drivers = sorted({gpu.pop("driver_version") for gpu in gpus})
    if len(drivers) != 1:
        raise GpuInfoError("nvidia-smi reports several driver versions: %s" % ", ".join(drivers))
    rc, table, err = run_command([nvidia_smi])
    check_nvidia_smi_result(rc, table, err)
    try:
        with open(driver_version_file) as handle:
            flavour = kernel_module_flavour(handle.read())
    except OSError:
        flavour = "unknown"
    result = {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "cuda_archs": cuda_archs(gpus),
        "driver_version": drivers[0],
        "cuda_driver_version": parse_cuda_driver_version(table),
        "kernel_module": flavour,
    }
    if with_topology:
        result.update(topology(run_command, nvidia_smi))
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "driver_version_file": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "topology": {"type": "bool", "default": False},
            "nvidia_modprobe": {"type": "str", "default": "nvidia-modprobe"},
        },
        supports_check_mode=True,
    )
    nvidia_smi = module.params["nvidia_smi"]
    binary = module.get_bin_path(nvidia_smi, opt_dirs=TOOL_DIRS)
    if binary is None:
        # A path asked for by name that is not there: the host's own nvidia-smi, where it has one elsewhere
        # (NVIDIA's container stack puts it in /usr/local/nvidia/bin), is the path to give instead.
        elsewhere = os.path.isabs(nvidia_smi) and module.get_bin_path(os.path.basename(nvidia_smi), opt_dirs=TOOL_DIRS)
        if elsewhere:
            module.fail_json(msg="nvidia-smi is not at %s, but this host has one at %s: set fleet_nvidia_smi to it"
                                 % (nvidia_smi, elsewhere))
        module.fail_json(msg="nvidia-smi not found (looked for %r in PATH, %s): is the NVIDIA driver installed?"
                             % (nvidia_smi, ", ".join(TOOL_DIRS)))

    def run_command(args):
        return module.run_command([binary] + args[1:], environ_update={"LC_ALL": "C"})

    try:
        result = gather(run_command, binary, module.params["driver_version_file"], module.params["topology"])
    except GpuInfoError as exc:
        module.fail_json(msg=str(exc))
    result["nvidia_modprobe"] = module.get_bin_path(module.params["nvidia_modprobe"], opt_dirs=TOOL_DIRS) or ""
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
