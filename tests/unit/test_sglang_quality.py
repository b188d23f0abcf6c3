"""The quality gate's decision (plugins/filter/sglang_quality.py): a canary that answers worse, more slowly or
with a weaker drafter than the model's baseline fails, naming the measure; the baseline store keeps a record
per model and install; the report shows baseline and canary side by side, one measure per row."""
import sys

import pytest
import yaml

from conftest import ROOT
from sglang_quality import (MEASURES, FilterModule, baseline_of, baseline_record, baseline_refresh, fleet_measures,
                            host_baseline_of, verdict)

sys.path.insert(0, str(ROOT / "tools"))
import fleet  # noqa: E402

DEFAULTS = yaml.safe_load((ROOT / "roles/sglang_quality/defaults/main.yml").read_text())
TOLERANCES = DEFAULTS["sglang_quality_tolerances"]
FLOOR = DEFAULTS["sglang_quality_min_accuracy"]
GOOD = {"accuracy": 0.93, "decode_tok_s": 1180.0, "ttft_ms": 210.0, "itl_ms": 10.8, "accept_length": 2.65,
        "eval_seconds": 61.0, "single_stream_tok_s": 92.6}
KIMI = "/models/nvidia/Kimi-K2.5-NVFP4"


def baseline(measures=GOOD, install="install-1"):
    return {"install": install, "measures": dict(measures), "recorded": "2026-12-04T20:00:00Z"}


def check(measures, model=GOOD, host=GOOD):
    """The verdict with the model's baseline and this host's own last eval (None: none)."""
    return verdict(measures, baseline(model) if model else None, FLOOR, TOLERANCES,
                   baseline(host, "install-0") if host else None)


def test_every_gated_measure_has_a_default_tolerance():
    assert set(TOLERANCES) == set(MEASURES)


def test_a_canary_as_good_as_the_baseline_passes_with_a_row_per_measure():
    result = check(dict(GOOD, decode_tok_s=1150.0))
    assert result["passed"] and result["failures"] == []
    assert [row["measure"] for row in result["rows"]] == ["accuracy floor", *MEASURES, "eval_seconds",
                                                          "single_stream_tok_s"]
    assert result["baseline_install"] == "install-1"


@pytest.mark.parametrize("change,measure", [
    ({"accuracy": 0.80}, "accuracy"),               # degraded: 13 points down
    ({"decode_tok_s": 590.0}, "decode_tok_s"),     # slow: half the throughput
    ({"itl_ms": 21.6}, "itl_ms"),                  # slow: twice the time per token
    ({"ttft_ms": 420.0}, "ttft_ms"),
    ({"accept_length": 1.59}, "accept_length"),    # a drafter fed the wrong hidden states
])
def test_a_canary_worse_than_its_tolerance_fails_naming_the_measure(change, measure):
    result = check(dict(GOOD, **change))
    assert not result["passed"]
    failed = [row["measure"] for row in result["rows"] if row["ok"] is False]
    assert measure in failed
    assert any(f.startswith(measure + " ") for f in result["failures"]), result["failures"]


def test_within_the_tolerance_is_not_a_regression_and_better_never_is():
    # 2.9 points down on accuracy (tolerance 3), 9 % slower, 24 % later first token, 4.9 % shorter accept length.
    near = dict(GOOD, accuracy=0.901, decode_tok_s=1075.0, ttft_ms=260.0, itl_ms=11.8, accept_length=2.52)
    assert check(near)["passed"]
    better = dict(GOOD, accuracy=0.97, decode_tok_s=2000.0, ttft_ms=50.0, itl_ms=5.0, accept_length=3.5)
    assert check(better)["passed"]


def test_the_speeds_are_compared_with_this_host_s_own_last_eval_never_another_host_s():
    """A slower host (60 % of its peer, as the lab's second node) is held to its own speed, not the fleet's:
    the model's baseline was measured on a faster host."""
    slow = dict(GOOD, decode_tok_s=708.0, itl_ms=18.0, ttft_ms=350.0)
    result = check(slow, model=GOOD, host=slow)
    assert result["passed"], result["failures"]
    assert {row["measure"]: row["against"] for row in result["rows"] if row["against"]} == {
        "accuracy": "model", "accept_length": "model", "decode_tok_s": "host", "ttft_ms": "host", "itl_ms": "host",
        "eval_seconds": "host", "single_stream_tok_s": "host"}
    # Slower than its own last eval: caught, and said so.
    result = check(dict(slow, decode_tok_s=354.0), model=GOOD, host=slow)
    assert result["failures"] == ["decode_tok_s 354.0 tok/s is worse than this host's last eval, 708.0 tok/s, "
                                  "by more than 10 % (limit 637.2 tok/s)"]
    # A host with no eval of its own yet: its speeds are shown, not gated; accuracy still is.
    result = check(dict(GOOD, decode_tok_s=1.0), host=None)
    assert result["passed"] and {r["measure"]: r["ok"] for r in result["rows"]}["decode_tok_s"] is True
    assert not check(dict(GOOD, accuracy=0.8), host=None)["passed"]


def test_the_floor_holds_whatever_the_baseline():
    low = dict(GOOD, accuracy=0.85)
    result = check(low, model=low, host=low)
    assert not result["passed"] and result["failures"] == ["accuracy 85.0% is below sglang_quality_min_accuracy 87.0%"]


def test_without_a_baseline_only_the_floor_applies():
    assert check(dict(GOOD, decode_tok_s=1.0), model=None, host=None)["passed"]
    assert not check(dict(GOOD, accuracy=0.5), model=None, host=None)["passed"]


def test_a_drafter_that_stopped_reporting_fails_and_eagle3_off_on_both_is_not_compared():
    result = check(dict(GOOD, accept_length=None))
    assert not result["passed"]
    assert "accept_length: the model's baseline has 2.65, this install reports none" in result["failures"]
    off = dict(GOOD, accept_length=None)
    assert check(off, model=off, host=off)["passed"]


def test_a_measure_without_a_tolerance_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="no tolerance for itl_ms"):
        verdict(GOOD, baseline(), FLOOR, {k: v for k, v in TOLERANCES.items() if k != "itl_ms"}, baseline())


def test_the_store_keeps_a_record_per_model_and_install_and_each_host_s_last_eval():
    store = baseline_record({}, KIMI, "install-1", {"gpu-1": GOOD}, "2026-12-01T00:00:00Z", "quality")
    store = baseline_record(store, KIMI, "install-2", {"gpu-2": dict(GOOD, accuracy=0.94)}, "2026-12-02T00:00:00Z",
                            "canary")
    store = baseline_record(store, "other-model", "install-9", {"gpu-3": GOOD}, "2026-12-03T00:00:00Z", "canary")
    assert baseline_of(store, KIMI)["install"] == "install-2" and baseline_of(store, KIMI)["source"] == "canary"
    assert baseline_of(store, KIMI)["measures"]["accuracy"] == 0.94
    assert set(store["models"][KIMI]) == {"install-1", "install-2"}
    assert baseline_of(store, "other-model")["install"] == "install-9"
    assert baseline_of({}, KIMI) is None and baseline_of(None, KIMI) is None
    # Each host keeps its own last eval, whichever install it was of.
    assert host_baseline_of(store, KIMI, "gpu-1")["install"] == "install-1"
    assert host_baseline_of(store, KIMI, "gpu-2")["install"] == "install-2"
    assert host_baseline_of(store, KIMI, "gpu-3") is None and host_baseline_of({}, KIMI, "gpu-1") is None
    # Only the newest records are kept.
    for day in range(3, 12):
        store = baseline_record(store, KIMI, "install-%d" % day, {"gpu-1": GOOD}, "2026-12-%02dT00:00:00Z" % day,
                                "canary", keep=5)
    assert sorted(store["models"][KIMI]) == ["install-10", "install-11", "install-7", "install-8", "install-9"]


def test_the_fleet_refresh_takes_each_install_s_median_and_the_most_served_install_is_current():
    results = [{"host": "gpu-%d" % i, "install": "install-2", "measures": dict(GOOD, decode_tok_s=speed)}
               for i, speed in enumerate((1000.0, 1100.0, 400.0))]
    results.append({"host": "gpu-9", "install": "install-1", "measures": dict(GOOD, accuracy=0.91)})
    store = baseline_refresh({}, KIMI, results, "2026-12-04T21:00:00Z")
    current = baseline_of(store, KIMI)
    assert current["install"] == "install-2" and current["hosts"] == ["gpu-0", "gpu-1", "gpu-2"]
    assert current["measures"]["decode_tok_s"] == 1000.0  # the median: one slow host does not set it
    assert store["models"][KIMI]["install-1"]["measures"]["accuracy"] == 0.91
    # The slow host is held to its own speed from now on.
    assert host_baseline_of(store, KIMI, "gpu-2")["measures"]["decode_tok_s"] == 400.0
    assert fleet_measures([]) == {name: None for name in list(MEASURES) + ["eval_seconds", "single_stream_tok_s"]}


def test_the_filters_are_registered_under_the_names_the_role_uses():
    names = set(FilterModule().filters())
    used = set()
    for path in (ROOT / "roles/sglang_quality/tasks").glob("*.yml"):
        used |= {name for name in names if name in path.read_text()}
    assert used == names


def test_the_report_shows_baseline_and_canary_side_by_side_one_measure_per_row():
    gate = dict(check(dict(GOOD, accuracy=0.80)), install="install-2")
    lines = fleet.describe_quality_gate("gpu-1", gate)
    assert lines[0] == ("  ! gpu-1: quality gate of install install-2 against the baseline of install install-1 "
                        "(recorded 2026-12-04T20:00:00Z) and this host's last eval (install install-0, "
                        "2026-12-04T20:00:00Z): FAILED, accuracy 80.0% is below sglang_quality_min_accuracy 87.0%; "
                        "accuracy 80.0% is worse than the model's baseline, 93.0%, by more than 3.0 points "
                        "(limit 90.0%)")
    table = [line.split() for line in lines[1:]]
    assert table[0] == ["MEASURE", "BASELINE", "OF", "CANARY", "LIMIT"]
    rows = {row[0]: row[1:] for row in table[1:]}
    assert rows["accuracy"] == ["93.0%", "model", "80.0%", "≥", "90.0%", "WORSE"]
    assert rows["decode_tok_s"] == ["1180.0", "tok/s", "host", "1180.0", "tok/s", "≥", "1062.0", "tok/s", "ok"]
    assert rows["ttft_ms"][-1] == "ok" and "≤" in rows["ttft_ms"]
    assert rows["eval_seconds"] == ["61.0", "s", "host", "61.0", "s"]
