# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet run lock: one run changes the fleet at a time.

One JSON file on the lock host (the first router host, else the first GPU host by name):

    {"run": "<run id>", "holders": [{"controller", "pid", "user", "since", "expires"}, ...]}

A run is one id shared by every ansible-playbook that belongs to it: the slices of one AWX workflow job
share the workflow job's id, so each slice joins the lock as a holder of its own and the lock is free
once the last of them has left. A second run (another id) is refused while any holder of the first is
alive, naming the run, its holders and since when. A holder is gone when its time is up (a run that died
on another controller), when it ran on this run's controller and its process is no longer there (a run
killed here, then run again), or when the operator names its run to take over. The file is replaced
atomically under an flock, so two runs that start at the same instant cannot both take it.

Times are the lock host's clock (seconds since the epoch): the file is written and read there.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time


class LockHeld(Exception):
    """Another run holds the lock: the message names it."""


def _when(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def read(path):
    """The lock as written, or None when no run holds it."""
    try:
        with open(path) as handle:
            lock = json.load(handle)
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # a half-written file cannot exist (atomic rename): a hand edit; treated as free
    if not isinstance(lock, dict) or not lock.get("holders"):
        return None
    return lock


def _write(path, lock):
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".run-lock.")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(lock, out, indent=1, sort_keys=True)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _same(holder, me):
    return holder.get("controller") == me["controller"] and holder.get("pid") == me["pid"]


def describe(lock):
    """The lock in words: who holds it and since when."""
    holders = lock.get("holders") or []
    since = min(h.get("since", 0) for h in holders)
    until = max(h.get("expires", 0) for h in holders)
    who = ", ".join("%s (pid %s on %s)" % (h.get("user", "?"), h.get("pid", "?"), h.get("controller", "?"))
                    for h in holders)
    return "run %s, held by %s since %s, until %s" % (lock.get("run"), who, _when(since), _when(until))


def live_holders(lock, me, live_pids, now, takeover=""):
    """(holders still alive, [warning for each one dropped]).

    `live_pids` are the ansible-playbook processes alive on this run's controller: a holder on the same
    controller whose pid is not among them died (killed, or its machine restarted)."""
    kept, warnings = [], []
    for holder in (lock or {}).get("holders") or []:
        if _same(holder, me):
            continue  # this process again: refreshed by the caller
        if takeover and takeover == lock.get("run"):
            warnings.append("took the fleet run lock over from %s, as fleet_run_lock_takeover asks" % describe(
                dict(lock, holders=[holder])))
        elif holder.get("expires", 0) <= now:
            warnings.append("took the fleet run lock over from a run whose time ran out: %s" % describe(
                dict(lock, holders=[holder])))
        elif holder.get("controller") == me["controller"] and holder.get("pid") not in live_pids:
            warnings.append("took the fleet run lock over from a run that died on this controller: %s" % describe(
                dict(lock, holders=[holder])))
        else:
            kept.append(holder)
    return kept, warnings


def acquire(path, run, me, ttl, live_pids, takeover="", check_mode=False, now=None):
    """Join or take the lock for `run`. Returns (changed, lock, warnings); raises LockHeld.

    `me` is {controller, pid, user}; `ttl` how many seconds the holder keeps it without a release."""
    now = time.time() if now is None else now
    with _flock(path, check_mode):
        lock = read(path)
        kept, warnings = live_holders(lock, me, live_pids, now, takeover)
        if kept and lock.get("run") != run:
            raise LockHeld("another run is changing this fleet: %s. This run (%s) changed nothing; run it "
                           "again once that one has ended, or, if it is dead on another controller, name it "
                           "in fleet_run_lock_takeover=%s" % (describe(dict(lock, holders=kept)), run, lock.get("run")))
        mine = dict(me, since=now, expires=now + int(ttl))
        for holder in (lock or {}).get("holders") or []:
            if _same(holder, me):
                mine["since"] = holder.get("since", now)
        new = {"run": run, "holders": kept + [mine]}
        if not check_mode:
            _write(path, new)
        return True, new, warnings


def release(path, run, me, check_mode=False):
    """Leave the lock; the last holder of the run removes it. Returns (changed, lock left or None)."""
    with _flock(path, check_mode):
        lock = read(path)
        if lock is None or lock.get("run") != run or not any(_same(h, me) for h in lock["holders"]):
            return False, lock
        left = [h for h in lock["holders"] if not _same(h, me)]
        if not check_mode:
            if left:
                _write(path, dict(lock, holders=left))
            else:
                os.unlink(path)
        return True, (dict(lock, holders=left) if left else None)


class _flock:
    """An exclusive flock on <path>.flock around a read-modify-write (none in check mode: it writes nothing)."""

    def __init__(self, path, check_mode):
        self.path, self.check_mode, self.handle = path + ".flock", check_mode, None

    def __enter__(self):
        if not self.check_mode:
            os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
            self.handle = open(self.path, "a")
            fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.handle:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
        return False
