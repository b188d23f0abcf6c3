#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check that a DevicePolicy=closed unit's DeviceAllow= reaches every device node it must."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_device_access
short_description: Check a unit's DeviceAllow= list against this host's device nodes
description:
  - Resolves each I(allow) entry the way systemd does when the unit starts (C(char-NAME) as an
    fnmatch pattern against the names in C(/proc/devices), C(/dev/...) paths by their own
    major:minor) and fails, naming each node, when a device node matching I(nodes) would be denied.
  - Run it before the unit is written, so a unit that would hide the GPUs never reaches the host.
  - Read-only.
options:
  allow:
    description: The unit's DeviceAllow= values, e.g. C(char-nvidia* rw).
    type: list
    elements: str
    required: true
  nodes:
    description: Glob patterns of the device nodes the service needs.
    type: list
    elements: str
    default: ["/dev/nvidia*", "/dev/nvidia-caps/*"]
  proc_devices:
    description: The file that lists the device groups (the lab can point elsewhere).
    type: path
    default: /proc/devices
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
- name: The unit reaches every NVIDIA device node
  systemd_device_access:
    allow: ["char-nvidia* rw"]
"""

RETURN = r"""
nodes:
  description: The device nodes found, as C(path major:minor).
  returned: always
  type: list
  elements: str
  sample: ["/dev/nvidia0 195:0", "/dev/nvidiactl 195:255", "/dev/nvidia-uvm 238:0"]
denied:
  description: The nodes the unit would deny (empty on success).
  returned: always
  type: list
  elements: str
unmatched:
  description: Allow entries that match no device group on this host (harmless, shown for diagnosis).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.systemd_devices import access


def main():
    module = AnsibleModule(
        argument_spec={
            "allow": {"type": "list", "elements": "str", "required": True},
            "nodes": {"type": "list", "elements": "str", "default": ["/dev/nvidia*", "/dev/nvidia-caps/*"]},
            "proc_devices": {"type": "path", "default": "/proc/devices"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = access(p["allow"], p["nodes"], p["proc_devices"])
    except OSError as exc:
        module.fail_json(msg="cannot read %s: %s" % (p["proc_devices"], exc))
    problem = result.pop("problem")
    if problem:
        module.fail_json(msg=problem, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
