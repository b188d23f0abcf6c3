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
  - Read-only.
options:
  path:
    description: The path to measure.
    type: path
    required: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - sglang-fleet maintainers
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
"""

import os

from ansible.module_utils.basic import AnsibleModule


def closest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def measure(path):
    measured = closest_existing(path)
    st = os.statvfs(measured)
    free = st.f_bavail * st.f_frsize
    return {"measured_path": measured, "free_bytes": free, "total_bytes": st.f_blocks * st.f_frsize,
            "free_gb": round(free / 1e9, 1)}


def main():
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True}},
                           supports_check_mode=True)
    module.exit_json(changed=False, **measure(module.params["path"]))


if __name__ == "__main__":
    main()
