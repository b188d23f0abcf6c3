#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until an sglang server has no request left to finish."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_drain
short_description: Wait, bounded, until an sglang server has no running or waiting request
description:
  - Polls the server's load (C(GET /v1/loads?include=core), the sum of running and waiting requests
    over its data-parallel ranks; C(/get_load) where the first is missing) until it reads zero
    I(settle) times in a row, or I(timeout) passes.
  - Meant for a server the router no longer sends requests to, before it restarts.
  - Never fails on the timeout; it returns C(drained=false) and the requests still in flight, so
    the caller decides. Fails when the server cannot be asked at all, unless I(unreachable_ok), and
    always when it answers but refuses the question (a key it does not take, so its requests are unknown).
  - Changes nothing.
options:
  url:
    description: Base URL of the server.
    type: str
    required: true
  api_key:
    description: Bearer token, when the server was started with C(--api-key).
    type: str
    default: ""
  api_key_file:
    description:
      - The server's C(--config) file on this host (JSON, as the server role writes it), its C(api-key) read
        here in place of I(api_key), which is the key the running server started with (a run that rotates
        the key writes the file only once the server is stopped). A file that is not there reads as no key.
    type: path
    default: ""
  timeout:
    description: Seconds to wait for the last request to finish.
    type: int
    default: 300
  settle:
    description: Consecutive zero readings that count as drained (a request the router sent just
      before the removal may still be on its way).
    type: int
    default: 2
  interval:
    description: Seconds between readings.
    type: float
    default: 0.5
  unreachable_ok:
    description: A server that does not answer has nothing in flight (it is down already).
    type: bool
    default: true
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
- name: The server's requests in flight have finished
  sglang_server_drain:
    url: http://127.0.0.1:30000
    timeout: 300
"""

RETURN = r"""
drained:
  description: Whether the server reached zero requests within I(timeout).
  returned: always
  type: bool
in_flight:
  description: Requests running or waiting at the last reading.
  returned: always
  type: int
peak:
  description: The most requests seen at one reading while waiting.
  returned: always
  type: int
waited:
  description: Seconds waited.
  returned: always
  type: float
server_unreachable:
  description:
    - True when the server could not be asked (it is down) and I(unreachable_ok) let that count as drained.
    - Not C(unreachable), which Ansible reads as the host itself being unreachable.
  returned: when the server could not be asked
  type: bool
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url


def get(url, api_key, timeout=10):
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    response = open_url(url, headers=headers, timeout=timeout, use_proxy=False)
    return json.loads(response.read().decode("utf-8", "replace"))


def in_flight(base, api_key):
    """Requests running or waiting, summed over the server's data-parallel ranks."""
    try:
        loads = get(base + "/v1/loads?include=core", api_key)
        return int(loads["aggregate"]["total_reqs"])
    except Exception as exc:
        if getattr(exc, "code", None) != 404:
            raise
    # Older servers: /get_load, a list of one dict a data-parallel rank.
    loads = get(base + "/get_load", api_key)
    return sum(int(rank.get("num_reqs", 0)) for rank in (loads if isinstance(loads, list) else [loads]))


def drain(p, sleep=time.sleep, clock=time.monotonic, read=in_flight):
    start, zeros, peak, last = clock(), 0, 0, 0
    while True:
        try:
            last = read(p["url"], p["api_key"])
        except Exception as exc:
            # An answer that refuses (401: another key) is no server that is down: its requests are unknown.
            if not p["unreachable_ok"] or getattr(exc, "code", None) is not None:
                raise
            return {"drained": True, "in_flight": 0, "peak": peak, "waited": round(clock() - start, 1),
                    "server_unreachable": True}
        peak = max(peak, last)
        zeros = zeros + 1 if last == 0 else 0
        if zeros >= p["settle"]:
            return {"drained": True, "in_flight": 0, "peak": peak, "waited": round(clock() - start, 1)}
        if clock() - start > p["timeout"]:
            return {"drained": False, "in_flight": last, "peak": peak, "waited": round(clock() - start, 1)}
        sleep(p["interval"])


def key_of(p):
    """The key to ask with: the api-key of I(api_key_file) where that is set, else I(api_key)."""
    if not p.get("api_key_file"):
        return p["api_key"]
    try:
        with open(p["api_key_file"]) as handle:
            return str(json.load(handle).get("api-key") or "")
    except FileNotFoundError:
        return ""


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "api_key_file": {"type": "path", "default": ""},
            "timeout": {"type": "int", "default": 300},
            "settle": {"type": "int", "default": 2},
            "interval": {"type": "float", "default": 0.5},
            "unreachable_ok": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = dict(module.params, url=module.params["url"].rstrip("/"))
    try:
        p["api_key"] = key_of(p)
        if p["api_key"]:
            module.no_log_values.add(p["api_key"])
        result = drain(p)
    except Exception as exc:
        module.fail_json(msg="cannot read the load of %s: %s" % (p["url"], exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
