# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The flash-attn build: its key, its compile sizing, and which host builds for which key.

flash_attn_build_key
    Everything that changes the wheel a build produces, as a dict, plus a short id of it. Two
    hosts with the same id can share one wheel; a host whose id differs needs its own build.
flash_attn_max_jobs
    How many compile jobs a host can run without the OOM killer ending the build.
flash_attn_builders
    For each build key some host needs, the one host that builds its wheel.
flash_attn_is_wanted
    Whether an installed flash-attn version is the one a build key (or a prebuilt wheel) gives.
flash_attn_seed_state
    In a run over a slice of the fleet, how far the seed (in another slice) got with the wheel a
    host of this slice waits for, read from the controller's cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

from ansible.errors import AnsibleFilterError

# The fields of the key. A new field changes every id: a new wheel for everyone, on purpose.
KEY_FIELDS = ("source", "torch", "cuda", "python", "platform", "cuda_archs", "build_env")


def flash_attn_build_key(host_info, source, cuda_archs, build_env=None):
    """The build key of a host.

    host_info: the flash_attn_info module's result (torch, cuda_release, python, platform).
    source: what is built, e.g. "flash-attn==2.8.3" or "git+https://...@v2.8.3".
    cuda_archs: "120" or "90;120" (order and spacing do not matter).
    build_env: extra variables given to setup.py.
    Returns {"key": {...}, "id": 12 hex digits, "label": PEP 440 local version label}.
    """
    missing = [name for name in ("torch", "cuda_release", "python", "platform") if not host_info.get(name)]
    if missing:
        raise AnsibleFilterError("flash_attn_build_key: the host facts lack %s" % ", ".join(missing))
    archs = sorted({a.strip() for a in str(cuda_archs).replace(",", ";").split(";") if a.strip()}, key=_arch_order)
    if not archs:
        raise AnsibleFilterError("flash_attn_build_key: no CUDA architecture to build for")
    key = {
        "source": str(source),
        "torch": str(host_info["torch"]),
        "cuda": str(host_info["cuda_release"]),
        "python": str(host_info["python"]),
        "platform": str(host_info["platform"]),
        "cuda_archs": ";".join(archs),
        "build_env": {str(k): str(v) for k, v in sorted((build_env or {}).items())},
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return {"key": key, "id": digest, "label": "build." + digest}


def _arch_order(arch):
    digits = "".join(ch for ch in arch if ch.isdigit())
    return (int(digits) if digits else 0, arch)


def flash_attn_max_jobs(mem_available_mb, cpus, nvcc_threads=4, gb_per_job=9, reserve_gb=8):
    """Compile jobs for a host: bounded by its cores and by its available memory.

    Each job runs nvcc with nvcc_threads threads, and flash-attn's kernels take about gb_per_job GB
    per job at 4 threads (scaled linearly with the thread count). reserve_gb stays free for
    everything else on the host. Always at least 1.
    """
    try:
        mem_gb = float(mem_available_mb) / 1024.0
        cpus = int(cpus)
        threads = max(1, int(nvcc_threads))
        per_job = float(gb_per_job) * threads / 4.0
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("flash_attn_max_jobs: %s" % exc)
    if per_job <= 0:
        raise AnsibleFilterError("flash_attn_max_jobs: gb_per_job must be positive")
    by_cores = cpus // threads
    by_memory = int((mem_gb - float(reserve_gb)) // per_job)
    return max(1, min(by_cores, by_memory))


def flash_attn_builders(plans, preferred="", seed=""):
    """{key id: building host} for every build key that some host still needs.

    plans: one dict per host, in play order: {"host", "id", "ready", "needs"}. Hosts not ready
    (no id yet) take no part. The preferred host builds for its own key; every other key is
    built by its first host.
    seed: set in a run over a slice of the fleet, the fleet's seed, which alone builds, for its own
    key, needed here or not (the other slices wait for its wheel); nobody builds in a slice without it.
    """
    plans = [p for p in plans or [] if p.get("ready") and p.get("id")]
    if seed:
        return {p["id"]: p["host"] for p in plans if p["host"] == seed}
    needed = {p["id"] for p in plans if p.get("needs")}
    builders = {p["id"]: p["host"] for p in plans if preferred and p["host"] == preferred and p["id"] in needed}
    for plan in plans:
        if plan["id"] in needed:
            builders.setdefault(plan["id"], plan["host"])
    return builders


def flash_attn_is_wanted(installed, label, version="", exact=""):
    """True when `installed` is the wanted flash-attn.

    exact: a prebuilt wheel's version, which must match as a whole. Otherwise the local label must
    be the build key's, and the public version `version` unless it is "" (a git ref's version is
    whatever its source says).
    """
    if not installed:
        return False
    if exact:
        return installed == exact
    public, _, local = str(installed).partition("+")
    return local == label and (not version or public == version)


def seed_announcement_path(cache_dir, seed):
    """Where the seed of a sliced run says which build key it builds, and how that went."""
    return os.path.join(str(cache_dir), "seed-%s.json" % seed)


def flash_attn_seed_announcement(seed, key_id, state, now=None):
    """The seed's announcement: {"host", "id", "state" (building, built or failed), "since"}."""
    if state not in ("building", "built", "failed"):
        raise AnsibleFilterError("flash_attn_seed_announcement: state %r is not building, built or failed" % state)
    return {"host": seed, "id": key_id, "state": state, "since": int(time.time() if now is None else now)}


def flash_attn_seed_state(cache_dir, seed, key_id, run_started=0, now=None):
    """How far the seed got with the wheel of build key `key_id`: {"state", "msg"}, state one of
    ready (its key.json is in the cache: install it), waiting (the seed builds it, or has not
    reached its build yet), or a dead end that no wait mends: other_key (the seed builds another
    key), failed (its build failed), unshared (it built the wheel, but this controller's cache
    lacks it: flash_attn_cache_dir is not one store for every slice).
    run_started: when this run started; the seed's word from before then is an earlier run's, which
    the seed's slice, started with this one, has yet to replace."""
    now = time.time() if now is None else now
    if os.path.isfile(os.path.join(str(cache_dir), key_id, "key.json")):
        return {"state": "ready", "msg": "the wheel of build key %s is in %s" % (key_id, cache_dir)}
    path = seed_announcement_path(cache_dir, seed)
    try:
        with open(path) as handle:
            said = json.load(handle)
    except FileNotFoundError:
        return {"state": "waiting", "msg": "%s, the seed, has not started a build yet (%s is not there)" % (seed, path)}
    except (OSError, ValueError) as error:
        return {"state": "waiting", "msg": "%s cannot be read yet: %s" % (path, error)}
    minutes = max(0, int(now - float(said.get("since") or now)) // 60)
    if float(said.get("since") or 0) < float(run_started or 0):
        return {"state": "waiting", "msg": "%s, the seed, has not reached its flash-attn stage in this run yet (its "
                                           "last word, %d min old, is an earlier run's)" % (seed, minutes)}
    if said.get("id") != key_id:
        return {"state": "other_key",
                "msg": "%s, the seed, builds build key %s, not this host's %s: a slice builds nothing itself, so "
                       "build this key in a job that is not sliced, or give its hosts a prebuilt wheel "
                       "(flash_attn_prebuilt_wheel)" % (seed, said.get("id"), key_id)}
    if said.get("state") == "failed":
        return {"state": "failed", "msg": "the build of key %s on %s, the seed, failed %d min ago: its job's log "
                                          "says why" % (key_id, seed, minutes)}
    if said.get("state") == "built":
        return {"state": "unshared",
                "msg": "%s, the seed, built key %s %d min ago, but %s has no key.json for it: flash_attn_cache_dir "
                       "must be one store that every slice's controller sees (a shared volume)"
                       % (seed, key_id, minutes, cache_dir)}
    return {"state": "waiting", "msg": "%s, the seed, has been building key %s for %d min" % (seed, key_id, minutes)}


class FilterModule:
    def filters(self):
        return {
            "flash_attn_build_key": flash_attn_build_key,
            "flash_attn_max_jobs": flash_attn_max_jobs,
            "flash_attn_builders": flash_attn_builders,
            "flash_attn_is_wanted": flash_attn_is_wanted,
            "flash_attn_seed_announcement": flash_attn_seed_announcement,
            "flash_attn_seed_state": flash_attn_seed_state,
        }
