# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a host's CUDA toolkits are as the cuda_toolkit stage asks, from one cuda_toolkit_info read."""
from __future__ import annotations

DOCUMENTATION = r"""
name: cuda_toolkit_settled
short_description: Whether the cuda_toolkit stage has nothing to do on a host, and if not, why
description:
  - Reads what M(cuda_toolkit_info) found (I(_input)) against what the stage asks for.
  - The host is settled when the wanted release is installed and its nvcc says so,
    C(/usr/local/cuda) resolves to it, the C(cuda) alternative is in manual mode on it and lists
    it at its priority, no toolkit listed for removal is installed, and the files the stage writes
    (the module's C(files_differ)) are as asked.
  - A host whose driver the role manages (I(manage_driver)) is never settled here, since the
    driver's own tasks decide what they change.
  - Returns C(settled) and C(pending), the reasons it is not, in words.
positional: _input
options:
  _input:
    description: The registered result of M(cuda_toolkit_info).
    type: dict
    required: true
  release:
    description: The wanted release, C(13.0).
    type: str
    required: true
  remove_versions:
    description: Releases that must not be installed.
    type: list
    elements: str
    default: []
  manage_driver:
    description: Whether the role installs the driver as well.
    type: bool
    default: false
  prefix:
    description: The directory of the toolkits and of the C(cuda) link.
    type: str
    default: /usr/local
"""

EXAMPLES = r"""
- name: Whether the host is as asked already is known
  ansible.builtin.set_fact:
    settled: "{{ found | cuda_toolkit_settled('13.0', remove_versions=['12.8']) }}"
"""

RETURN = r"""
_value:
  description: C(settled) (bool) and C(pending) (list of str, empty when settled).
  type: dict
"""

import re

from ansible.errors import AnsibleFilterError


def cuda_toolkit_priority(release):
    """The cuda alternative's priority of a release: 13.0 -> 130, 12.8 -> 128."""
    match = re.fullmatch(r"(\d+)\.(\d+)", str(release))
    if not match:
        raise AnsibleFilterError("cuda_toolkit: a release is MAJOR.MINOR, not %r" % (release,))
    return int(match.group(1)) * 10 + int(match.group(2))


def cuda_toolkit_settled(found, release, remove_versions=(), manage_driver=False, prefix="/usr/local"):
    if not isinstance(found, dict) or "toolkits" not in found:
        raise AnsibleFilterError("cuda_toolkit_settled: the input is cuda_toolkit_info's result, not %r" % (found,))
    home, link, priority = "%s/cuda-%s" % (prefix, release), "%s/cuda" % prefix, cuda_toolkit_priority(release)
    pending = []
    if manage_driver:
        pending.append("the driver is managed by this role (cuda_toolkit_manage_driver)")
    wanted = [t for t in found["toolkits"] if t.get("version") == release]
    if not any(t.get("nvcc_release") == release for t in wanted):
        pending.append("CUDA %s is not installed" % release)
    active = found.get("active") or {}
    if active.get("home") != home or active.get("nvcc_release") != release:
        pending.append("%s is %s, not %s" % (link, active.get("home") or "missing", home))
    alternative = found.get("alternative") or {}
    choices = {c.get("path"): c.get("priority") for c in alternative.get("choices") or []}
    if not alternative:
        pending.append("the cuda alternative is not registered")
    else:
        if alternative.get("link") != link or choices.get(home) != priority:
            pending.append("the cuda alternative does not list %s for %s at priority %d" % (home, link, priority))
        if alternative.get("status") != "manual" or alternative.get("value") != home:
            pending.append("the cuda alternative is %s on %s, not manual on %s"
                           % (alternative.get("status"), alternative.get("value"), home))
    removable = sorted(t["version"] for t in found["toolkits"] if t.get("version") in list(remove_versions or []))
    if removable:
        pending.append("listed for removal but installed: %s" % ", ".join(removable))
    for path in found.get("files_differ") or []:
        pending.append("%s is not as asked" % path)
    return {"settled": not pending, "pending": pending}


class FilterModule:
    def filters(self):
        return {"cuda_toolkit_settled": cuda_toolkit_settled, "cuda_toolkit_priority": cuda_toolkit_priority}
