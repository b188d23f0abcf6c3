# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who copies a model from whom: once from the source, then host to host in a widening tree.

sglang_model_waves
    The copy rounds for one model. A round maps each host that copies in it to where it copies
    from: "origin" (the Hub, a mirror, or shared storage) or a host that already holds a verified
    copy. Every host that finishes a round serves the next ones, each serving at most `fanout`
    copies at a time, so a fleet of N needs about log(N)/log(fanout + 1) rounds and the origin
    sends the model once.
sglang_model_slice_problems
    In a run over a slice of the fleet, why it must not fetch a model: only the fleet's seed fetches
    from the source, once for every slice.
sglang_model_problems
    Why the model list or the stage's settings cannot work, before any job starts.
sglang_model_manifest_file, sglang_model_known_manifests
    Where the controller keeps a model's manifest, and the manifests it holds for the model list.
sglang_model_unsettled, sglang_model_settled_report
    After the stage's first, quick check of every model on every host: the models that need the
    stage's whole work (a host lacks a verified copy, or no quick check could run), and each host's
    report lines for the others, as the whole work would have written them.
"""
from __future__ import annotations

import json
import os
import re

from ansible.errors import AnsibleFilterError

COMMIT = re.compile(r"^[0-9a-f]{40}$")

ORIGIN = "origin"


def sglang_model_waves(needy, complete=(), mode="fleet", fanout=2, seed=""):
    """seed: the host that fetches from the source when no host holds a copy (else the first needy one)."""
    needy, complete = list(needy), [h for h in complete if h not in needy]
    if seed in needy:
        needy.remove(seed)
        needy.insert(0, seed)
    if mode not in ("fleet", "per_host"):
        raise AnsibleFilterError("sglang_model_waves: mode must be fleet or per_host, not %r" % (mode,))
    if int(fanout) < 1:
        raise AnsibleFilterError("sglang_model_waves: fanout must be at least 1, not %r" % (fanout,))
    if not needy:
        return []
    if mode == "per_host":
        return [{host: ORIGIN for host in needy}]
    waves, sources, left = [], list(complete), list(needy)
    if not sources:
        seed = left.pop(0)
        waves.append({seed: ORIGIN})
        sources.append(seed)
    served = {source: 0 for source in sources}
    while left:
        wave = {}
        # One copy per source, then a second, ...: the sources that served least (the newest) first.
        for _ in range(int(fanout)):
            for source in sorted(sources, key=lambda s: (served[s], -sources.index(s))):
                if left:
                    wave[left.pop(0)] = source
                    served[source] += 1
        waves.append(wave)
        sources.extend(wave)
        served.update({host: 0 for host in wave})
    return waves


def sglang_model_slice_problems(fleet_slice, model, manifest_known, waves=None, mode="fleet"):
    """Why this run must not fetch `model` (a sglang_model_models entry): [] unless it is a slice of
    the fleet (fleet_slice, the fleet layer's) that would fetch it from the source on a host other than
    the seed, which makes the fleet's one fetch. Before the check: a slice without the seed and
    without the seed's manifest; after it, `waves`: a round that takes the model from the source for
    any host but the seed (a slice with no verified copy to spread). per_host asks every host to fetch
    from the source: nothing to refuse."""
    if not fleet_slice.get("sliced") or mode != "fleet":
        return []
    name = "%s@%s" % (model.get("repo_id"), str(model.get("revision"))[:12])
    seed, advice = fleet_slice.get("seed"), ("fetch it once for the fleet in a job that is not sliced (the AWX "
                                             "workflow's prepare job), then roll out in slices")
    if waves is None:
        if manifest_known or fleet_slice.get("seed_here"):
            return []
        return ["%s: this slice has no manifest of it yet, and only %s, the seed, in another slice, fetches it from "
                "the source: %s" % (name, seed, advice)]
    fetching = [host for wave in waves for host, source in wave.items() if source == ORIGIN and host != seed]
    if not fetching:
        return []
    return ["%s: this slice holds no verified copy to copy from, so %s would fetch it from the source again (only "
            "%s, the seed, does, once for the fleet): %s" % (name, ", ".join(fetching), seed, advice)]


def sglang_model_problems(models, default_source="hub", fetch_timeout_hours=1, progress_interval=1):
    """Why sglang_model_models (or the long steps' settings) cannot work: [] when they can."""
    problems = []
    for model in models:
        repo = model.get("repo_id")
        if not COMMIT.match(str(model.get("revision", ""))):
            problems.append("%s: revision %s is not a commit id (40 hex digits); pin the commit you validated"
                            % (repo, json.dumps(model.get("revision"))))
        if not str(model.get("dir", "")).startswith("/"):
            problems.append("%s: dir %s is not an absolute path" % (repo, model.get("dir")))
        if model.get("source", default_source) == "path" and not model.get("source_dir"):
            problems.append("%s: source path needs source_dir" % repo)
    if len({model.get("dir") for model in models}) != len(models):
        problems.append("two models share one dir")
    # The watch of a background step divides the one by the other.
    if float(fetch_timeout_hours) <= 0 or float(progress_interval) <= 0:
        problems.append("sglang_model_fetch_timeout_hours (%s) and sglang_model_progress_interval (%s) must be "
                        "positive" % (fetch_timeout_hours, progress_interval))
    return problems


def sglang_model_manifest_file(model, manifest_dir):
    """The controller's manifest of one model at its revision: <dir>/<owner>--<name>@<revision>.json."""
    return "%s/%s@%s.json" % (manifest_dir, model["repo_id"].replace("/", "--"), model["revision"])


def sglang_model_known_manifests(models, manifest_dir):
    """{repo_id: manifest} for each model whose manifest the controller holds (filters run there)."""
    known = {}
    for model in models:
        path = sglang_model_manifest_file(model, manifest_dir)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                known[model["repo_id"]] = json.load(handle)
    return known


def _quick_results(checks):
    """{repo_id: result} of one host's quick check (a registered loop); a skipped item is absent."""
    found = {}
    for result in (checks or {}).get("results") or []:
        model = result.get("item") or {}
        if not result.get("skipped") and not result.get("failed") and "state" in result:
            found[model.get("repo_id")] = result
    return found


def sglang_model_unsettled(models, checks):
    """The models some host of the play has no verified copy of, by the quick check (checks: each
    host's registered result, {} for a host that did not run it): the ones the stage's whole work takes."""
    by_host = [_quick_results(check) for check in checks]
    return [model for model in models
            if not by_host or any(found.get(model["repo_id"], {}).get("state") != "verified" for found in by_host)]


def sglang_model_settled_report(checks, models, unsettled):
    """This host's report lines for the models the quick check settled, in the model list's order:
    verified, nothing fetched, no problem (the whole work's lines for a host that holds a verified copy)."""
    found, pending = _quick_results(checks), {model["repo_id"] for model in unsettled}
    return [{"repo_id": model["repo_id"], "revision": model["revision"], "dir": model["dir"], "state": "verified",
             "from": "", "problems": {}, "fetched_bytes": 0, "hashed_bytes": found[model["repo_id"]]["hashed_bytes"]}
            for model in models if model["repo_id"] not in pending]


class FilterModule:
    def filters(self):
        return {"sglang_model_waves": sglang_model_waves, "sglang_model_slice_problems": sglang_model_slice_problems,
                "sglang_model_problems": sglang_model_problems,
                "sglang_model_manifest_file": sglang_model_manifest_file,
                "sglang_model_known_manifests": sglang_model_known_manifests,
                "sglang_model_unsettled": sglang_model_unsettled,
                "sglang_model_settled_report": sglang_model_settled_report}
