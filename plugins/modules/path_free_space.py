#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Free space on the filesystem that holds (or will hold) a path."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: path_free_space
short_description: Report the free space of the filesystem that holds a path
description:
  - Reports the free space available to unprivileged users on the filesystem of I(path).
  - When I(path) does not exist yet (a model directory about to be created), the closest
    existing parent is measured, since that is where the directory will be created.
  - I(present) names directories whose contents count as room too (a model already in place
    needs no new space), so a host that holds the model is not refused for lacking space for it
    twice.
  - Read-only.
options:
  path:
    description: The path to measure.
    type: path
    required: true
  present:
    description: Directories (on that filesystem) whose allocated size counts as room.
    type: list
    elements: path
    default: []
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
- name: Measure the free space for the model directory
  path_free_space:
    path: /models
  register: model_disk
"""

RETURN = r"""
measured_path:
  description: The existing path that was measured (I(path) or its closest existing parent).
  returned: success
  type: str
  sample: /
free_bytes:
  description: Bytes available to unprivileged users.
  returned: success
  type: int
  sample: 751619276800
total_bytes:
  description: Size of the filesystem in bytes.
  returned: success
  type: int
  sample: 1000204886016
free_gb:
  description: I(free_bytes) in GB (10^9 bytes), rounded to one decimal.
  returned: success
  type: float
  sample: 751.6
present_bytes:
  description: Bytes allocated under the I(present) directories that are on the measured filesystem.
  returned: success
  type: int
  sample: 595000000000
room_gb:
  description: (I(free_bytes) + I(present_bytes)) in GB, rounded to one decimal.
  returned: success
  type: float
  sample: 1346.6
"""

import os

from ansible.module_utils.basic import AnsibleModule


def closest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def allocated(path, device):
    """Bytes allocated to the files under path that live on device (symlinks not followed)."""
    total, stack = 0, [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != device:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                total += st.st_blocks * 512
    return total


def measure(path, present=()):
    measured = closest_existing(path)
    st = os.statvfs(measured)
    free = st.f_bavail * st.f_frsize
    device = os.stat(measured).st_dev
    held = sum(allocated(p, device) for p in present if os.path.isdir(p) and os.stat(p).st_dev == device)
    return {"measured_path": measured, "free_bytes": free, "total_bytes": st.f_blocks * st.f_frsize,
            "free_gb": round(free / 1e9, 1), "present_bytes": held, "room_gb": round((free + held) / 1e9, 1)}


def main():
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True},
                                          "present": {"type": "list", "elements": "path", "default": []}},
                           supports_check_mode=True)
    module.exit_json(changed=False, **measure(module.params["path"], module.params["present"]))


if __name__ == "__main__":
    main()
