#!/usr/bin/env python3
"""Put back into the router the workers that a dead rollout left out: the router host's drain-lease healer.

    sglang_router_healer.py --config /etc/sglang/<router service>-healer.json

Run by the router role's <router service>-healer.timer, once a period. The server stage writes a drain
lease here before it takes a worker out of the router and removes it when it puts the worker back;
a lease that has run out while its worker is still out means the run died in between (a killed
controller, a dropped SSH session). For each such lease, the worker is put back when it is fit to
serve by the router's own criteria: /health answers 200, and with the router's key /v1/models lists the
model and the known question comes back right. One line in the journal says so. It is left out, and one
line says why, when it is not fit. Never touched: a lease still running (the run may be alive), a lease
marked failed (the worker failed its gate: the operator decides) and a worker out with no lease (taken
out by hand).

The config (JSON, written by the role, no secret in it): router_url, key_file, lease_dir, model, prompt,
expect, timeout (seconds for the router to see a put-back worker healthy). The router's API and the
known-answer check are plugins/module_utils/router_api.py and the lease file plugins/module_utils/
drain_lease.py, the modules' own, which the role installs beside this file.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import drain_lease as leases  # noqa: E402
import router_api as api  # noqa: E402


def decide(lease, listed, now):
    """What a lease asks of the healer before any worker is asked anything:
    'wait' (still running), 'failed' (failed its gate, still out), 'in' (the worker is back: only the lease
    is left),
    'check' (ran out, worker out: heal it if it is fit to serve)."""
    listed_now = api.find(listed, lease["worker"]) is not None
    if lease["state"] == leases.FAILED:
        # Put back by the operator: the lease says nothing true any more.
        return "in" if listed_now else "failed"
    if not leases.expired(lease, now):
        return "wait"
    return "in" if listed_now else "check"


def heal(config, key, now=time.time, fit=api.fit_to_serve, ensure=api.ensure, log=print):
    """One pass over the lease directory. Returns {worker: outcome}; raises RouterError when the router
    cannot be read (nothing is done then)."""
    router = config["router_url"].rstrip("/")
    found = leases.read_all(config["lease_dir"])
    outcomes = {}
    if not found:
        return outcomes
    listed = api.workers(router, key)
    for path, lease in found:
        if isinstance(lease, leases.LeaseError):
            log("sglang-router-healer: %s" % lease)
            outcomes[path] = "unreadable"
            continue
        worker, t = lease["worker"], now()
        what = decide(lease, listed, t)
        who = "run %s (%s)" % (lease.get("run") or "?", lease.get("host") or "?")
        if what == "in":
            leases.remove(config["lease_dir"], worker)
            log("sglang-router-healer: %s is in the router again: removed the drain lease of %s, ended %s"
                % (worker, who, lease["until_utc"]))
        elif what == "check":
            why = fit(worker, key, config["model"], config["prompt"], config["expect"])
            if why:
                what = "refused"
                log("sglang-router-healer: left %s out: the drain lease of %s ended %s, but it is not fit to "
                    "serve: %s" % (worker, who, lease["until_utc"], why))
            else:
                try:
                    _, _, waited = ensure({"router_url": router, "url": worker, "state": "present", "api_key": key,
                                           "timeout": int(config.get("timeout", 120))})
                except api.RouterError as exc:
                    what = "refused"
                    log("sglang-router-healer: left %s out: the router did not take it back: %s" % (worker, exc))
                else:
                    # Only a worker that went back gets its lease removed: until then, the next pass retries.
                    leases.remove(config["lease_dir"], worker)
                    what = "healed"
                    log("sglang-router-healer: put %s back into the router (healthy there in %.1fs): the drain "
                        "lease of %s ended %s and it answers /health and the known answer"
                        % (worker, waited, who, lease["until_utc"]))
        outcomes[worker] = what
    return outcomes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    with open(args.config) as handle:
        config = json.load(handle)
    key = ""
    if config.get("key_file"):
        key = api.read_key(config["key_file"])
    try:
        heal(config, key)
    except api.RouterError as exc:
        print("sglang-router-healer: the router's workers cannot be read, nothing done: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
