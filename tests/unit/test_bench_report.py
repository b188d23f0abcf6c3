"""The benchmark report: bench_serving's real output parsed, A/B verdicts, slow hosts, the three files."""
import copy
import json
import struct

import jsonschema
import pytest

import bench_report
from conftest import FIXTURES, ROOT

# One line of bench_serving's --output-file, as sglang 0.5.9 wrote it against the lab's server
# fixture (tests/fixtures/bench_serving; the server's API key redacted).
REAL_LINE = (FIXTURES / "bench_serving/lab-eagle3-c8.jsonl").read_text().splitlines()[-1]


def line(**changes):
    result = json.loads(REAL_LINE)
    result.update(changes)
    return result


def runs(speeds):
    """{host: {(variant, concurrency): tok/s}} -> the per-host runs the bench play records."""
    return {host: [{"variant": v, "concurrency": c, "bench_serving": line(output_throughput=tps, max_concurrency=c)}
                   for (v, c), tps in table.items()] for host, table in speeds.items()}


def test_the_real_bench_serving_line_is_parsed():
    metrics = bench_report.parse_bench_serving(REAL_LINE)
    real = json.loads(REAL_LINE)
    assert metrics["output_throughput"] == real["output_throughput"] > 0
    assert metrics["request_throughput"] == real["request_throughput"]
    assert metrics["median_ttft_ms"] == real["median_ttft_ms"] and metrics["p99_ttft_ms"] == real["p99_ttft_ms"]
    assert metrics["median_itl_ms"] == real["median_itl_ms"] and metrics["p99_itl_ms"] == real["p99_itl_ms"]
    assert metrics["accept_length"] == 2.65 and metrics["max_concurrency"] == 8
    assert metrics["completed"] == real["completed"] == 16


def test_the_field_names_are_the_ones_sglang_0_5_9_writes(upstream_sglang):
    """Every metric the report reads is a key of benchmark()'s result in the installed release."""
    source = (upstream_sglang / "sglang/bench_serving.py").read_text()
    for key in bench_report.METRICS:
        assert '"%s":' % key in source, key


def test_something_that_is_not_a_bench_serving_result_is_refused():
    with pytest.raises(ValueError, match="output_throughput"):
        bench_report.parse_bench_serving({"completed": 3})


def test_the_a_b_verdict_per_concurrency():
    report = bench_report.build_report(runs({"a": {("baseline", 1): 100.0, ("eagle3", 1): 124.0,
                                                   ("baseline", 32): 1000.0, ("eagle3", 32): 900.0}}))
    ab = {row["concurrency"]: row for row in report["hosts"]["a"]["ab"]}
    assert ab[1]["winner"] == "eagle3" and ab[1]["eagle3_gain_percent"] == 24.0
    assert ab[32]["winner"] == "baseline" and ab[32]["eagle3_gain_percent"] == -10.0
    md = bench_report.render_markdown(report)
    assert "| a | 1 | 100.0 | 124.0 | wins by 24.0% |" in md
    assert "| a | 32 | 1000.0 | 900.0 | loses by 10.0% |" in md


def test_a_host_below_the_fleet_median_by_more_than_the_threshold_is_flagged():
    speeds = {"gpu-1": {("eagle3", 8): 1000.0}, "gpu-2": {("eagle3", 8): 980.0}, "gpu-3": {("eagle3", 8): 850.0}}
    report = bench_report.build_report(runs(speeds), slow_percent=10)
    assert report["fleet_median_output_throughput"] == {"eagle3": {"8": 980.0}}
    assert report["hosts"]["gpu-1"]["slow"] == report["hosts"]["gpu-2"]["slow"] == []
    (slow,) = report["hosts"]["gpu-3"]["slow"]
    assert slow["below_median_percent"] == 13.3 and slow["fleet_median"] == 980.0
    # The same fleet with a looser threshold flags nobody.
    assert all(not h["slow"] for h in bench_report.build_report(runs(speeds), slow_percent=15)["hosts"].values())
    assert "**gpu-3**: eagle3 at concurrency 8" in bench_report.render_markdown(report)


def test_the_report_validates_against_its_schema_and_the_schema_has_teeth():
    report = bench_report.build_report(runs({"a": {("eagle3", 1): 10.0}}), simulated=True,
                                       settings={"concurrencies": [1], "seed": 1})
    bench_report.validate(report)
    for breakage in (lambda r: r.pop("simulated"),
                     lambda r: r["hosts"]["a"]["results"][0].update(variant="eagle2"),
                     lambda r: r["hosts"]["a"]["results"][0].update(output_throughput=-1),
                     lambda r: r["hosts"].clear()):
        broken = copy.deepcopy(report)
        breakage(broken)
        with pytest.raises(jsonschema.ValidationError):
            bench_report.validate(broken)


def test_the_three_files_are_written_and_the_plot_is_a_picture(tmp_path):
    report = bench_report.build_report(runs({"gpu-1": {("baseline", 1): 100.0, ("eagle3", 1): 125.0},
                                             "gpu-2": {("baseline", 1): 70.0, ("eagle3", 1): 85.0}}),
                                       simulated=True)
    paths = bench_report.write_report(report, tmp_path)
    assert [p.name for p in paths] == ["report.json", "report.md", "report.png"]
    assert json.loads(paths[0].read_text()) == report
    assert "Lab numbers are simulated" in paths[1].read_text()
    data = paths[2].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert struct.unpack(">II", data[16:24])[0] >= 600


def test_render_reads_what_the_bench_play_saved(tmp_path):
    saved = {"generated": "2026-11-30T06:00:00Z", "simulated": False, "slow_host_percent": 10,
             "settings": {"concurrencies": [1], "input_len": 1024, "output_len": 512, "seed": 1},
             "hosts": runs({"gpu-1": {("eagle3", 1): 50.0}})}
    (tmp_path / "results.json").write_text(json.dumps(saved))
    assert bench_report.main(["render", str(tmp_path / "results.json")]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["generated"] == "2026-11-30T06:00:00Z" and report["hosts"]["gpu-1"]["results"][0]["concurrency"] == 1


def fusion_runs(fused_accept, unfused_accept):
    """EAGLE-3 as configured (fusion on) and with fusion toggled off, as the bench records them."""
    def run(variant, fused, accept):
        result = line(accept_length=accept, max_concurrency=1)
        result["server_info"] = dict(result.get("server_info") or {}, enable_flashinfer_allreduce_fusion=fused)
        return {"variant": variant, "concurrency": 1, "bench_serving": result}
    return {"gpu-1": [run("eagle3", True, fused_accept), run("eagle3-fusion-ab", False, unfused_accept)]}


def test_a_fused_server_that_accepts_fewer_drafts_is_flagged_in_every_file(tmp_path):
    report = bench_report.build_report(fusion_runs(1.6, 2.65), accept_tolerance_percent=5)
    row, = report["hosts"]["gpu-1"]["fusion_ab"]
    assert (row["fused_accept_length"], row["unfused_accept_length"], row["accept_drop_percent"], row["flagged"]) \
        == (1.6, 2.65, 39.6, True)
    bench_report.write_report(report, tmp_path)  # validates against the schema
    assert "| gpu-1 | 1 | 1.6 | 2.65 |" in (tmp_path / "report.md").read_text()
    assert "**39.6% lower with fusion**" in (tmp_path / "report.md").read_text()


def test_an_accept_length_within_the_tolerance_is_not_flagged():
    row, = bench_report.build_report(fusion_runs(2.6, 2.65), accept_tolerance_percent=5)["hosts"]["gpu-1"]["fusion_ab"]
    assert row["accept_drop_percent"] == 1.9 and not row["flagged"]


def test_the_role_s_flags_come_from_the_same_comparison():
    from sglang_bench_fusion import fusion_ab_flags
    flagged, = fusion_ab_flags(fusion_runs(1.6, 2.65)["gpu-1"], 5)
    assert flagged["concurrency"] == 1 and flagged["flagged"]
    assert fusion_ab_flags(fusion_runs(2.6, 2.65)["gpu-1"], 5) == []


def acceptance_of(pcie_width_on_b=16):
    """gpu_acceptance's report part for two hosts measured as the H200 host was (its capture), host b's
    GPU 0 with its link at the given width under load, judged by the stage's own verdict."""
    from gpu_acceptance import acceptance_floors, acceptance_report, acceptance_verdict
    from conftest import H200
    capture = json.loads((H200 / "acceptance/acceptance.json").read_text())
    degraded = copy.deepcopy(capture)
    degraded["gpus"][0]["health"]["pcie_width_current"] = pcie_width_on_b
    floors = acceptance_floors()
    hostvars = {name: {"gpu_acceptance_measured": measured, "gpu_acceptance_fingerprint": "f" * 16,
                       "gpu_acceptance_failures": acceptance_verdict(measured, floors)}
                for name, measured in (("a", capture), ("b", degraded))}
    hostvars["never-measured"] = {}
    return acceptance_report(["a", "b", "never-measured"], hostvars)


def test_each_gpu_s_acceptance_is_a_row_and_a_held_out_host_says_why_in_every_file(tmp_path):
    acceptance = acceptance_of(pcie_width_on_b=8)
    assert sorted(acceptance) == ["a", "b"]  # a host with no verdict is not in the table
    report = bench_report.build_report(runs({"a": {("eagle3", 1): 100.0}}), acceptance=acceptance)
    paths = bench_report.write_report(report, tmp_path)  # validates against the schema
    md = paths[1].read_text()
    assert ("| a | 0 GPU-f7d67785 | 666.3 | 4222 | 55.2 / 55.3 | Gen5 x16 (max Gen5 x16) | 65 | - | pass |"
            in md), md
    assert "| b | 0 GPU-f7d67785 | 666.3 | 4222 | 55.2 / 55.3 | Gen5 x8 (max Gen5 x16) | 65 | - | **FAIL: pcie_width** |" in md
    assert "- **b is held out**: GPU 0 (GPU-f7d67785-feec-3336-0ff2-68111bd63e59): pcie_width: PCIe link under " \
           "load x8, below its max x16 (floor: 16)" in md
    assert json.loads(paths[0].read_text())["acceptance"]["b"]["gpus"][0]["failed"] == ["pcie_width"]
    # The picture holds the table under the chart: taller than the chart alone.
    plain = tmp_path / "plain"
    bench_report.write_report(bench_report.build_report(runs({"a": {("eagle3", 1): 100.0}})), plain)
    height = lambda path: struct.unpack(">II", path.read_bytes()[16:24])[1]  # noqa: E731
    assert height(paths[2]) > height(plain / "report.png") + 50
    assert "No GPU host has an acceptance verdict in this run" in (plain / "report.md").read_text()


def test_a_fleet_that_passes_says_so_and_a_large_one_keeps_a_row_per_gpu_only_where_a_host_fails():
    passing = acceptance_of()
    assert all(entry["passed"] for entry in passing.values())
    md = bench_report.render_markdown(bench_report.build_report(runs({"a": {("eagle3", 1): 1.0}}), acceptance=passing))
    assert "Every host passes." in md and "held out" not in md
    # 40 hosts of 8 GPUs, one failing: the picture's table has a row per passing host, 8 for the failing one.
    eight = lambda entry: dict(entry, gpus=[dict(entry["gpus"][0], index=i) for i in range(8)])  # noqa: E731
    failing = acceptance_of(pcie_width_on_b=8)["b"]
    fleet = {"gpu-%02d" % i: eight(passing["a"]) for i in range(39)}
    fleet["gpu-bad"] = eight(failing)
    rows = bench_report.acceptance_rows(fleet, limit=bench_report.PNG_TABLE_ROWS)
    assert len(rows) == 39 + 8
    assert rows[0][:3] == ("gpu-00", "all 8 (slowest)", "666.3") and rows[0][-1] == "pass"
    assert [row[-1] for row in rows if row[0] == "gpu-bad"] == ["FAIL: pcie_width"] * 8
    assert len(bench_report.acceptance_rows(fleet)) == 320  # the Markdown's: every GPU
