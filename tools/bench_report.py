#!/usr/bin/env python3
"""The fleet's benchmark report: per host, per concurrency, EAGLE-3 on and off, and slow hosts.

    tools/bench_report.py run -i inventory/lab [--ab] [-e KEY=VALUE] [--out reports/bench]
        runs site.yml --tags verify,bench through ansible-runner, reads each host's results from
        the run's events, and writes the report
    tools/bench_report.py render RESULTS.json [--out DIR]
        writes the report from the per-host results the bench play saved (the play does this
        itself at its end, so a plain ansible-playbook run gets the same report)

The report is three files: report.json (checked against bench_report.schema.json), report.md,
and report.png (output tok/s per host per concurrency, EAGLE-3 on and off side by side). Each GPU
host's acceptance verdict in the run (the stage's, or its record's) is a per-GPU table in all three.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).resolve().with_name("bench_report.schema.json")
sys.path.insert(0, str(ROOT / "plugins/filter"))
from sglang_bench_fusion import fusion_ab  # noqa: E402 (the role's fusion A/B, one home)
from gpu_acceptance import acceptance_report  # noqa: E402 (the acceptance stage's rows, one home)

VARIANTS = ("baseline", "eagle3", "eagle3-fusion-ab")
# What the report keeps of each bench_serving result (its JSONL line), under the same names.
METRICS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms",
           "median_itl_ms", "p99_itl_ms", "accept_length", "completed", "duration")


def parse_bench_serving(result: dict | str) -> dict:
    """The metrics the report keeps from one line of bench_serving's --output-file.

    bench_serving appends one JSON object per run; the fields are the ones sglang 0.5.9's
    benchmark() writes (output_throughput in tok/s, latencies in ms, accept_length from the
    server's /get_server_info or null)."""
    if isinstance(result, str):
        result = json.loads(result)
    missing = [key for key in METRICS if key not in result]
    if missing:
        raise ValueError("not a bench_serving result: it lacks %s" % ", ".join(missing))
    metrics = {key: result[key] for key in METRICS}
    metrics["max_concurrency"] = result.get("max_concurrency")
    metrics["num_prompts"] = result.get("completed")
    return metrics


def build_report(hosts: dict, *, slow_percent: float = 10.0, simulated: bool = False,
                 settings: dict | None = None, generated: str | None = None,
                 accept_tolerance_percent: float = 5.0, acceptance: dict | None = None) -> dict:
    """hosts: {host: [{"variant", "concurrency", "bench_serving": {...}}, ...]} -> the report.
    acceptance: gpu_acceptance.acceptance_report's {host: {passed, fingerprint, gpus, failures}}."""
    report_hosts = {}
    for host, runs in sorted(hosts.items()):
        results = []
        for run in runs:
            if run["variant"] not in VARIANTS:
                raise ValueError("%s: unknown variant %r" % (host, run["variant"]))
            fused = (run["bench_serving"].get("server_info") or {}).get("enable_flashinfer_allreduce_fusion")
            results.append(dict(variant=run["variant"], concurrency=int(run["concurrency"]),
                                fusion=None if fused is None else bool(fused),
                                **parse_bench_serving(run["bench_serving"])))
        results.sort(key=lambda r: (r["concurrency"], r["variant"]))
        report_hosts[host] = {"results": results, "ab": ab_comparison(results), "slow": [],
                              "fusion_ab": fusion_ab(runs, accept_tolerance_percent)}

    medians: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        by_concurrency: dict[int, list[float]] = {}
        for host in report_hosts.values():
            for r in host["results"]:
                if r["variant"] == variant:
                    by_concurrency.setdefault(r["concurrency"], []).append(r["output_throughput"])
        if by_concurrency:
            medians[variant] = {str(c): statistics.median(v) for c, v in sorted(by_concurrency.items())}

    for name, host in report_hosts.items():
        for r in host["results"]:
            median = medians[r["variant"]][str(r["concurrency"])]
            below = 100.0 * (median - r["output_throughput"]) / median if median else 0.0
            if below > slow_percent:
                host["slow"].append({"variant": r["variant"], "concurrency": r["concurrency"],
                                     "output_throughput": r["output_throughput"], "fleet_median": median,
                                     "below_median_percent": round(below, 1)})

    return {"schema": "sglang-fleet/bench-report/1",
            "generated": generated or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "simulated": bool(simulated),
            "settings": settings or {},
            "slow_host_percent": slow_percent,
            "accept_tolerance_percent": accept_tolerance_percent,
            "fleet_median_output_throughput": medians,
            "acceptance": dict(sorted((acceptance or {}).items())),
            "hosts": report_hosts}


def ab_comparison(results: list) -> list:
    """Per concurrency with both variants: EAGLE-3's gain in output tok/s, and who wins."""
    by_key = {(r["variant"], r["concurrency"]): r for r in results}
    rows = []
    for concurrency in sorted({r["concurrency"] for r in results}):
        base, eagle = by_key.get(("baseline", concurrency)), by_key.get(("eagle3", concurrency))
        if not (base and eagle):
            continue
        gain = 100.0 * (eagle["output_throughput"] - base["output_throughput"]) / base["output_throughput"]
        rows.append({"concurrency": concurrency, "baseline_output_throughput": base["output_throughput"],
                     "eagle3_output_throughput": eagle["output_throughput"], "eagle3_gain_percent": round(gain, 1),
                     "winner": "eagle3" if gain > 0 else "baseline"})
    return rows


def validate(report: dict) -> None:
    import jsonschema
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


def render_markdown(report: dict) -> str:
    lines = ["# Fleet benchmark, %s" % report["generated"], ""]
    if report["simulated"]:
        lines += ["> **Lab numbers are simulated**: the lab's server fixture models speed; they say nothing "
                  "about real hardware.", ""]
    s = report["settings"]
    if s:
        lines += ["bench_serving, dataset %s, seed %s, %s input / %s output tokens, concurrencies %s."
                  % (s.get("dataset", "-"), s.get("seed"), s.get("input_len"), s.get("output_len"),
                     ", ".join(str(c) for c in s.get("concurrencies", []))), ""]
    lines += ["| host | variant | concurrency | output tok/s | req/s | TTFT p50 / p99 ms | ITL p50 / p99 ms "
              "| accept length | vs fleet median |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, host in report["hosts"].items():
        slow = {(x["variant"], x["concurrency"]): x for x in host["slow"]}
        for r in host["results"]:
            median = report["fleet_median_output_throughput"][r["variant"]][str(r["concurrency"])]
            delta = 100.0 * (r["output_throughput"] - median) / median if median else 0.0
            flag = " **slow**" if (r["variant"], r["concurrency"]) in slow else ""
            lines.append("| %s | %s | %d | %.1f | %.2f | %.0f / %.0f | %.1f / %.1f | %s | %+.1f%%%s |" % (
                name, r["variant"], r["concurrency"], r["output_throughput"], r["request_throughput"],
                r["median_ttft_ms"], r["p99_ttft_ms"], r["median_itl_ms"], r["p99_itl_ms"],
                "%.2f" % r["accept_length"] if r["accept_length"] else "-", delta, flag))
    ab = [(name, row) for name, host in report["hosts"].items() for row in host["ab"]]
    if ab:
        lines += ["", "## EAGLE-3 on vs off", "", "| host | concurrency | off tok/s | on tok/s | EAGLE-3 |",
                  "|---|---|---|---|---|"]
        for name, row in ab:
            verdict = ("wins by %.1f%%" % row["eagle3_gain_percent"] if row["winner"] == "eagle3"
                       else "loses by %.1f%%" % -row["eagle3_gain_percent"])
            lines.append("| %s | %d | %.1f | %.1f | %s |" % (name, row["concurrency"], row["baseline_output_throughput"],
                                                            row["eagle3_output_throughput"], verdict))
    fusion_rows = [(name, row) for name, host in report["hosts"].items() for row in host["fusion_ab"]]
    if fusion_rows:
        lines += ["", "## Allreduce fusion on vs off, EAGLE-3 accept length (flagged beyond %g%% lower)"
                  % report["accept_tolerance_percent"], "",
                  "| host | concurrency | accept fused | accept unfused | tok/s fused | tok/s unfused | |",
                  "|---|---|---|---|---|---|---|"]
        for name, row in fusion_rows:
            lines.append("| %s | %d | %s | %s | %.1f | %.1f | %s |" % (
                name, row["concurrency"], row["fused_accept_length"], row["unfused_accept_length"],
                row["fused_output_throughput"], row["unfused_output_throughput"],
                "**%.1f%% lower with fusion**" % row["accept_drop_percent"] if row["flagged"] else "ok"))
    slow_hosts = [(name, x) for name, host in report["hosts"].items() for x in host["slow"]]
    lines += ["", "## Slow hosts (more than %g%% below the fleet median)" % report["slow_host_percent"], ""]
    lines += ["- **%s**: %s at concurrency %d, %.1f tok/s, %.1f%% below the median %.1f"
              % (name, x["variant"], x["concurrency"], x["output_throughput"], x["below_median_percent"],
                 x["fleet_median"]) for name, x in slow_hosts] or ["None."]
    lines += ["", "## GPU acceptance, per GPU", ""] + acceptance_markdown(report.get("acceptance") or {})
    return "\n".join(lines) + "\n"


# Past this many GPUs, the PNG's table keeps a row per GPU only for hosts that fail (the Markdown keeps all).
PNG_TABLE_ROWS = 64
ACCEPTANCE_COLUMNS = ("host", "GPU", "bf16 GEMM TFLOP/s", "memory GB/s", "H2D / D2H GB/s", "PCIe under load",
                      "temp C", "XIDs", "verdict")


def _number(value, pattern="%.1f"):
    return "-" if value is None else pattern % value


def _rate_cells(rates: dict) -> tuple:
    """The table's rate columns: GEMM, device memory, host<->device."""
    return (_number(rates["gemm_bf16_tflops"]), _number(rates["memory_bandwidth_gbps"], "%.0f"),
            "%s / %s" % (_number(rates["h2d_gbps"]), _number(rates["d2h_gbps"])))


def acceptance_rows(acceptance: dict, limit: int | None = None) -> list[tuple]:
    """The per-GPU table's rows (ACCEPTANCE_COLUMNS). Past `limit` rows, a host that passes is one row
    (its GPU count and its slowest GPU's rates): every GPU of a host that fails keeps its own row."""
    whole = sum(len(entry["gpus"]) for entry in acceptance.values())
    rows = []
    for host, entry in acceptance.items():
        if limit is not None and whole > limit and entry["passed"]:
            gpus = entry["gpus"]
            lowest = {key: min((g[key] for g in gpus if g[key] is not None), default=None)
                      for key in ("gemm_bf16_tflops", "memory_bandwidth_gbps", "h2d_gbps", "d2h_gbps")}
            rows.append((host, "all %d (slowest)" % len(gpus), *_rate_cells(lowest), "-", "-", "-", "pass"))
            continue
        for gpu in entry["gpus"]:
            rows.append((host, "%s %s" % (gpu["index"], (gpu["uuid"] or "")[:12]), *_rate_cells(gpu),
                         gpu["pcie_link"] or "-", _number(gpu["temperature_c"], "%.0f"),
                         ", ".join(str(x) for x in gpu["xids"]) or "-",
                         ("FAIL: " + ", ".join(gpu["failed"])) if gpu["failed"] else "pass"))
    return rows


def acceptance_markdown(acceptance: dict) -> list[str]:
    if not acceptance:
        return ["No GPU host has an acceptance verdict in this run (no acceptance stage ran, and no record)."]
    lines = ["| %s |" % " | ".join(ACCEPTANCE_COLUMNS), "|%s" % ("---|" * len(ACCEPTANCE_COLUMNS))]
    for row in acceptance_rows(acceptance):
        cells = list(row)
        if cells[-1] != "pass":
            cells[-1] = "**%s**" % cells[-1]
        lines.append("| %s |" % " | ".join(cells))
    held = [(host, entry["failures"]) for host, entry in acceptance.items() if not entry["passed"]]
    lines += [""] + (["- **%s is held out**: %s" % (host, "; ".join(failures)) for host, failures in held]
                     or ["Every host passes."])
    return lines


def render_png(report: dict, path: Path) -> None:
    """Grouped bars: for each concurrency, each host's output tok/s, EAGLE-3 off and on side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hosts = list(report["hosts"])
    concurrencies = sorted({r["concurrency"] for h in report["hosts"].values() for r in h["results"]})
    series = [(host, variant) for host in hosts for variant in VARIANTS
              if any(r["variant"] == variant for r in report["hosts"][host]["results"])]
    width = 0.8 / max(1, len(series))
    table = acceptance_rows(report.get("acceptance") or {}, limit=PNG_TABLE_ROWS)
    chart_width = max(6, 1.6 * len(concurrencies) * max(1, len(series)) / 2)
    if table:
        # The per-GPU acceptance table under the chart, a row a line.
        fig, (ax, table_ax) = plt.subplots(2, 1, figsize=(max(chart_width, 12), 4.5 + 0.6 + 0.25 * len(table)),
                                           dpi=110, gridspec_kw={"height_ratios": [4.5, 0.6 + 0.25 * len(table)]})
        table_ax.axis("off")
        cells = table_ax.table(cellText=[list(row) for row in table], colLabels=list(ACCEPTANCE_COLUMNS),
                               loc="upper center", cellLoc="left")
        cells.auto_set_font_size(False)
        cells.set_fontsize(7)
        cells.auto_set_column_width(list(range(len(ACCEPTANCE_COLUMNS))))
        for (row, _col), cell in cells.get_celld().items():
            if row > 0 and table[row - 1][-1] != "pass":
                cell.set_facecolor("#f8d7d5")
        table_ax.set_title("GPU acceptance, per GPU", fontsize=9)
    else:
        fig, ax = plt.subplots(figsize=(chart_width, 4.5), dpi=110)
    colors = plt.get_cmap("tab20")
    for i, (host, variant) in enumerate(series):
        values = {r["concurrency"]: r["output_throughput"] for r in report["hosts"][host]["results"]
                  if r["variant"] == variant}
        xs = [c_index + (i - (len(series) - 1) / 2) * width for c_index, c in enumerate(concurrencies)]
        color = colors((2 * hosts.index(host) + (variant == "baseline")) % 20)
        bars = ax.bar(xs, [values.get(c, 0) for c in concurrencies], width, label="%s, %s" % (host, variant),
                      color=color, hatch="//" if variant == "baseline" else None, edgecolor="black", linewidth=0.4)
        slow = {x["concurrency"] for x in report["hosts"][host]["slow"] if x["variant"] == variant}
        for bar, c in zip(bars, concurrencies):
            if c in slow:
                ax.annotate("slow", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=7, color="firebrick")
    ax.set_xticks(range(len(concurrencies)), [str(c) for c in concurrencies])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tokens/s")
    title = "Output throughput per host (EAGLE-3 on, off hatched)"
    ax.set_title(title + (" - SIMULATED lab numbers" if report["simulated"] else ""), fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(report: dict, out: Path) -> list[Path]:
    validate(report)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md", out / "report.png"]
    paths[0].write_text(json.dumps(report, indent=2) + "\n")
    paths[1].write_text(render_markdown(report))
    render_png(report, paths[2])
    return paths


def summary(report: dict) -> str:
    """Where each host stands, one line per host, for the terminal."""
    lines = []
    for name, host in report["hosts"].items():
        parts = ["%s c=%d %.1f tok/s" % (r["variant"], r["concurrency"], r["output_throughput"])
                 for r in host["results"]]
        verdicts = ["c=%d EAGLE-3 %+.1f%%" % (row["concurrency"], row["eagle3_gain_percent"]) for row in host["ab"]]
        flag = "  SLOW: " + ", ".join("%s c=%d %.1f%% below median" % (x["variant"], x["concurrency"],
                                                                     x["below_median_percent"]) for x in host["slow"]) \
            if host["slow"] else ""
        lines.append("%s: %s%s%s" % (name, "; ".join(parts), ("  [" + "; ".join(verdicts) + "]") if verdicts else "",
                                     flag))
    if report["simulated"]:
        lines.append("(lab numbers are simulated)")
    return "\n".join(lines)


def from_saved(path: Path) -> dict:
    """The report from the per-host results the bench play saved on the controller."""
    saved = json.loads(path.read_text())
    return build_report(saved["hosts"], slow_percent=saved["slow_host_percent"], simulated=saved["simulated"],
                        settings=saved["settings"], generated=saved.get("generated"),
                        accept_tolerance_percent=saved.get("accept_tolerance_percent", 5.0),
                        acceptance=saved.get("acceptance"))


def run(inventory: list, *, ab: bool, extravars: dict, out: Path) -> tuple[dict, object]:
    """Run site.yml --tags verify,bench through ansible-runner; the report from the run's events."""
    from fleet import run_playbook
    extravars = dict(extravars, sglang_bench_ab=ab, sglang_bench_report_dir=str(out.resolve()))
    result = run_playbook(ROOT / "site.yml", inventory, tags="verify,bench", extravars=extravars, quiet=False)
    benched = {name: h.facts for name, h in result.hosts.items() if "sglang_bench_results" in h.facts}
    if not benched:
        raise SystemExit("bench_report: no host returned bench results (rc=%s)" % result.rc)
    settings = next(iter(benched.values()))["sglang_bench_settings"]
    report = build_report({name: facts["sglang_bench_results"] for name, facts in benched.items()},
                          slow_percent=float(settings["slow_host_percent"]),
                          simulated=any(facts.get("sglang_bench_simulated_numbers") for facts in benched.values()),
                          settings=settings["report"],
                          acceptance=acceptance_report(sorted(result.hosts),
                                                       {name: h.facts for name, h in result.hosts.items()}))
    write_report(report, out)
    return report, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run verify + bench through ansible-runner and write the report")
    run_p.add_argument("-i", "--inventory", action="append", required=True)
    run_p.add_argument("--ab", action="store_true", help="A/B: EAGLE-3 as configured, then toggled")
    run_p.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE")
    run_p.add_argument("--out", type=Path, default=ROOT / "reports/bench")
    render_p = sub.add_parser("render", help="write the report from a saved results.json")
    render_p.add_argument("results", type=Path)
    render_p.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        sys.path.insert(0, str(ROOT / "tools"))
        extravars = dict(kv.split("=", 1) for kv in args.extra_var)
        report, result = run(args.inventory, ab=args.ab, extravars=extravars, out=args.out)
        print(summary(report))
        print("report: %s/report.{json,md,png}" % args.out)
        return 0 if result.rc == 0 else (result.rc or 1)
    report = from_saved(args.results)
    out = args.out or args.results.parent
    write_report(report, out)
    print(summary(report))
    print("report: %s/report.{json,md,png}" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
