# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bench's fusion A/B: EAGLE-3 with allreduce fusion against EAGLE-3 without it, per concurrency.

The target model verifies every draft, so a drafter fed wrong hidden states (sglang 0.5.9's capture
under fusion at tp > 1) keeps every token right and shows only as a lower accept length: this is
where that shows. The role sets the flags as a host fact (the fleet report), tools/bench_report.py
puts the rows in the benchmark report; both call this.
"""
from __future__ import annotations

# The bench's variants: EAGLE-3 off, EAGLE-3 as configured, EAGLE-3 with fusion toggled.
EAGLE3_VARIANTS = ("eagle3", "eagle3-fusion-ab")


def _fused(result):
    return (result["bench_serving"].get("server_info") or {}).get("enable_flashinfer_allreduce_fusion")


def _value(result, key):
    return result["bench_serving"].get(key)


def fusion_ab(results, tolerance_percent=5.0):
    """[{concurrency, fused_*, unfused_*, accept_drop_percent, tolerance_percent, flagged}] from the
    host's results as the role records them: variant, concurrency, bench_serving's line (its server_info)."""
    tolerance = float(tolerance_percent)
    by_key = {}
    for r in results:
        if r.get("variant") in EAGLE3_VARIANTS and _fused(r) is not None:
            by_key[(int(r["concurrency"]), bool(_fused(r)))] = r
    rows = []
    for concurrency in sorted({c for c, _ in by_key}):
        fused, unfused = by_key.get((concurrency, True)), by_key.get((concurrency, False))
        if not (fused and unfused):
            continue
        fused_accept, unfused_accept = _value(fused, "accept_length"), _value(unfused, "accept_length")
        drop = (round(100.0 * (unfused_accept - fused_accept) / unfused_accept, 1)
                if fused_accept is not None and unfused_accept else None)
        rows.append({"concurrency": concurrency,
                     "fused_accept_length": fused_accept, "unfused_accept_length": unfused_accept,
                     "fused_output_throughput": _value(fused, "output_throughput"),
                     "unfused_output_throughput": _value(unfused, "output_throughput"),
                     "accept_drop_percent": drop, "tolerance_percent": tolerance,
                     "flagged": drop is not None and drop > tolerance})
    return rows


def fusion_ab_flags(results, tolerance_percent=5.0):
    """Only the concurrencies where fusion cost accept length beyond the tolerance."""
    return [row for row in fusion_ab(results, tolerance_percent) if row["flagged"]]


class FilterModule:
    def filters(self):
        return {"sglang_bench_fusion_ab_flags": fusion_ab_flags}
