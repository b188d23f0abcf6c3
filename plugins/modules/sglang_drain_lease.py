#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Mark a worker's drain lease failed, or list the drain leases of a router host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_drain_lease
short_description: Mark a drain lease failed, or list a router host's drain leases
description:
  - The server stage writes a drain lease on a router's host when it takes a worker out, and removes it
    when it puts the worker back (M(sglang_router_worker) with I(lease_dir)). The router host's healer puts
    back the worker of a lease that ran out, which only a run that died leaves behind.
  - C(state=failed) marks the lease of a worker that failed its health gate, so the healer leaves it
    out (the operator decides, as after any failed gate). No lease, nothing to mark.
  - C(state=query) lists every lease, with what it means now by the host's clock. Changes nothing.
  - Run it on the router's host (delegate_to).
options:
  lease_dir:
    description: The router host's drain-lease directory.
    type: path
    required: true
  worker:
    description: The worker's URL, as the router knows it. Required with I(state=failed).
    type: str
  state:
    description: What to do.
    type: str
    choices: [failed, query]
    default: query
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would mark, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: A worker that failed its gate is not put back by the healer
  sglang_drain_lease:
    lease_dir: /var/lib/sglang-router/leases
    worker: http://10.0.0.11:30000
    state: failed
  delegate_to: router-1
"""

RETURN = r"""
lease:
  description: I(state=failed) the worker's lease as it is now (or would be, in check mode); null when none.
  returned: always
  type: dict
leases:
  description:
    - I(state=query) every lease, each with C(worker), C(run), C(host), C(state) (draining or failed),
      C(until_utc), C(expired) and C(summary) (what it means now, in words).
  returned: always
  type: list
  elements: dict
unreadable:
  description: I(state=query) files of the directory that are no lease, with why.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drain_lease import FAILED, LeaseError, describe, expired, read, read_all, write


def run(p, check_mode=False, now=time.time):
    """(changed, lease, leases, unreadable)."""
    if p["state"] == "failed":
        lease = read(p["lease_dir"], p["worker"])
        if lease is None or lease["state"] == FAILED:
            return False, lease, [], []
        lease = dict(lease, state=FAILED, failed_at=round(now(), 3))
        if not check_mode:
            write(p["lease_dir"], lease)
        return True, lease, [], []
    t = now()
    leases, unreadable = [], []
    for path, lease in read_all(p["lease_dir"]):
        if isinstance(lease, LeaseError):
            unreadable.append(str(lease))
            continue
        leases.append(dict(lease, expired=expired(lease, t), summary=describe(lease, t)))
    return False, None, leases, unreadable


def main():
    module = AnsibleModule(
        argument_spec={
            "lease_dir": {"type": "path", "required": True},
            "worker": {"type": "str"},
            "state": {"type": "str", "default": "query", "choices": ["failed", "query"]},
        },
        required_if=[("state", "failed", ["worker"])],
        supports_check_mode=True,
    )
    try:
        changed, lease, leases, unreadable = run(module.params, module.check_mode)
    except (LeaseError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, lease=lease, leases=leases, unreadable=unreadable)


if __name__ == "__main__":
    main()
