#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stray GPU processes of a stopped server are ended before a new one starts."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_strays
short_description: Ends the processes a stopped server left on its GPUs, before a new server starts
description:
  - sglang's scheduler processes can outlive their server's stop and keep the GPU memory they hold (sglang
    issues 23627 and 15165); a server started on those GPUs fails late, or is OOM-killed.
  - A stray is a compute process of I(user) on the host's GPUs (C(nvidia-smi --query-compute-apps)), or any
    process left in the I(service) unit's cgroup once it stopped. Each is sent SIGTERM, then SIGKILL after
    I(term_timeout) seconds, and named in C(strays). The module fails, naming them, when one still runs
    I(kill_timeout) seconds after its SIGKILL, or when nvidia-smi still lists a process of I(user) after.
  - Another user's compute process is named in C(foreign) and left alone; one that nvidia-smi lists and this
    host's C(/proc) does not show (another PID namespace's) is named in C(hidden) and left alone.
  - While the unit still runs (check mode, where its stop did not happen), the processes of its cgroup are
    the server, not strays.
options:
  service:
    description: The server's systemd unit, without C(.service).
    type: str
    required: true
  user:
    description: The user the server runs as; its compute processes are strays.
    type: str
    required: true
  nvidia_smi:
    description: The nvidia-smi to ask.
    type: path
    default: /usr/bin/nvidia-smi
  term_timeout:
    description: Seconds between the SIGTERM and the SIGKILL.
    type: int
    default: 30
  kill_timeout:
    description: Seconds a process has to end after its SIGKILL.
    type: int
    default: 15
attributes:
  check_mode:
    support: full
    description: It finds the strays and ends none; changed when there is one.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: No process of the service user holds the server's GPUs
  sglang_server_strays:
    service: sglang
    user: sglang
"""

RETURN = r"""
strays:
  description: Each stray, with how it ended (C(ended_by) SIGTERM, SIGKILL or itself; none in check mode).
  returned: always
  type: list
  elements: dict
foreign:
  description: Another user's compute processes on the GPUs, left running.
  returned: always
  type: list
  elements: dict
hidden:
  description: Compute processes nvidia-smi lists that this host's /proc does not show, left running.
  returned: always
  type: list
  elements: dict
summary:
  description:
    - >-
      The strays in words, one entry each
      ("pid 4242 sglang::scheduler_TP0 (sglang, 81920 MiB on 8 GPUs): ended by SIGTERM before the server started").
  returned: always
  type: list
  elements: str
"""

import pwd
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_strays import COMPUTE_APPS_QUERY, classify, compute_apps, describe, end, unit_processes

STRAY_FIELDS = ("pid", "name", "user", "cmdline", "gpus", "used_mib", "found_in", "ended_by")


def main():
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "nvidia_smi": {"type": "path", "default": "/usr/bin/nvidia-smi"},
            "term_timeout": {"type": "int", "default": 30},
            "kill_timeout": {"type": "int", "default": 15},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        uid = pwd.getpwnam(p["user"]).pw_uid
    except KeyError:
        module.fail_json(msg="no user %s on this host" % p["user"])
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, err = module.run_command([systemctl, "show", "--property=ActiveState", "--property=ControlGroup",
                                       p["service"] + ".service"])
    if rc != 0:
        module.fail_json(msg="systemctl show %s.service: %s" % (p["service"], err.strip() or out.strip()))
    unit = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    running = unit.get("ActiveState") in ("active", "activating", "deactivating", "reloading")
    if running and not module.check_mode:
        module.fail_json(msg="%s.service is %s: its strays are looked for once it has stopped"
                         % (p["service"], unit["ActiveState"]))
    in_unit = unit_processes(unit.get("ControlGroup"))

    def gpu_apps():
        rc, out, err = module.run_command([p["nvidia_smi"]] + COMPUTE_APPS_QUERY)
        if rc != 0:
            module.fail_json(msg="%s %s: rc %d: %s" % (p["nvidia_smi"], " ".join(COMPUTE_APPS_QUERY), rc,
                                                       (out + err).strip()))
        try:
            return compute_apps(out)
        except ValueError as exc:
            module.fail_json(msg=str(exc))

    strays, foreign, hidden = classify(gpu_apps(), uid, [] if running else in_unit, in_unit if running else ())
    result = {"changed": bool(strays), "foreign": foreign, "hidden": hidden}
    if strays and not module.check_mode:
        left = end(strays, p["term_timeout"], p["kill_timeout"])
        if left:
            module.fail_json(msg="stray process(es) still running %ds after SIGKILL: %s%s" % (
                p["kill_timeout"], "; ".join("%s, state %s" % (describe(s), s["state"]) for s in left),
                " (state D: stuck in the kernel, often the GPU driver; a GPU reset or a reboot ends it)"
                if any(s["state"] == "D" for s in left) else ""), strays=strays, **result)
        # The driver frees a context as its process ends; nvidia-smi may list it a moment longer. (With no
        # stray found, the first look already said the user holds no GPU: nothing to look at again.)
        for _ in range(int(p["kill_timeout"] / 0.5) + 1):
            still, _foreign, _hidden = classify(gpu_apps(), uid, [])
            if not still:
                break
            time.sleep(0.5)
        else:
            module.fail_json(msg="nvidia-smi still lists process(es) of %s on the GPUs after their strays ended: %s"
                             % (p["user"], "; ".join(describe(s) for s in still)), strays=strays, **result)
    module.exit_json(strays=[{k: s.get(k) for k in STRAY_FIELDS} for s in strays],
                     summary=["%s: %s" % (describe(s), "ended by %s before the server started" % s["ended_by"]
                                           if s.get("ended_by") else "would be ended before the server starts")
                              for s in strays],
                     **result)


if __name__ == "__main__":
    main()
