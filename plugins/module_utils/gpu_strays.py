# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stray GPU processes of a stopped server: found through nvidia-smi and the unit's cgroup, then ended.

sglang's scheduler and detokenizer processes can outlive their server's stop and keep the GPU memory they
hold (sglang #23627, #15165); a server started on such GPUs fails late, or is OOM-killed. Before a server
starts, every compute process of the service user on the host's GPUs, and every process left in the
server unit's cgroup, is a stray: sent SIGTERM, then SIGKILL after a timeout, each named. Another user's
compute process is named and left alone (it is not ours to end); one nvidia-smi lists that this host's
/proc does not show (a process of another PID namespace) is named and left too.
"""
from __future__ import annotations

import os
import pwd
import signal
import time

# One row per (process, GPU): a process on eight GPUs is eight rows.
COMPUTE_APPS_QUERY = ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits"]


def compute_apps(text):
    """nvidia-smi's compute apps (COMPUTE_APPS_QUERY's output), one entry per process, in the order first
    listed: {pid, name, gpus: [uuid...], used_mib (None where nvidia-smi says [N/A])}. A process name may
    hold commas: the pid is the first field, memory and GPU the last two."""
    apps = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            pid, rest = line.split(",", 1)
            name, used, uuid = rest.rsplit(",", 2)
            pid = int(pid)
        except ValueError:
            raise ValueError("nvidia-smi printed a compute-apps line that is not pid, name, memory, GPU: %r" % line)
        used = used.strip()
        app = apps.setdefault(pid, {"pid": pid, "name": name.strip(), "gpus": [], "used_mib": None})
        app["gpus"].append(uuid.strip())
        if used.isdigit():
            app["used_mib"] = (app["used_mib"] or 0) + int(used)
    return list(apps.values())


def process(pid, proc="/proc"):
    """What this host's /proc says of `pid`: {pid, uid, user, state, start, cmdline}, or None when it shows no
    such process (it ended, or it lives in another PID namespace). `start` (clock ticks after boot) tells a
    process from a later one that reuses its pid."""
    base = os.path.join(proc, str(pid))
    try:
        with open(os.path.join(base, "status")) as handle:
            status = dict(line.split(":", 1) for line in handle if ":" in line)
        with open(os.path.join(base, "stat")) as handle:
            start = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open(os.path.join(base, "cmdline"), "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None
    uid = int(status["Uid"].split()[0])
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return {"pid": pid, "uid": uid, "user": user, "state": status.get("State", "?").split()[0],
            "start": start, "cmdline": cmdline or "[%s]" % status.get("Name", "?").strip()}


def unit_processes(control_group, proc="/proc"):
    """The pids in a unit's cgroup or below it (`systemctl show -p ControlGroup`), read from each process's
    /proc/<pid>/cgroup: the path systemd names, whatever the host mounts where (cgroup v2, v1's name=systemd,
    a container's view). A unit with no ControlGroup has none: systemd removes a unit's cgroup only once it
    is empty."""
    if not control_group:
        return []
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "cgroup")) as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines:
            hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
            if ((hierarchy == "0" and controllers == "") or controllers == "name=systemd") and (
                    path == control_group or path.startswith(control_group + "/")):
                found.append(int(entry))
                break
    return sorted(found)


def classify(apps, uid, left_in_unit, unit_pids=(), proc="/proc"):
    """Splits what was found into strays (to end), foreign (another user's GPU process) and hidden (a GPU
    process this /proc does not show). `left_in_unit`: pids still in the stopped unit's cgroup, strays
    whoever owns them. `unit_pids`: the pids of a unit that still runs (check mode, where the stop did not
    happen): the server itself, never a stray."""
    strays, foreign, hidden, seen = [], [], [], set()
    for app in apps:
        if app["pid"] in unit_pids:
            continue
        seen.add(app["pid"])
        found = process(app["pid"], proc)
        if found is None:
            hidden.append(dict(app))
        elif found["uid"] == uid or app["pid"] in left_in_unit:
            strays.append(dict(app, **found, found_in="gpu" + (" and unit cgroup" if app["pid"] in left_in_unit else "")))
        else:
            foreign.append(dict(app, **found))
    for pid in left_in_unit:
        if pid in seen or pid in unit_pids:
            continue
        found = process(pid, proc)
        if found is not None:
            strays.append(dict(found, name=found["cmdline"].split(" ", 1)[0], gpus=[], used_mib=None,
                               found_in="unit cgroup"))
    return strays, foreign, hidden


def alive(stray, proc="/proc"):
    """Whether the stray still runs: the same process (its start time) and not a zombie."""
    now = process(stray["pid"], proc)
    return now is not None and now["start"] == stray["start"] and now["state"] != "Z"


def describe(app):
    """'pid 4242 sglang::scheduler_TP0 (sglang, 81920 MiB on 8 GPUs)'."""
    where = ("%s MiB on %d GPU%s" % (app["used_mib"] if app.get("used_mib") is not None else "?", len(app["gpus"]),
                                      "" if len(app["gpus"]) == 1 else "s")) if app.get("gpus") else "no GPU memory"
    owner = app.get("user")
    return "pid %d %s (%s%s)" % (app["pid"], app.get("name") or app.get("cmdline") or "?",
                                 owner + ", " if owner else "", where)


def end(strays, term_timeout, kill_timeout, proc="/proc", kill=os.kill, sleep=time.sleep, clock=time.monotonic,
        progress=None):
    """SIGTERM to every stray, SIGKILL to those still running after `term_timeout` seconds; each stray gets
    `ended_by` (SIGTERM, SIGKILL or 'itself', when it ended before its signal). Returns the strays still
    running `kill_timeout` seconds after the SIGKILL (a process stuck in the driver, state D, ends only with
    a GPU reset or a reboot)."""
    def send(stray, sig, name):
        if not alive(stray, proc):
            stray.setdefault("ended_by", "itself")
            return
        try:
            kill(stray["pid"], sig)
            stray["ended_by"] = name
        except ProcessLookupError:
            stray.setdefault("ended_by", "itself")

    def wait(timeout, what):
        deadline, said = clock() + timeout, clock()
        while True:
            running = [s for s in strays if alive(s, proc)]
            if not running or clock() >= deadline:
                return running
            if progress and clock() - said >= 5:
                progress("%d stray(s) still running %s: %s" % (len(running), what, ", ".join(
                    str(s["pid"]) for s in running)))
                said = clock()
            sleep(0.2)

    for stray in strays:
        send(stray, signal.SIGTERM, "SIGTERM")
    running = wait(term_timeout, "after SIGTERM")
    for stray in running:
        send(stray, signal.SIGKILL, "SIGKILL")
    return wait(kill_timeout, "after SIGKILL") if running else []
