#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restart a router with its new connections held, not refused."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_restart
short_description: Restart sglang-router without refusing a client
description:
  - sglang-router binds its own socket, so between the old router's exit and the new one's bind a client's
    connect is refused. This restart holds new connections instead (C(ansible.module_utils.router_hold)); an
    nftables rule drops each new connection's first packet to the router's port, the client's TCP stack sends
    it again, and the retry after the hold meets the new router. Open connections are left to the old
    router's graceful shutdown (SIGTERM), which finishes the requests they carry.
  - The hold ends when the new router lists healthy every worker the old one counted healthy (its Prometheus
    metrics, read before the stop, which need no key; a key rotation has changed the key already), asked
    through the hold; at the latest after I(hold_seconds), when the kernel ends it by itself (a timeout on
    the rule's set element), whatever becomes of this run.
  - A router that does not run is started, with nothing to hold. With I(hold_seconds) 0 it is a plain
    C(systemctl restart).
options:
  service:
    description: The router's systemd unit, without C(.service).
    type: str
    required: true
  router_url:
    description: The router's API as called on its host; its port is the one held.
    type: str
    required: true
  metrics_url:
    description: The router's Prometheus exporter as called on its host, for the workers it counts healthy.
    type: str
    default: ""
  api_key:
    description: The key the new router runs with, for its worker list.
    type: str
    default: ""
  hold_seconds:
    description: The longest new connections are held; 0 holds none.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: It says it would restart, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The router restarts, its new connections held meanwhile
  sglang_router_restart:
    service: sglang-router
    router_url: http://127.0.0.1:30090
    metrics_url: http://127.0.0.1:29000
    api_key: "{{ sglang_router_api_key }}"
    hold_seconds: 60
  no_log: true
"""

RETURN = r"""
held:
  description: Whether new connections were held.
  returned: always
  type: bool
held_seconds:
  description: How long they were held.
  returned: always
  type: float
in_flight:
  description: Connections open to the router when it was stopped (its graceful shutdown finishes them).
  returned: always
  type: int
workers:
  description: The workers the old router counted healthy, which the new one lists healthy before the hold ends.
  returned: always
  type: list
  elements: str
ready:
  description: Whether the new router listed them before the hold's end; false, the hold ran out (the router's
    gate, after this, waits for it and says what is missing).
  returned: always
  type: bool
msg:
  description: What happened, in one line.
  returned: always
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.router_hold import (healthy_in_metrics, get, hold, port_of, release, ruleset, sockets,
                                              workers)


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def tcp_tables():
    return [read("/proc/net/tcp"), read("/proc/net/tcp6")]


def main():
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "router_url": {"type": "str", "required": True},
            "metrics_url": {"type": "str", "default": ""},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "hold_seconds": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    unit = p["service"] + ".service"
    systemctl = module.get_bin_path("systemctl", required=True)
    done = {"held": False, "held_seconds": 0.0, "in_flight": 0, "workers": [], "ready": True}
    if p["hold_seconds"] < 0:
        module.fail_json(msg="hold_seconds is %d: 0 or more" % p["hold_seconds"], **done)
    active = module.run_command([systemctl, "is-active", "--quiet", unit])[0] == 0
    if module.check_mode:
        module.exit_json(changed=True, msg="%s would %s" % (unit, "restart" if active else "start"), **done)
    nft = module.get_bin_path("nft") if p["hold_seconds"] and active else None
    if p["hold_seconds"] and active and not nft:
        module.fail_json(msg="nft is not on this host: install nftables (the router role does on Debian and Ubuntu), "
                             "or set sglang_router_restart_hold_seconds: 0, and clients are refused for the "
                             "time of each router restart", **done)

    if not nft:
        rc, out, err = module.run_command([systemctl, "restart" if active else "start", unit])
        if rc != 0:
            module.fail_json(msg="systemctl %s %s: %s" % ("restart" if active else "start", unit,
                                                          (err or out).strip()), **done)
        module.exit_json(changed=True, msg="%s %s (no hold)" % (unit, "restarted" if active else "started"), **done)

    before = set()
    if p["metrics_url"]:
        try:
            before = healthy_in_metrics(get(p["metrics_url"].rstrip("/") + "/metrics"))
        except Exception:  # an exporter that does not answer: the new router's API answering is the sign
            before = set()
    done["workers"] = sorted(before)
    port = port_of(p["router_url"])
    rc, out, err = module.run_command([nft, "-f", "-"], data=ruleset() + hold(port, p["hold_seconds"]),
                                      binary_data=True)
    if rc != 0:
        module.fail_json(msg="nft could not hold new connections to port %d: %s" % (port, (err or out).strip()), **done)
    start = time.monotonic()
    deadline = start + p["hold_seconds"] - 1
    restarted, last = None, ""
    try:
        done["held"] = True
        done["in_flight"] = sockets(tcp_tables(), port, "01")
        restarted = module.run_command([systemctl, "restart", unit])
        if restarted[0] == 0:
            ready = False
            while not ready and time.monotonic() < deadline:
                time.sleep(0.2)
                if sockets(tcp_tables(), port, "0A") == 0:
                    continue
                try:
                    ready = before <= workers(p["router_url"], p["api_key"], timeout=2)
                except Exception as exc:  # not answering yet, or still loading its workers
                    last = str(exc)
            done["ready"] = ready
    finally:
        module.run_command([nft, "-f", "-"], data=release(port), binary_data=True)  # ran out: gone already
        done["held_seconds"] = round(time.monotonic() - start, 2)
    if restarted[0] != 0:
        module.fail_json(msg="systemctl restart %s: %s" % (unit, (restarted[2] or restarted[1]).strip()), **done)
    if done["ready"]:
        message = ("%s restarted; new connections held %.1f s (%d open at the stop, finished by the old router), "
                   "until it listed its %d healthy worker(s) again" % (unit, done["held_seconds"], done["in_flight"],
                                                                      len(before)))
    else:
        message = ("%s restarted; new connections held %.1f s, the longest asked, before it listed %s healthy%s"
                   % (unit, done["held_seconds"], ", ".join(sorted(before)) or "its workers",
                      ": %s" % last if last else ""))
        module.warn(message)
    module.exit_json(changed=True, msg=message, **done)


if __name__ == "__main__":
    main()
