# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who copies a model from whom: once from the source, then host to host in a widening tree.

sglang_model_waves
    The copy rounds for one model. A round maps each host that copies in it to where it copies
    from: "origin" (the Hub, a mirror, or shared storage) or a host that already holds a verified
    copy. Every host that finishes a round serves the next ones, each serving at most `fanout`
    copies at a time, so a fleet of N needs about log(N)/log(fanout + 1) rounds and the origin
    sends the model once.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

ORIGIN = "origin"


def sglang_model_waves(needy, complete=(), mode="fleet", fanout=2):
    needy, complete = list(needy), [h for h in complete if h not in needy]
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


class FilterModule:
    def filters(self):
        return {"sglang_model_waves": sglang_model_waves}
