"""The fusion decision: every switch against every self-test outcome, its speed and the EAGLE-3 capture."""
import json

import pytest
from ansible.errors import AnsibleFilterError

from conftest import FIXTURES
from sglang_fusion import fusion_decision

X2 = FIXTURES / "hosts/h200x2-driver580"


def selftest(status="pass", fused=20.0, unfused=30.0, tokens=(4, 32, 128, 192, 2048), weighed=(4, 32, 128, 192)):
    return {"status": status, "reason": "why %s" % status,
            "shapes": [{"tokens": t, "fused_us": fused, "unfused_us": unfused, "weighs": t in weighed} for t in tokens]}


@pytest.mark.parametrize("switch", ["on", "auto", "off"])
@pytest.mark.parametrize("status", ["pass", "fail", "hang", "error", "single-gpu"])
@pytest.mark.parametrize("ratio", [1.5, 1.02, 0.8])
@pytest.mark.parametrize("capture", ["applied", "upstream", "apply", "drift", None])
@pytest.mark.parametrize("speculative,tp", [(True, 8), (True, 1), (False, 8)])
def test_every_combination(switch, status, ratio, capture, speculative, tp):
    d = fusion_decision(switch, selftest(status, 20.0, 20.0 * ratio), 1.05, speculative, tp, capture)
    capture_bad = speculative and tp > 1 and capture not in ("applied", "upstream")
    if switch == "off":
        expected = False
    elif capture_bad:
        expected = False
    elif switch == "on":
        expected = status in ("pass", "single-gpu")
    else:
        expected = status == "pass" and ratio >= 1.05
    assert d["enabled"] is expected
    assert bool(d["refusal"]) is (switch == "on" and not expected)  # on never quietly serves without it
    assert d["speedup"] == round(ratio, 2) and d["reason"]
    if capture_bad and switch != "off":
        assert "partial sums" in d["reason"] and "eagle3_fused_allreduce_capture: %s" % (capture or "not probed") \
            in d["reason"]


def test_a_correct_but_slower_kernel_serves_without_fusion_and_says_how_fast():
    d = fusion_decision("auto", selftest(fused=50.0, unfused=51.0), 1.05)
    assert (d["enabled"], d["selftest"], d["speedup"]) == (False, "pass", 1.02)
    assert d["reason"].startswith("self-test pass, not faster: 1.02x at decode (4, 32, 128, 192 tokens), 1.05x needed")


def test_the_slowest_size_that_weighs_decides_and_the_others_do_not_count():
    test = selftest()
    test["shapes"][1]["unfused_us"] = 20.4                      # 32 tokens (8 requests x 4): 1.02x
    test["shapes"][4]["unfused_us"] = 10.0                      # 2048 tokens (prefill): slower, does not weigh
    assert fusion_decision("auto", test)["speedup"] == 1.02
    test["shapes"][1]["weighs"] = False                         # a size the role does not weigh
    assert fusion_decision("auto", test)["speedup"] == 1.5


def test_a_self_test_without_timings_that_weigh_does_not_turn_fusion_on():
    d = fusion_decision("auto", selftest(tokens=(512, 2048), weighed=()))
    assert not d["enabled"] and "timed none of the decode sizes that weigh" in d["reason"]


def test_the_real_two_gpu_verdict_before_the_server_s_sizes_decides_nothing():
    """Measured at 1, 8 and 64 tokens against the eager baseline (schema 2): none is a size the server
    runs, so auto does not turn fusion on from it (and its key is not the one a schema 3 run reads)."""
    real = json.loads((X2 / "selftest-2gpu-patched.json").read_text())
    d = fusion_decision("auto", real)
    assert (d["enabled"], d["cause"], d["speedup"]) == (False, "no-timings", None)


def test_check_mode_without_a_verdict():
    assert fusion_decision("auto", None)["enabled"] is False
    assert fusion_decision("on", None)["enabled"] is True


@pytest.mark.parametrize("args", [("maybe", None), ("auto", None, 0), ("auto", None, "fast")])
def test_bad_input_is_refused(args):
    with pytest.raises(AnsibleFilterError):
        fusion_decision(*args)


def test_without_the_guard_an_unpatched_capture_does_not_stop_fusion():
    """The bench's fusion A/B measures what the defect costs: it needs the fused server to run."""
    d = fusion_decision("on", selftest(), 1.05, True, 8, "apply", capture_guard=False)
    assert d["enabled"] and not d["refusal"]


def test_a_verdict_from_outside_the_sandbox_says_so_in_the_reason():
    outside = {"sandboxed": False, "why": "systemd is not PID 1 here (no /run/systemd/system): the self-test ran "
                                          "as the service user outside the server unit's sandbox"}
    shapes = [{"tokens": t, "fused_us": 10.0, "unfused_us": 20.0, "weighs": True} for t in (4, 32, 128)]
    decision = fusion_decision("auto", {"status": "pass", "shapes": shapes, "sandbox": outside})
    assert decision["enabled"] is True
    assert decision["reason"] == "self-test pass, 2.00x faster at decode (%s)" % outside["why"]
    failed = fusion_decision("on", {"status": "fail", "reason": "max error 0.75", "sandbox": outside})
    assert failed["refusal"] == "self-test fail: max error 0.75 (%s)" % outside["why"]
    inside = {"sandboxed": True, "why": "ran as a transient unit under the server unit's sandbox"}
    assert fusion_decision("auto", {"status": "pass", "shapes": shapes, "sandbox": inside})["reason"] == \
        "self-test pass, 2.00x faster at decode"


def test_the_gain_is_stated_for_the_model_as_served_and_that_decides():
    """Kimi-K2.5: 61 layers, 121 all-reduce + norm points; under EAGLE-3 the 3 captured layers run unfused."""
    from sglang_fusion import model_speedup
    assert model_speedup(1.20, 121, 3) == round(121 / (118 / 1.20 + 3), 2) == 1.19
    assert model_speedup(1.20, 121, 0) == 1.20 and model_speedup(1.20, 0, 3) == 1.20 and model_speedup(None, 121, 3) is None
    shapes = {"status": "pass", "shapes": [{"tokens": 4, "weighs": True, "fused_us": 10.0, "unfused_us": 10.6}]}
    per_point = fusion_decision("auto", shapes, 1.05, speculative=True, tp=8, capture="applied")
    assert per_point["enabled"] and per_point["speedup"] == 1.06 and per_point["model_speedup"] == 1.06
    # Most of a model's points captured (a small model, many capture layers): 1.06x per point is not 1.05x served.
    few = fusion_decision("auto", shapes, 1.05, speculative=True, tp=8, capture="applied", fused_points=7, captured_layers=3)
    assert not few["enabled"] and few["cause"] == "slower" and few["model_speedup"] == 1.03
    assert few["reason"].endswith("(1.03x for the model as served: 4 of 7 fused points, 3 EAGLE-3 capture layer(s) unfused)")
    kimi = fusion_decision("auto", shapes, 1.05, speculative=True, tp=8, capture="applied", fused_points=121, captured_layers=3)
    assert kimi["enabled"] and kimi["reason"] == (
        "self-test pass, 1.06x faster at decode (1.06x for the model as served: 118 of 121 fused points, "
        "3 EAGLE-3 capture layer(s) unfused)")
    # Without EAGLE-3 nothing is captured: every point fuses.
    plain = fusion_decision("auto", shapes, 1.05, speculative=False, tp=8, fused_points=7, captured_layers=3)
    assert plain["enabled"] and plain["model_speedup"] == 1.06
