#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take, join or leave the fleet run lock on the lock host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_run_lock
short_description: Take, join or leave the fleet run lock
description:
  - One run changes the fleet at a time. The lock is a JSON file on the lock host naming the run, and each
    ansible-playbook process that holds it for that run (its controller, pid and user), since when and until
    when. The slices of one AWX workflow job share one run id; each joins the lock, and the last to leave
    frees it.
  - C(state=held) takes the lock, or joins it for the same run. Another run's live holder fails the task
    before any change, naming the run, its holders and since when. A holder whose time is up, a holder on
    this controller whose process is gone (in I(live_pids)'s terms), or every holder of the run named in
    I(takeover) is dropped, with a warning.
  - C(state=absent) leaves the lock; the run's last holder removes the file.
  - Run it on the lock host (delegate_to). Times are that host's clock.
options:
  path:
    description: The lock file on the lock host.
    type: path
    required: true
  run:
    description: The run's id, shared by every playbook process of the run (an AWX workflow job's slices).
    type: str
    required: true
  holder:
    description: This process, as C(controller) (the controller's host name), C(pid) and C(user).
    type: dict
    required: true
  live_pids:
    description: The ansible-playbook processes alive on this controller now.
    type: list
    elements: int
    default: []
  ttl:
    description: Seconds this holder keeps the lock without leaving it (a run that died elsewhere frees it then).
    type: int
    default: 43200
  takeover:
    description: A run id whose holders are dropped whatever their state (the operator's word that it is dead).
    type: str
    default: ""
  state:
    description: Whether this process holds the lock.
    type: str
    choices: [held, absent]
    default: held
attributes:
  check_mode:
    support: full
    description: In check mode it reads the lock and fails as the real run would, and writes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: This run holds the fleet run lock
  fleet_run_lock:
    path: /var/lib/sglang-fleet/run-lock/run.lock
    run: "{{ fleet_run_id }}"
    holder: {controller: ctl-1, pid: 4242, user: ops}
    live_pids: [4242]
  delegate_to: router-1
"""

RETURN = r"""
lock:
  description: The lock as it is now (or would be, in check mode); null once free.
  returned: always
  type: dict
summary:
  description: The lock in words.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.run_lock import LockHeld, acquire, describe, release


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "run": {"type": "str", "required": True},
            "holder": {"type": "dict", "required": True},
            "live_pids": {"type": "list", "elements": "int", "default": []},
            "ttl": {"type": "int", "default": 43200},
            "takeover": {"type": "str", "default": ""},
            "state": {"type": "str", "choices": ["held", "absent"], "default": "held"},
        },
        supports_check_mode=True,
    )
    p = module.params
    holder = p["holder"]
    missing = [k for k in ("controller", "pid", "user") if not holder.get(k)]
    if missing:
        module.fail_json(msg="holder needs %s" % ", ".join(missing))
    me = {"controller": str(holder["controller"]), "pid": int(holder["pid"]), "user": str(holder["user"])}
    if p["ttl"] <= 0:
        module.fail_json(msg="ttl must be a positive number of seconds, not %d" % p["ttl"])
    try:
        if p["state"] == "held":
            changed, lock, warnings = acquire(p["path"], p["run"], me, p["ttl"], p["live_pids"], p["takeover"],
                                              check_mode=module.check_mode)
        else:
            (changed, lock), warnings = release(p["path"], p["run"], me, check_mode=module.check_mode), []
    except LockHeld as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg="the fleet run lock %s: %s" % (p["path"], exc))
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=changed, lock=lock, summary=describe(lock) if lock else "free")


if __name__ == "__main__":
    main()
