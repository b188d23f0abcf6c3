# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The quality gate: whether what a host serves now answers as well as, and as fast as, the fleet's baseline.

The canary (the rollout's first unit, restarted alone) runs the eval (roles/sglang_quality/files/quality_eval.py)
and passes only when its accuracy is at least the floor and no measure is worse than the baseline by more
than that measure's tolerance. The baseline is a record per model and install, kept on the fleet's lock host;
the model's current baseline is the install that last passed (a canary, or --tags quality over the fleet).

What the model answers (accuracy) and how well its drafter guesses (accept length) are the same on every
host; how fast it answers is not (a host whose GPUs run hotter, a slower PCIe link). The speeds are therefore
compared with the same host's own last passing eval, what the canary replaces there, and not gated on a host
that has none yet (--tags quality gives every host one). The role runs these functions; tools/fleet.py says
their rows in words.
"""
from __future__ import annotations

import statistics

# Every measure the gate compares: which way is better, how its tolerance is counted, and its unit.
# accuracy: absolute points (a slice of a few hundred questions moves by whole points between runs of
# different hardware, never by a percentage of itself); the speeds: a percentage of the baseline.
# scope: "model" measures are compared with the model's baseline, "host" ones with the same host's.
MEASURES = {
    "accuracy": {"better": "higher", "tolerance": "points", "unit": "%", "scope": "model"},
    "decode_tok_s": {"better": "higher", "tolerance": "percent", "unit": "tok/s", "scope": "host"},
    "ttft_ms": {"better": "lower", "tolerance": "percent", "unit": "ms", "scope": "host"},
    "itl_ms": {"better": "lower", "tolerance": "percent", "unit": "ms", "scope": "host"},
    "accept_length": {"better": "higher", "tolerance": "percent", "unit": "", "scope": "model"},
}
# What the report shows beside them, never gated, with their units: how long the eval took, one stream's speed.
SHOWN = {"eval_seconds": "s", "single_stream_tok_s": "tok/s"}


def _number(value):
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


def _limit(measure, baseline, tolerance):
    spec = MEASURES[measure]
    if spec["tolerance"] == "points":
        step = tolerance / 100.0
    else:
        step = abs(baseline) * tolerance / 100.0
    return baseline - step if spec["better"] == "higher" else baseline + step


def verdict(measures, baseline=None, min_accuracy=0.0, tolerances=None, host_baseline=None):
    """{passed, rows, failures} for one eval's `measures` against the model's `baseline` record and this host's
    own last passing eval, `host_baseline` (either None: none yet, so what it holds is not compared; the
    accuracy floor always applies). Each row: measure, baseline, canary, limit, ok, against ("model", "host"
    or None). A measure the canary lacks fails where its baseline has it (the drafter that reported an accept
    length is gone); one that neither has (EAGLE-3 off on both) is not compared."""
    tolerances = tolerances or {}
    against = {"model": (baseline or {}).get("measures") or {}, "host": (host_baseline or {}).get("measures") or {}}
    rows, failures = [], []
    accuracy = _number(measures.get("accuracy"))
    floor = float(min_accuracy)
    rows.append({"measure": "accuracy floor", "baseline": None, "canary": accuracy, "limit": floor,
                 "ok": accuracy is not None and accuracy >= floor, "against": None})
    if not rows[-1]["ok"]:
        failures.append("accuracy %s is below sglang_quality_min_accuracy %.1f%%"
                        % ("missing" if accuracy is None else "%.1f%%" % (accuracy * 100), floor * 100))
    for measure, spec in MEASURES.items():
        base, now = _number(against[spec["scope"]].get(measure)), _number(measures.get(measure))
        if base is None:
            if now is not None:
                rows.append({"measure": measure, "baseline": None, "canary": now, "limit": None, "ok": True,
                             "against": None})
            continue
        if measure not in tolerances:
            raise ValueError("no tolerance for %s in sglang_quality_tolerances" % measure)
        limit = _limit(measure, base, float(tolerances[measure]))
        ok = now is not None and (now >= limit if spec["better"] == "higher" else now <= limit)
        rows.append({"measure": measure, "baseline": base, "canary": now, "limit": round(limit, 4), "ok": ok,
                     "against": spec["scope"]})
        if not ok:
            failures.append(_failure(measure, base, now, limit, tolerances[measure]))
    for measure in SHOWN:
        base, now = _number(against["host"].get(measure)), _number(measures.get(measure))
        if base is not None or now is not None:
            rows.append({"measure": measure, "baseline": base, "canary": now, "limit": None, "ok": None,
                         "against": "host" if base is not None else None})
    return {"passed": not failures, "rows": rows, "failures": failures,
            "baseline_install": (baseline or {}).get("install"), "baseline_recorded": (baseline or {}).get("recorded"),
            "host_baseline_install": (host_baseline or {}).get("install"),
            "host_baseline_recorded": (host_baseline or {}).get("recorded")}


def _failure(measure, base, now, limit, tolerance):
    spec = MEASURES[measure]
    whose = "the model's baseline" if spec["scope"] == "model" else "this host's last eval"
    if now is None:
        return "%s: %s has %s, this install reports none" % (measure, whose, shown(measure, base))
    how = "points" if spec["tolerance"] == "points" else "%"
    return "%s %s is worse than %s, %s, by more than %s %s (limit %s)" % (
        measure, shown(measure, now), whose, shown(measure, base), tolerance, how, shown(measure, limit))


def shown(measure, value):
    """A measure's value as the report prints it."""
    if value is None:
        return "-"
    if measure in ("accuracy", "accuracy floor"):
        return "%.1f%%" % (value * 100)
    unit = MEASURES[measure]["unit"] if measure in MEASURES else SHOWN.get(measure, "")
    return ("%.2f" % value if abs(value) < 10 else "%.1f" % value) + (" " + unit if unit else "")


def fleet_measures(results):
    """The fleet's measures from each serving host's eval: the median of each measure over the hosts
    that report it (one slow or unlucky host neither sets nor spoils the baseline)."""
    merged = {}
    for measure in list(MEASURES) + list(SHOWN):
        values = [_number(r.get(measure)) for r in results if _number(r.get(measure)) is not None]
        merged[measure] = round(statistics.median(values), 4) if values else None
    return merged


def baseline_of(store, model):
    """The model's current baseline record in the store, or None."""
    store = store or {}
    install = (store.get("current") or {}).get(model)
    return ((store.get("models") or {}).get(model) or {}).get(install) if install else None


def host_baseline_of(store, model, host):
    """`host`'s own last passing eval of the model (any install: what a canary there replaces), or None."""
    return (((store or {}).get("hosts") or {}).get(model) or {}).get(host)


def baseline_record(store, model, install, per_host, recorded, source, keep=5):
    """The store with `install`'s record for the model made current: the median of `per_host`
    ({host: measures}), and each of those hosts' own last eval. Older installs' records stay (the report and
    a rollback can show them), the newest `keep` of them."""
    store = dict(store or {})
    models = {m: dict(records) for m, records in (store.get("models") or {}).items()}
    records = models.setdefault(model, {})
    records[install] = {"install": install, "measures": fleet_measures(list(per_host.values())),
                        "hosts": sorted(per_host), "recorded": recorded, "source": source}
    for old in sorted(records, key=lambda i: records[i].get("recorded") or "")[:-int(keep)]:
        if old != install:
            del records[old]
    hosts = {m: dict(by_host) for m, by_host in (store.get("hosts") or {}).items()}
    for host, measures in per_host.items():
        hosts.setdefault(model, {})[host] = {"install": install, "measures": dict(measures), "recorded": recorded}
    current = dict(store.get("current") or {})
    current[model] = install
    return {"models": models, "current": current, "hosts": hosts}


def baseline_refresh(store, model, results, recorded):
    """The store after --tags quality measured the serving fleet: `results` is each host's
    {host, install, measures}. Each install's record is the median of its hosts; the install most hosts
    serve becomes current (a fleet caught mid-rollout keeps both records); every host keeps its own."""
    by_install = {}
    for result in results or []:
        by_install.setdefault(result["install"], {})[result["host"]] = result["measures"]
    # Fewest hosts first: the last record written is the current one.
    for install, per_host in sorted(by_install.items(), key=lambda item: (len(item[1]), item[0])):
        store = baseline_record(store, model, install, per_host, recorded, "quality")
    return store


class FilterModule:
    def filters(self):
        return {"sglang_quality_verdict": verdict, "sglang_quality_fleet_measures": fleet_measures,
                "sglang_quality_baseline_of": baseline_of, "sglang_quality_host_baseline_of": host_baseline_of,
                "sglang_quality_baseline_record": baseline_record,
                "sglang_quality_baseline_refresh": baseline_refresh}
