#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Everything the server stage reads on a host before it decides anything, in one module call."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_probe
short_description: Read what the sglang server stage needs to know of a host, changing nothing
description:
  - One call for the server stage's read-only checks, so that a host with nothing to change costs one
    module run for them, not seven.
  - The installs under I(root), as C(sglang_venvs) reports them (C(installs), C(current), C(previous)).
  - The site-packages of I(python), the interpreter the server runs; a python that cannot run is a
    finding (C(python_error)), not a failure, so that a check run can still say what it would build.
  - Which of I(paths) (the model, the drafter) are missing.
  - Whether systemd runs the host (C(/run/systemd/system)), whether D-Bus's system bus is there and
    whether C(systemd-run) runs, which say where the fusion self-test can run in the server's own sandbox.
  - What the unit's I(device_allow) (C(DeviceAllow=) under C(DevicePolicy=closed)) does to the
    device nodes matching I(device_nodes), resolved as systemd resolves it (as C(systemd_device_access)
    does); C(device_problem) names every node it would deny.
  - Fails only on bad input or an unreadable I(proc_devices); every finding is returned for the
    stage's assertions to word.
options:
  root:
    description: Where the versioned installs live (C(venvs/), C(current), C(previous)).
    type: path
    default: /opt/sglang
  python:
    description: The python the server runs.
    type: path
    required: true
  paths:
    description: Paths that must exist on the host.
    type: list
    elements: path
    default: []
  device_allow:
    description: The unit's DeviceAllow= values, e.g. C(char-nvidia* rw); empty skips the device check.
    type: list
    elements: str
    default: []
  device_nodes:
    description: Glob patterns of the device nodes the server needs.
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
    description: It only reads, in check mode as in a normal run.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What the server stage needs to know of this host is read
  sglang_server_probe:
    root: /opt/sglang
    python: /opt/sglang/current/bin/python
    paths: [/models/nvidia/Kimi-K2.5-NVFP4]
    device_allow: ["char-nvidia* rw"]
  register: probe
"""

RETURN = r"""
installs:
  description: Every install under I(root)/venvs, newest built first.
  returned: always
  type: list
  elements: dict
  sample: [{"id": "0.5.9-3f2a9c1d0b7e", "complete": true, "built": 1764000000.0}]
current:
  description: The install C(current) names ("" when none).
  returned: always
  type: str
previous:
  description: The install C(previous) names ("" when none).
  returned: always
  type: str
site_packages:
  description: The purelib directory of I(python) ("" when it cannot run).
  returned: always
  type: str
  sample: /opt/sglang/current/lib/python3.12/site-packages
python_error:
  description: Why I(python) cannot run ("" when it runs).
  returned: always
  type: str
missing:
  description: The paths of I(paths) that do not exist.
  returned: always
  type: list
  elements: str
systemd:
  description: C(booted) (systemd is PID 1), C(system_bus) (D-Bus's socket is there), C(run_rc) (the exit
    status of C(systemd-run --version), 127 when there is none).
  returned: always
  type: dict
  sample: {"booted": true, "system_bus": true, "run_rc": 0}
devices:
  description: C(nodes) found, as C(path major:minor), C(denied) by I(device_allow), and C(unmatched)
    allow entries (empty when I(device_allow) is).
  returned: always
  type: dict
device_problem:
  description: One line naming every device node the unit would deny ("" when none).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_installs import state_of
from ansible.module_utils.systemd_devices import access

SITE_PACKAGES = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def python_site(module, python):
    """(site-packages, error): the error is "" when the python runs."""
    if not os.path.exists(python):
        return "", "%s does not exist" % python
    rc, out, err = module.run_command([python, "-c", SITE_PACKAGES])
    if rc != 0:
        return "", (err.strip() or out.strip() or "exit %d" % rc).splitlines()[-1]
    return out.strip(), ""


def systemd_state(module):
    run = module.get_bin_path("systemd-run")
    return {"booted": os.path.isdir("/run/systemd/system"),
            "system_bus": os.path.exists("/run/dbus/system_bus_socket"),
            "run_rc": module.run_command([run, "--version"])[0] if run else 127}


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/opt/sglang"},
            "python": {"type": "path", "required": True},
            "paths": {"type": "list", "elements": "path", "default": []},
            "device_allow": {"type": "list", "elements": "str", "default": []},
            "device_nodes": {"type": "list", "elements": "str", "default": ["/dev/nvidia*", "/dev/nvidia-caps/*"]},
            "proc_devices": {"type": "path", "default": "/proc/devices"},
        },
        supports_check_mode=True,
    )
    p = module.params
    installs = state_of(p["root"], None)
    site_packages, python_error = python_site(module, p["python"])
    devices = {"nodes": [], "denied": [], "unmatched": [], "problem": ""}
    if p["device_allow"]:
        try:
            devices = access(p["device_allow"], p["device_nodes"], p["proc_devices"])
        except OSError as exc:
            module.fail_json(msg="cannot read %s: %s" % (p["proc_devices"], exc))
    device_problem = devices.pop("problem")
    module.exit_json(changed=False, installs=installs["installs"], current=installs["current"],
                     previous=installs["previous"], site_packages=site_packages, python_error=python_error,
                     missing=[path for path in p["paths"] if not os.path.exists(path)],
                     systemd=systemd_state(module), devices=devices, device_problem=device_problem)


if __name__ == "__main__":
    main()
