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
        router for a worker it adds (the router then sends it to that worker).
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
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url


class RouterError(Exception):
    pass


class RouterDown(RouterError):
    pass


def call(router_url, api_key, method, path, payload=None, timeout=30):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    try:
        response = open_url(router_url + path, method=method, headers=headers, timeout=timeout, use_proxy=False,
                            data=json.dumps(payload) if payload is not None else None)
        body = response.read().decode("utf-8", "replace")
    except Exception as exc:  # HTTPError, URLError, timeouts
        if isinstance(getattr(exc, "reason", None), ConnectionRefusedError) or isinstance(exc, ConnectionRefusedError):
            raise RouterDown("%s %s%s: nothing listens there (is the router running?)" % (method, router_url, path))
        code = getattr(exc, "code", None)
        hint = " (the router's api_key is wrong or missing)" if code == 401 else ""
        raise RouterError("%s %s%s: %s%s" % (method, router_url, path, exc, hint))
    return json.loads(body) if body.strip() else {}


def workers(router_url, api_key):
    listed = call(router_url, api_key, "GET", "/workers").get("workers") or []
    return [{"id": w.get("id"), "url": w.get("url"), "healthy": bool(w.get("is_healthy"))} for w in listed]


def find(listed, url):
    return next((w for w in listed if w["url"].rstrip("/") == url.rstrip("/")), None)


def wait_for(router_url, api_key, timeout, done, sleep=time.sleep, clock=time.monotonic):
    start = clock()
    while True:
        listed = workers(router_url, api_key)
        if done(listed):
            return listed, clock() - start
        if clock() - start > timeout:
            return listed, None
        sleep(0.5)


def ensure(p, check_mode=False, sleep=time.sleep, clock=time.monotonic):
    """(changed, workers, waited) for the asked state; raises RouterError when the router does not get there."""
    router, key, url = p["router_url"].rstrip("/"), p["api_key"], (p["url"] or "").rstrip("/")
    listed = workers(router, key)
    if p["state"] == "query":
        return False, listed, 0.0
    current = find(listed, url)
    if p["state"] == "absent":
        if current is None:
            return False, listed, 0.0
        if check_mode:
            return True, listed, 0.0
        call(router, key, "DELETE", "/workers/" + current["id"])
        listed, waited = wait_for(router, key, p["timeout"], lambda ws: find(ws, url) is None, sleep, clock)
        if waited is None:
            raise RouterError("the router still lists %s %ds after it was asked to remove it" % (url, p["timeout"]))
        return True, listed, waited
    changed = current is None
    if changed:
        if check_mode:
            return True, listed, 0.0
        payload = {"url": url}
        if key:
            payload["api_key"] = key
        call(router, key, "POST", "/workers", payload)
    elif current["healthy"]:
        return False, listed, 0.0
    listed, waited = wait_for(router, key, p["timeout"], lambda ws: (find(ws, url) or {}).get("healthy"),
                              sleep, clock)
    if waited is None:
        worker = find(listed, url)
        raise RouterError("%s is %s in the router %ds after it was added" % (
            url, "not healthy" if worker else "not listed", p["timeout"]))
    return changed, listed, waited


def main():
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "url": {"type": "str"},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent", "query"]},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 120},
            "router_down_ok": {"type": "bool", "default": False},
        },
        required_if=[("state", "present", ["url"]), ("state", "absent", ["url"])],
        supports_check_mode=True,
    )
    try:
        changed, listed, waited = ensure(module.params, module.check_mode)
    except RouterDown as exc:
        if not module.params["router_down_ok"]:
            module.fail_json(msg=str(exc), router_running=False)
        module.exit_json(changed=False, router_running=False, workers=[], waited=0.0)
    except (RouterError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, waited=round(waited, 1), router_running=True,
                     workers=[{"url": w["url"], "healthy": w["healthy"]} for w in listed])


if __name__ == "__main__":
    main()
