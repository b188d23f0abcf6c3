# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a server runs FlashInfer's allreduce fusion, and why: the one place that decides it."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

# What the sglang_patch_probe says of the EAGLE-3 capture when it is right under fusion.
CAPTURE_OK = ("applied", "upstream")
CAPTURE_PATCH = "eagle3_fused_allreduce_capture"


def _speedup(selftest):
    """(the smallest unfused/fused time ratio over the sizes the self-test marks as weighing, their token
    counts), or (None, [])."""
    shapes = [s for s in (selftest or {}).get("shapes") or []
              if s.get("weighs") and s.get("fused_us") and s.get("unfused_us")]
    if not shapes:
        return None, []
    return (round(min(float(s["unfused_us"]) / float(s["fused_us"]) for s in shapes), 2),
            [int(s["tokens"]) for s in shapes])


def model_speedup(per_point, fused_points, unfused_points):
    """The speedup of the model as served: of its `fused_points` all-reduce + norm points, `unfused_points`
    (the layers EAGLE-3 captures, where patch 7 runs the unfused path) keep the unfused time, the others
    gain `per_point`. Time unfused F*t, fused (F-C)*t/s + C*t: the ratio is F / ((F-C)/s + C)."""
    fused_points, unfused_points = int(fused_points), int(unfused_points)
    if per_point is None or fused_points <= 0:
        return per_point
    unfused_points = min(max(unfused_points, 0), fused_points)
    return round(fused_points / ((fused_points - unfused_points) / float(per_point) + unfused_points), 2)


def fusion_decision(switch, selftest=None, min_speedup=1.05, speculative=False, tp=1, capture=None, capture_guard=True,
                    fused_points=0, captured_layers=0):
    """{enabled, switch, selftest, speedup, min_speedup, cause, reason, refusal}.

    switch: on / off / auto (sglang_server_allreduce_fusion).
    selftest: the fusion self-test's JSON, or None where it did not run (check mode before the user exists).
      The speed is its shapes marked `weighs`: the decode sizes the server runs that the role weighs
      (sglang_server_fusion_decode_batches); the slowest of them decides.
    capture: the probe's status of the EAGLE-3 capture patch on the install to serve (None: not probed).
    capture_guard: false serves fusion whatever the capture (the bench's fusion A/B measures the defect so).
    fused_points, captured_layers: the model's all-reduce + norm points and, under EAGLE-3, the layers it
      captures, which run unfused (patch 7): the self-test's per-point speedup is scaled to the model as
      served (model_speedup), and that decides. 0 fused points: the per-point speedup decides.
    refusal: non-empty when `on` cannot be honoured; the role fails the host with it before the unit changes.
    """
    if switch not in ("on", "off", "auto"):
        raise AnsibleFilterError("fusion_decision: switch must be on, off or auto, not %r" % (switch,))
    if not isinstance(min_speedup, (int, float)) or min_speedup <= 0:
        raise AnsibleFilterError("fusion_decision: min_speedup must be a positive number, not %r" % (min_speedup,))
    status = (selftest or {}).get("status", "not run")
    speedup, decode_tokens = _speedup(selftest)
    unfused = int(captured_layers) if speculative else 0
    served = model_speedup(speedup, fused_points, unfused)
    # The model as served, in words, where it differs from the per-point figure's meaning.
    as_served = (" (%.2fx for the model as served: %d of %d fused points, %d EAGLE-3 capture layer(s) unfused)"
                 % (served, int(fused_points) - unfused, int(fused_points), unfused)
                 if served is not None and int(fused_points) > 0 else "")
    # cause: what decided it, for the fleet report to word (tools/fleet.py); reason: the run output's sentence.
    decision = {"switch": switch, "selftest": status, "speedup": speedup, "model_speedup": served,
                "min_speedup": float(min_speedup),
                "enabled": False, "cause": "", "reason": "", "refusal": ""}

    # Where systemd does not run the host, the self-test ran outside the server's sandbox: say so.
    where = (selftest or {}).get("sandbox") or {}
    outside = " (%s)" % where["why"] if where.get("why") and not where.get("sandboxed") else ""

    def off(cause, reason):  # served without fusion; an `on` that meets this is refused instead
        reason += "" if cause == "capture" else outside  # the capture is the install's, not the self-test's
        return dict(decision, cause=cause, reason=reason, refusal=reason if switch == "on" else "")

    if switch == "off":
        return dict(decision, cause="switched-off", reason="switched off (sglang_server_allreduce_fusion: off)")
    if capture_guard and speculative and int(tp) > 1 and capture not in CAPTURE_OK:
        return off("capture", "EAGLE-3 at tp %d would draft from one rank's partial sums: the install's EAGLE-3 capture is "
                   "neither patched nor fixed upstream (%s: %s); turn on sglang_patches_eagle3_fused_capture"
                   % (int(tp), CAPTURE_PATCH, capture or "not probed"))
    if selftest is None:  # on is taken at its word; auto needs a verdict
        return dict(decision, enabled=switch == "on", cause="not-run",
                    reason="self-test not run: check mode, and the service user it runs as does not exist yet")
    if switch == "on":
        if status not in ("pass", "single-gpu"):
            return off("selftest", "self-test %s: %s" % (status, selftest.get("reason", "")))
        return dict(decision, enabled=True, cause="switched-on", reason="switched on; self-test %s%s%s" % (
            status, ", %.2fx at decode" % speedup if speedup is not None else "", outside))
    if status != "pass":
        return off("selftest", "self-test %s: %s" % (status, selftest.get("reason", "")))
    if speedup is None:
        return off("no-timings", "self-test pass, but it timed none of the decode sizes that weigh")
    if served < min_speedup:
        return off("slower", "self-test pass, not faster: %.2fx at decode (%s tokens), %.2fx needed "
                   "(sglang_server_fusion_min_speedup)%s" % (speedup, ", ".join(map(str, decode_tokens)), min_speedup,
                                                             as_served))
    return dict(decision, enabled=True, cause="faster",
                reason="self-test pass, %.2fx faster at decode%s%s" % (speedup, as_served, outside))


class FilterModule:
    def filters(self):
        return {"sglang_fusion_decision": fusion_decision}
