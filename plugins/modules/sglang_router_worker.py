#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a server into an sglang-router, or take it out, through the router's worker API."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_worker
short_description: Add a worker to an sglang-router, remove one, or list them
description:
  - Talks to the worker API of sglang-router 0.3 (C(GET /workers), C(POST /workers),
    C(DELETE /workers/<id>)). The router queues additions and removals, so this module waits
    until the router's list shows the result. An added worker counts only once the router
    reports it healthy.
  - C(state=absent) takes a worker out; requests the router already sent it run on, and new ones
    go to the other workers.
  - C(state=query) only lists the workers.
options:
  router_url:
    description: Base URL of the router, for example C(http://127.0.0.1:30080).
    type: str
    required: true
  url:
    description: The worker's URL, as the router knows it. Required unless I(state=query).
    type: str
  state:
    description: Whether the worker is in the router.
    type: str
    choices: [present, absent, query]
    default: present
  api_key:
    description:
      - The router's C(--api-key), sent as a bearer token to its worker API, and handed to the
        router for a worker it adds unless I(worker_api_key) is set.
    type: str
    default: ""
  api_key_file:
    description:
      - A file on the host the module runs on (the router's, delegate_to) that holds the router's key, read
        there in place of I(api_key). The router answers its worker API only to the key it runs with, which
        is the one in its key file, and a run that rotates the key reaches the router still on the old one.
      - A file that is not there yet (a first run, before the router stage) reads as no key.
    type: path
    default: ""
  worker_api_key:
    description:
      - The key the router sends the worker it adds (the server's C(--api-key)); the router's own when empty.
        sglang-router 0.3.2 keeps one per worker, so a server that restarted with a rotated key serves
        through a router still on the old one.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for the router to show the change (and a new worker healthy).
    type: int
    default: 120
  router_down_ok:
    description:
      - A router that refuses the connection (not running yet, as on a first run, where the server
        stage comes before the router stage) is no error; C(router_running) says so.
    type: bool
    default: false
  lease_dir:
    description:
      - The router host's drain-lease directory (module_utils/drain_lease.py); empty for none.
      - With I(state=absent), a lease is written there before the worker leaves (when the router lists it,
        or a lease is already there), so that the router host's healer puts it back should the run die
        with it out. With I(state=present), the worker's lease is removed once it is in and healthy.
      - Run the module on the router's host (delegate_to), which owns the directory and the clock.
    type: path
    default: ""
  min_in_service:
    description:
      - The fleet's floor (fleet_min_in_service, resolved to a count of workers by the rollout plan); 0 for none.
      - With I(state=absent) and I(lease_dir), a worker the router lists leaves only through a drain slot. Under
        an exclusive lock beside the leases (C(.drain-slot.lock)), the router must list at least this many
        healthy workers besides it; the lease is written and the worker removed before the lock is let go. So
        runs, and the slices of one AWX job, that restart servers at once share one floor, counted live. Where
        the floor would break, it looks again every 2 seconds for I(slot_timeout) seconds, then fails saying
        so (the task retries it, one progress line a try).
    type: int
    default: 0
  slot_timeout:
    description: Seconds one call waits for a drain slot.
    type: int
    default: 30
  lease:
    description: What the lease written by I(state=absent) says; required then with I(lease_dir).
    type: dict
    suboptions:
      run:
        description: Which run takes the worker out.
        type: str
        default: ""
      host:
        description: The inventory host the worker is.
        type: str
        default: ""
      drain_timeout:
        description: Seconds the stage waits for requests in flight to finish.
        type: int
        required: true
      start_timeout:
        description: Seconds systemd gives the restarted server to start.
        type: int
        required: true
      gate_timeout:
        description: Seconds the health gate waits for the restarted server.
        type: int
        required: true
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would change, changes nothing and waits for nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The host is out of the router before it restarts
  sglang_router_worker:
    router_url: http://127.0.0.1:30080
    url: http://10.0.0.11:30000
    state: absent
"""

RETURN = r"""
workers:
  description: The router's workers after the change, each C(url) and C(healthy).
  returned: always
  type: list
  elements: dict
waited:
  description: Seconds the router took to show the change.
  returned: success
  type: float
router_running:
  description: False when the router refused the connection and I(router_down_ok) let that pass.
  returned: always
  type: bool
lease:
  description:
    - I(state=absent) the lease written (or, in check mode, that would be); I(state=present) the lease that
      was removed (or would be). Null when there is none. Keys C(worker), C(run), C(host), C(state),
      C(seconds), C(since), C(until) (the router host's epoch seconds) and C(until_utc).
  returned: always
  type: dict
"""

import fcntl
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drain_lease import FAILED, LeaseError, lease_seconds, new as new_lease, read as read_lease
from ansible.module_utils.drain_lease import describe, expired, remove as remove_lease, write as write_lease
# The router's API has one home, which the router host's healer shares (module_utils/router_api.py).
from ansible.module_utils.router_api import RouterDown, RouterError, ensure, find, read_key, workers  # noqa: F401


def leased(p, check_mode=False, sleep=time.sleep, clock=time.monotonic, now=time.time):
    """(changed, workers, waited, lease) as ensure(), with the drain lease in I(lease_dir) kept to the change.

    absent: the lease is written (renewed) before the worker leaves, when it is listed or already under a
    draining lease (a run before this one died with it out); a worker out with no lease was taken out by
    hand and gets none, one under a failed lease keeps it. present: once the worker is in and healthy, its
    lease is removed. The lease returned carries what it means by this host's clock (expired, summary)."""
    changed, listed, waited, lease = _leased(p, check_mode, sleep, clock, now)
    if lease is not None:
        t = now()
        lease = dict(lease, expired=expired(lease, t), summary=describe(lease, t))
    return changed, listed, waited, lease


SLOT_LOCK = ".drain-slot.lock"


class NoSlot(LeaseError):
    """No drain slot came free in time: the floor would break."""


def take_slot(p, url, sleep=time.sleep, clock=time.monotonic):
    """(fd, listed, waited): the drain-slot lock held (fd) once the router lists at least I(min_in_service)
    healthy workers besides `url`. The lock is let go between looks, so a run holding it never waits on
    another; the caller lets go of it (os.close) once its lease is written and the worker is out."""
    lease_dir, floor, start = p["lease_dir"], p.get("min_in_service") or 0, clock()
    if not os.path.isdir(lease_dir):
        os.makedirs(lease_dir, mode=0o750)
    while True:
        fd = os.open(os.path.join(lease_dir, SLOT_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            serving, listed = None, None
        else:
            listed = workers(p["router_url"].rstrip("/"), p["api_key"])
            serving = [w["url"] for w in listed if w["healthy"] and w["url"].rstrip("/") != url]
            if len(serving) >= floor:
                return fd, listed, clock() - start
            os.close(fd)
        if clock() - start >= p.get("slot_timeout", 30):
            raise NoSlot("no drain slot for %s in %ds: %s; fleet_min_in_service keeps %d in service" % (
                url, p.get("slot_timeout", 30), "another run held the slot lock" if serving is None else
                "the router lists %d healthy worker(s) besides it (%s)" % (len(serving), ", ".join(serving) or "none"),
                floor))
        sleep(2)


def _leased(p, check_mode=False, sleep=time.sleep, clock=time.monotonic, now=time.time):
    lease_dir, url = p.get("lease_dir"), (p["url"] or "").rstrip("/")
    if not lease_dir or p["state"] == "query":
        return ensure(p, check_mode, sleep, clock) + (None,)
    existing = read_lease(lease_dir, url)
    if p["state"] == "absent":
        listed = workers(p["router_url"].rstrip("/"), p["api_key"])
        if find(listed, url) is None and (existing is None or existing["state"] == FAILED):
            # Out by hand (no lease), or out since it failed its gate: a failed lease stays failed (the
            # rollback's second stop comes here, and the healer must not put that worker back).
            return False, listed, 0.0, existing
        spec = p.get("lease")
        if not spec:
            raise LeaseError("state=absent with lease_dir needs lease (its run and the stage's timeouts)")
        slot, waited_slot = None, 0.0
        if (p.get("min_in_service") or 0) > 0 and find(listed, url) is not None and not check_mode:
            slot, listed, waited_slot = take_slot(p, url, sleep, clock)
        try:
            lease = new_lease(url, spec.get("run") or "", spec.get("host") or "",
                              lease_seconds(spec.get("drain_timeout"), spec.get("start_timeout"),
                                            spec.get("gate_timeout")), now())
            if not check_mode:
                write_lease(lease_dir, lease)
            _, listed, waited = ensure(p, check_mode, sleep, clock)
        finally:
            if slot is not None:
                os.close(slot)
        return True, listed, waited + waited_slot, lease
    changed, listed, waited = ensure(p, check_mode, sleep, clock)
    if existing is not None:
        if not check_mode:
            remove_lease(lease_dir, url)
        changed = True
    return changed, listed, waited, existing


def with_key_file(p):
    """p with api_key read from I(api_key_file) where that is set: the key the router runs with."""
    if not p.get("api_key_file"):
        return p
    try:
        key = read_key(p["api_key_file"])
    except FileNotFoundError:
        key = ""
    return dict(p, api_key=key)


def main():
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "url": {"type": "str"},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent", "query"]},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "api_key_file": {"type": "path", "default": ""},
            "worker_api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 120},
            "router_down_ok": {"type": "bool", "default": False},
            "lease_dir": {"type": "path", "default": ""},
            "min_in_service": {"type": "int", "default": 0},
            "slot_timeout": {"type": "int", "default": 30},
            "lease": {"type": "dict", "options": {
                "run": {"type": "str", "default": ""},
                "host": {"type": "str", "default": ""},
                "drain_timeout": {"type": "int", "required": True},
                "start_timeout": {"type": "int", "required": True},
                "gate_timeout": {"type": "int", "required": True},
            }},
        },
        required_if=[("state", "present", ["url"]), ("state", "absent", ["url"])],
        supports_check_mode=True,
    )
    try:
        params = with_key_file(module.params)
        if params["api_key"]:
            module.no_log_values.add(params["api_key"])  # read from the file: masked as the option would be
        changed, listed, waited, lease = leased(params, module.check_mode)
    except RouterDown as exc:
        if not module.params["router_down_ok"]:
            module.fail_json(msg=str(exc), router_running=False)
        module.exit_json(changed=False, router_running=False, workers=[], waited=0.0, lease=None)
    except NoSlot as exc:
        module.fail_json(msg=str(exc), no_slot=True)
    except (RouterError, LeaseError, ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, waited=round(waited, 1), router_running=True, lease=lease,
                     workers=[{"url": w["url"], "healthy": w["healthy"]} for w in listed])


if __name__ == "__main__":
    main()
