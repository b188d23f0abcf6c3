# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare what a host has with the hardware profile the fleet expects."""
from __future__ import annotations

import re

DOCUMENTATION = r"""
name: gpu_profile_mismatches
short_description: List how a host differs from the expected GPU host profile
description:
  - Takes what was found on a host (the result of C(nvidia_gpu_info) plus C(os) and
    C(free_disk_gb)) and the expected profile; returns one sentence per mismatch, each
    saying what was expected and what was found. An empty list means the host fits.
positional: found, expected
options:
  found:
    description: C(gpus), C(gpu_count), C(driver_version), C(kernel_module), C(os), C(free_disk_gb).
    type: dict
    required: true
  expected:
    description: >-
      C(gpu_count), C(compute_capability), C(min_driver_version),
      C(require_open_kernel_module), C(supported_os), C(min_free_disk_gb), C(disk_path).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse a host that does not fit
  ansible.builtin.fail:
    msg: "{{ found | gpu_profile_mismatches(expected) | join('; ') }}"
  when: found | gpu_profile_mismatches(expected) | length > 0
"""

RETURN = r"""
_value:
  description: One message per mismatch; empty when the host fits.
  type: list
  elements: str
"""


def _version_tuple(version):
    return tuple(int(part) for part in re.findall(r"\d+", str(version)))


def _os_supported(os_name, supported):
    """'Debian 12.7' is covered by 'Debian 12'; 'Ubuntu 24.04' by 'Ubuntu 24.04'."""
    return any(os_name == entry or os_name.startswith(entry + ".") for entry in supported)


def gpu_profile_mismatches(found, expected):
    problems = []
    count = found["gpu_count"]
    if count != int(expected["gpu_count"]):
        problems.append("GPU count: expected %s, found %d" % (expected["gpu_count"], count))

    want_cap = str(expected["compute_capability"])
    off = sorted({gpu["compute_capability"] for gpu in found["gpus"] if gpu["compute_capability"] != want_cap})
    if off:
        names = sorted({gpu["name"] for gpu in found["gpus"] if gpu["compute_capability"] != want_cap})
        problems.append("compute capability: expected %s on every GPU, found %s (%s)"
                        % (want_cap, ", ".join(off), ", ".join(names)))

    min_driver = str(expected["min_driver_version"])
    if _version_tuple(found["driver_version"]) < _version_tuple(min_driver):
        problems.append("driver: expected %s or newer, found %s" % (min_driver, found["driver_version"]))

    if expected.get("require_open_kernel_module") and found["kernel_module"] != "open":
        problems.append("kernel module: expected the NVIDIA open kernel modules, found %s"
                        % found["kernel_module"])

    supported = [str(entry) for entry in expected.get("supported_os") or []]
    if supported and not _os_supported(found["os"], supported):
        problems.append("operating system: expected one of %s, found %s" % (", ".join(supported), found["os"]))

    need_gb = float(expected.get("min_free_disk_gb") or 0)
    if need_gb and float(found["free_disk_gb"]) < need_gb:
        problems.append("free disk for %s: expected at least %g GB (free + models in place), found %.1f GB"
                        % (expected.get("disk_path", "the model directory"), need_gb, float(found["free_disk_gb"])))
    if expected.get("require_p2p") and found.get("p2p_problems"):
        problems.append("peer-to-peer between every GPU pair (FlashInfer allreduce fusion needs it): "
                        + "; ".join(found["p2p_problems"]))
    return problems


class FilterModule:
    def filters(self):
        return {"gpu_profile_mismatches": gpu_profile_mismatches}
