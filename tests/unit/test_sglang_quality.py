"""The quality gate's decision (plugins/filter/sglang_quality.py): a canary that answers worse, more slowly or
with a weaker drafter than the model's baseline fails, naming the measure; the baseline store keeps a record
per model and install; the report shows baseline and canary side by side, one measure per row."""
import sys

import pytest
import yaml

from conftest import ROOT
from sglang_quality import (MEASURES, FilterModule, baseline_of, baseline_record, baseline_refresh, fleet_measures,
                            verdict)

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


def test_every_gated_measure_has_a_default_tolerance():
    assert set(TOLERANCES) == set(MEASURES)


def test_a_canary_as_good_as_the_baseline_passes_with_a_row_per_measure():
    result = verdict(dict(GOOD, decode_tok_s=1150.0), baseline(), FLOOR, TOLERANCES)
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
    result = verdict(dict(GOOD, **change), baseline(), FLOOR, TOLERANCES)
    assert not result["passed"]
    failed = [row["measure"] for row in result["rows"] if row["ok"] is False]
    assert measure in failed
    assert any(f.startswith(measure + " ") for f in result["failures"]), result["failures"]


def test_within_the_tolerance_is_not_a_regression_and_better_never_is():
    # 2.9 points down on accuracy (tolerance 3), 9 % slower, 24 % later first token, 4.9 % shorter accept length.
    near = dict(GOOD, accuracy=0.901, decode_tok_s=1075.0, ttft_ms=260.0, itl_ms=11.8, accept_length=2.52)
    assert verdict(near, baseline(), FLOOR, TOLERANCES)["passed"]
    better = dict(GOOD, accuracy=0.97, decode_tok_s=2000.0, ttft_ms=50.0, itl_ms=5.0, accept_length=3.5)
    assert verdict(better, baseline(), FLOOR, TOLERANCES)["passed"]


def test_the_floor_holds_whatever_the_baseline():
    low = dict(GOOD, accuracy=0.85)
    result = verdict(low, baseline(low), FLOOR, TOLERANCES)
    assert not result["passed"] and result["failures"] == ["accuracy 85.0% is below sglang_quality_min_accuracy 87.0%"]


def test_without_a_baseline_only_the_floor_applies():
    assert verdict(dict(GOOD, decode_tok_s=1.0), None, FLOOR, TOLERANCES)["passed"]
    assert not verdict(dict(GOOD, accuracy=0.5), None, FLOOR, TOLERANCES)["passed"]


def test_a_drafter_that_stopped_reporting_fails_and_eagle3_off_on_both_is_not_compared():
    result = verdict(dict(GOOD, accept_length=None), baseline(), FLOOR, TOLERANCES)
    assert not result["passed"]
    assert "accept_length: the baseline has 2.65, this install reports none" in result["failures"]
    off = dict(GOOD, accept_length=None)
    assert verdict(off, baseline(off), FLOOR, TOLERANCES)["passed"]


def test_a_measure_without_a_tolerance_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="no tolerance for itl_ms"):
        verdict(GOOD, baseline(), FLOOR, {k: v for k, v in TOLERANCES.items() if k != "itl_ms"})


def test_the_store_keeps_a_record_per_model_and_install_and_the_newest_is_current():
    store = baseline_record({}, KIMI, "install-1", GOOD, ["gpu-1"], "2026-12-01T00:00:00Z", "quality")
    store = baseline_record(store, KIMI, "install-2", dict(GOOD, accuracy=0.94), ["gpu-2"], "2026-12-02T00:00:00Z",
                            "canary")
    store = baseline_record(store, "other-model", "install-9", GOOD, ["gpu-3"], "2026-12-03T00:00:00Z", "canary")
    assert baseline_of(store, KIMI)["install"] == "install-2" and baseline_of(store, KIMI)["source"] == "canary"
    assert set(store["models"][KIMI]) == {"install-1", "install-2"}
    assert baseline_of(store, "other-model")["install"] == "install-9"
    assert baseline_of({}, KIMI) is None and baseline_of(None, KIMI) is None
    # Only the newest records are kept.
    for day in range(3, 12):
        store = baseline_record(store, KIMI, "install-%d" % day, GOOD, ["gpu-1"], "2026-12-%02dT00:00:00Z" % day,
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
    assert fleet_measures([]) == {name: None for name in list(MEASURES) + ["eval_seconds", "single_stream_tok_s"]}


def test_the_filters_are_registered_under_the_names_the_role_uses():
    names = set(FilterModule().filters())
    used = set()
    for path in (ROOT / "roles/sglang_quality/tasks").glob("*.yml"):
        used |= {name for name in names if name in path.read_text()}
    assert used == names


def test_the_report_shows_baseline_and_canary_side_by_side_one_measure_per_row():
    gate = dict(verdict(dict(GOOD, accuracy=0.80), baseline(), FLOOR, TOLERANCES), install="install-2")
    lines = fleet.describe_quality_gate("gpu-1", gate)
    assert lines[0].startswith("  ! gpu-1: quality gate of install install-2 against the baseline of install "
                               "install-1 (recorded 2026-12-04T20:00:00Z): FAILED, accuracy 80.0% is below "
                               "sglang_quality_min_accuracy 87.0%; accuracy 80.0% is worse than the baseline's 93.0% "
                               "by more than 3.0 points (limit 90.0%)")
    table = [line.split() for line in lines[1:]]
    assert table[0] == ["MEASURE", "BASELINE", "CANARY", "LIMIT"]
    rows = {row[0]: row[1:] for row in table[1:]}
    assert rows["accuracy"] == ["93.0%", "80.0%", "≥", "90.0%", "WORSE"]
    assert rows["decode_tok_s"] == ["1180.0", "tok/s", "1180.0", "tok/s", "≥", "1062.0", "tok/s", "ok"]
    assert rows["ttft_ms"][-1] == "ok" and "≤" in rows["ttft_ms"]
    assert rows["eval_seconds"] == ["61.0", "s", "61.0", "s"]
