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
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

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


class FilterModule:
    def filters(self):
        return {"sglang_model_waves": sglang_model_waves, "sglang_model_slice_problems": sglang_model_slice_problems}
