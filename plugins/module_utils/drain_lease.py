# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drain leases: the server stage's note, on a router's host, that a run took a worker out and until when.

One JSON file per worker in the router's lease directory. The server stage writes it just before it
takes the worker out (sglang_router_worker state=absent) and removes it once the worker is back in
(state=present); a worker that fails its gate has its lease marked failed (sglang_drain_lease). A
lease whose time is up while its worker is still out is what a run that died left behind: the
router host's healer (roles/sglang_router/files/sglang_router_healer.py) puts that worker back once
it is fit to serve. A worker out with no lease was taken out by hand, and is nobody's business here.

Times are the router host's own clock (seconds since the epoch): the file is written and read there.
Standard library only: the healer imports the copy the router role installs beside it.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time

DRAINING = "draining"   # a run has the worker out for its restart
FAILED = "failed"       # the worker failed its gate: it stays out until the operator decides
STATES = (DRAINING, FAILED)


class LeaseError(Exception):
    pass


def lease_seconds(drain_timeout, start_timeout, gate_timeout):
    """How long a run may keep a worker out: the longest the stage itself waits for each step.

    The drain (requests in flight finish), the restart (systemd's start timeout) and the health gate,
    each from the stage's own settings. A run still alive past that has failed one of those waits."""
    parts = {"drain timeout": drain_timeout, "start timeout": start_timeout, "gate timeout": gate_timeout}
    total = 0
    for name, value in parts.items():
        try:
            seconds = int(value)
        except (TypeError, ValueError):
            raise LeaseError("the %s must be a whole number of seconds, not %r" % (name, value))
        if seconds < 0 or str(value).strip() != str(seconds):
            raise LeaseError("the %s must be a whole number of seconds >= 0, not %r" % (name, value))
        total += seconds
    if total <= 0:
        raise LeaseError("a lease of %d seconds would end before the worker is out" % total)
    return total


def file_name(worker_url):
    """The lease's file name for a worker: its URL with every character but [A-Za-z0-9.-] as '_'."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", worker_url.rstrip("/")) + ".json"


def path_for(lease_dir, worker_url):
    return os.path.join(lease_dir, file_name(worker_url))


def utc(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def new(worker_url, run, host, seconds, now):
    """A lease of `seconds` from `now` on worker_url, taken by `run` for inventory host `host`."""
    until = now + seconds
    return {"worker": worker_url.rstrip("/"), "run": run, "host": host, "state": DRAINING, "seconds": int(seconds),
            "since": round(now, 3), "until": round(until, 3), "until_utc": utc(until)}


def expired(lease, now):
    return float(lease["until"]) <= now


def read(lease_dir, worker_url):
    """The worker's lease, or None. A file that does not parse raises LeaseError (never taken for no lease)."""
    path = path_for(lease_dir, worker_url)
    try:
        with open(path) as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    return parse(text, path)


def parse(text, path):
    try:
        lease = json.loads(text)
        if lease["state"] not in STATES:
            raise ValueError("state %r" % lease["state"])
        float(lease["until"])
        lease["worker"]  # noqa: B018 (it must be there)
    except (ValueError, KeyError, TypeError) as exc:
        raise LeaseError("%s is no drain lease: %s" % (path, exc))
    return lease


def read_all(lease_dir):
    """[(path, lease or LeaseError)] of every lease in lease_dir, by file name; [] when it does not exist."""
    try:
        names = sorted(n for n in os.listdir(lease_dir) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        path = os.path.join(lease_dir, name)
        try:
            with open(path) as handle:
                found.append((path, parse(handle.read(), path)))
        except FileNotFoundError:  # removed meanwhile (the stage put it back)
            continue
        except LeaseError as exc:
            found.append((path, exc))
    return found


def write(lease_dir, lease, mode=0o644):
    """Writes the lease at once (a reader sees the old file or the new one, never half of one). World-readable:
    it holds no secret, and the healer reads it as the router's user."""
    if not os.path.isdir(lease_dir):
        os.makedirs(lease_dir, mode=0o750)
    path = path_for(lease_dir, lease["worker"])
    fd, tmp = tempfile.mkstemp(dir=lease_dir, prefix=".lease-")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(lease, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def remove(lease_dir, worker_url):
    """True when there was a lease to remove."""
    try:
        os.unlink(path_for(lease_dir, worker_url))
    except FileNotFoundError:
        return False
    return True


def describe(lease, now):
    """'out under the drain lease of run R (host H) until T' with what happens at its end, for people."""
    until = lease.get("until_utc") or utc(float(lease["until"]))
    who = "run %s (%s)" % (lease.get("run") or "?", lease.get("host") or "?")
    if lease["state"] == FAILED:
        return "out: failed its gate in %s; lease until %s, not healed (the operator decides)" % (who, until)
    if expired(lease, now):
        return ("out under the drain lease of %s, ended %s (%ds ago): the router host's healer puts it back "
                "once it is fit to serve" % (who, until, int(now - float(lease["until"]))))
    return "out under the drain lease of %s until %s (%ds from now)" % (who, until, int(float(lease["until"]) - now))
