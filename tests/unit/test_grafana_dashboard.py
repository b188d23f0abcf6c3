"""The Grafana dashboard (files/monitoring/grafana/): every panel's query returns series from the real
Prometheus (Debian's 2.42, which bin/setup installs), over backfilled series shaped as their sources
serve them.

A 2-host fleet, 15 minutes at 15 s steps, written as OpenMetrics and backfilled with
`promtool tsdb create-blocks-from openmetrics`:
- sglang 0.5.9's servers: the metric names, histogram buckets and labels of its own
  srt/metrics/collector.py and managers/ (read from the wheel), gpu-node-01 in the server's spelling
  (sglang:) and gpu-node-02 in the other one (sglang_), so every query is seen to read both;
- sglang-router 0.3.2's /metrics as captured (tests/fixtures/upstream/sglang-router-0.3.2/metrics/):
  healthy, then worker 2 failed by the health checks, then removed;
- node_exporter's textfile: the GPU collector's own render() on the real H200 capture, with one XID
  line in the driver's format appearing on gpu-node-01 halfway through;
- Prometheus's up for each target.
The recorded series the panels read (files/monitoring/rules/) are backfilled by the real tool too,
`promtool tsdb create-blocks-from rules` against that Prometheus, which is then restarted on both.
The data ends an hour ago: Prometheus's own rule evaluation (it runs with the repo's rule files) sees
none of it, so a recorded series found at the end of the data can only come from the backfill."""
import ast
import json
import math
import random
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import FIXTURES, PINNED, ROOT, _extracted, labels_dict_keys, load_collector

GRAFANA = ROOT / "files/monitoring/grafana"
DASHBOARD = GRAFANA / "dashboards/sglang-fleet.json"
RULE_FILES = sorted((ROOT / "files/monitoring/rules").glob("*.yml"))
ROUTER_CAPTURES = FIXTURES / "upstream/sglang-router-0.3.2/metrics"
SMI = FIXTURES / "nvidia-smi"

STEP, STEPS = 15, 61  # 15 minutes of samples, every 15 s (fleet_monitoring_scrape_interval)
MODEL = "/models/lab-org/lab-model"
SERVERS = {  # host: (address, spelling)
    "gpu-node-01": ("10.0.0.11", "sglang:"),
    "gpu-node-02": ("10.0.0.12", "sglang_"),
}
ROUTER = ("router-01", "10.0.0.10:29000")
HOSTS = set(SERVERS)
# Grafana's values for a 15 s scrape interval (the data source's timeInterval): $__rate_interval is
# max(4 x scrape interval, $__interval + scrape interval); All of a multi-value variable is (a|b).
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "15m"}
# What each panel must show, by title: the hosts its series carry (None: no host label to check).
PANELS = {
    "Fleet output throughput (generation tokens/s)": HOSTS,
    "Time to first token (TTFT) p50 / p90 / p99": HOSTS,
    "Inter-token latency (ITL) p50 / p90 / p99": HOSTS,
    "Queue: requests waiting and running": HOSTS,
    "KV-cache use": HOSTS,
    "EAGLE-3 accept length per host": HOSTS,
    "Router worker health": {ROUTER[0]},
    "Scrape targets up": HOSTS | {ROUTER[0]},
    "GPU utilisation": HOSTS,
    "GPU memory used": HOSTS,
    "GPU temperature": HOSTS,
    "GPU XID and uncorrectable ECC errors": HOSTS,
    "GPUs visible / expected": HOSTS,
}
UNFILTERED = {"Router worker health", "Scrape targets up"}  # fleet-wide: the routers are no GPU host


def tool(name):
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} is missing: bin/setup installs it (Debian's prometheus package)")
    return path


def load_dashboard():
    return json.loads(DASHBOARD.read_text())


def targets(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


# --- the sources' own names -------------------------------------------------------------------------

def sglang_declared(upstream):
    """collector.py's metric names, and the default buckets of the TTFT and ITL histograms."""
    source = (upstream / "sglang/srt/metrics/collector.py").read_text()
    names = set(re.findall(r'name="sglang:([a-z_]+)"', source))
    buckets = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.startswith("bucket_"):
                    buckets[target.id[len("bucket_"):]] = ast.literal_eval(node.value)
    return names, buckets


# --- series ------------------------------------------------------------------------------------------

LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Series:
    """Families of samples over time, written out as OpenMetrics."""

    def __init__(self):
        self.families = {}  # family: {"type": t, "series": {(name, labels): [(t, value)]}}

    def add(self, family, kind, name, labels, stamp, value):
        entry = self.families.setdefault(family, {"type": kind, "series": {}})
        entry["series"].setdefault((name, tuple(labels.items())), []).append((stamp, value))

    def add_exposition(self, text, extra, stamp):
        """A Prometheus text exposition as a scrape stores it: its samples, with the target's labels."""
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
            assert match, line
            name, labels, value = match.groups()
            family, kind = name, "unknown"
            for suffix in ("", "_total", "_bucket", "_sum", "_count"):
                if suffix == "" or name.endswith(suffix):
                    base = name[:len(name) - len(suffix)] if suffix else name
                    if base in types or (suffix == "_total" and name in types):
                        family, kind = (base, types[base]) if base in types else (name, types[name])
                        break
            if kind == "counter" and family.endswith("_total"):
                family = family[:-len("_total")]  # OpenMetrics names a counter's family without it
            pairs = dict(LABEL.findall(labels or ""))
            self.add(family, kind, name, dict(pairs, **extra), stamp, float(value))

    def openmetrics(self):
        lines = []
        for family, entry in self.families.items():
            lines.append(f"# TYPE {family} {entry['type']}")
            for (name, labels), samples in entry["series"].items():
                text = ",".join('%s="%s"' % pair for pair in labels)
                for stamp, value in samples:
                    lines.append(f"{name}{{{text}}} {value!r} {stamp}")
        return "\n".join(lines) + "\n# EOF\n"


def fleet_series(upstream, end):
    series = Series()
    names, buckets = sglang_declared(upstream)
    srt = upstream / "sglang/srt"
    scheduler_keys = labels_dict_keys(srt / "managers/scheduler_metrics_mixin.py", "engine_type")
    tokenizer_keys = labels_dict_keys(srt / "managers/tokenizer_manager.py", "model_name")
    scheduler_values = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                        "moe_ep_rank": "0"}
    assert set(scheduler_keys) == set(scheduler_values), scheduler_keys
    assert tokenizer_keys == ["model_name"], tokenizer_keys
    used = {"generation_tokens_total", "prompt_tokens_total", "time_to_first_token_seconds",
            "inter_token_latency_seconds", "num_queue_reqs", "num_running_reqs", "token_usage",
            "spec_accept_length", "gen_throughput"}
    assert used - names == set(), "not in sglang 0.5.9's collector.py"
    histograms = {"time_to_first_token_seconds": (buckets["time_to_first_token"], 0.35, 0.6),
                  "inter_token_latency_seconds": (buckets["inter_token_latency"], 0.012, 0.4)}
    start = end - (STEPS - 1) * STEP
    rng = random.Random(25)

    router = load_router_phases()
    collector = load_collector()
    gpus = collector.parse_query((SMI / "h200-monitoring-noheader-nounits.csv").read_text())
    kernel_log = (SMI / "h200-kernel-log.txt").read_text().splitlines()
    xid_line = "[ 5012.118402] NVRM: Xid (PCI:0000:00:06): 79, pid=2041, name=python3, GPU has fallen off the bus."

    state = {}
    for index, (host, (address, prefix)) in enumerate(sorted(SERVERS.items())):
        target = {"job": "sglang_server", "instance": f"{address}:30000", "host": host, "unit": host}
        node = {"job": "node", "instance": f"{address}:9100", "host": host}
        sched = dict(target, **scheduler_values)
        tok = dict(target, model_name=MODEL)
        state[host] = {"generation_tokens_total": 0.0, "prompt_tokens_total": 0.0,
                       **{name: ([0] * (len(b) + 1), 0.0) for name, (b, _m, _s) in histograms.items()}}
        for step in range(STEPS):
            stamp = start + step * STEP
            counters = state[host]
            tokens_per_s = (2400 - 300 * index) * (1 + 0.1 * math.sin(step / 6))
            counters["generation_tokens_total"] += tokens_per_s * STEP
            counters["prompt_tokens_total"] += 3 * tokens_per_s * STEP
            for name in ("generation_tokens_total", "prompt_tokens_total"):
                base = name[:-len("_total")]
                series.add(prefix + base, "counter", prefix + name, tok, stamp, counters[name])
            requests = 40 + 10 * index
            for name, (bounds, median, sigma) in histograms.items():
                counts, total = counters[name]
                observations = requests if name.startswith("time_to_first") else int(tokens_per_s * STEP / 200)
                for _ in range(observations):
                    seen = rng.lognormvariate(math.log(median * (1 + 0.3 * index)), sigma)
                    total += seen
                    for i, bound in enumerate(bounds):
                        if seen <= bound:
                            counts[i] += 1
                    counts[-1] += 1
                counters[name] = (counts, total)
                for bound, count in zip([*map(repr, map(float, bounds)), "+Inf"], counts):
                    series.add(prefix + name, "histogram", f"{prefix}{name}_bucket", dict(tok, le=bound), stamp, count)
                series.add(prefix + name, "histogram", f"{prefix}{name}_sum", tok, stamp, total)
                series.add(prefix + name, "histogram", f"{prefix}{name}_count", tok, stamp, counts[-1])
            gauges = {"num_queue_reqs": float(max(0, round(4 + 3 * math.sin(step / 4) + index))),
                      "num_running_reqs": float(48 + index * 8), "token_usage": 0.55 + 0.2 * index,
                      "spec_accept_length": 3.1 - 0.4 * index + 0.05 * math.sin(step),
                      "gen_throughput": tokens_per_s}
            for name, value in gauges.items():
                series.add(prefix + name, "gauge", prefix + name, sched, stamp, value)
            series.add("up", "gauge", "up", target, stamp, 1.0)
            series.add("up", "gauge", "up", node, stamp, 1.0)
            lines = kernel_log + ([xid_line] if index == 0 and step >= STEPS // 2 else [])
            counts, _ = collector.count_xids(lines, {})
            text = collector.render(gpus, 0, 1, counts, ("dmesg", True))
            series.add_exposition(text, node, stamp)

    router_target = {"job": "sglang_router", "instance": ROUTER[1], "host": ROUTER[0]}
    for step in range(STEPS):
        stamp = start + step * STEP
        phase = router[min(len(router) - 1, step * len(router) // STEPS)]
        series.add_exposition(phase, router_target, stamp)
        series.add("up", "gauge", "up", router_target, stamp, 1.0)
    return series


def load_router_phases():
    """The three captures, in order, with the lab's worker URLs replaced by the fleet's servers'."""
    capture = json.loads((ROUTER_CAPTURES / "capture.json").read_text())
    fleet = [f"http://{address}:30000" for address, _ in sorted(SERVERS.values())]
    phases = []
    for name in ("metrics-healthy.txt", "metrics-unhealthy.txt", "metrics-removed.txt"):
        assert name in capture["steps"]
        text = (ROUTER_CAPTURES / name).read_text()
        for lab, real in zip(capture["worker_urls"], fleet):
            text = text.replace(f'"{lab}"', f'"{real}"')
        phases.append(text)
    return phases


# --- the real Prometheus -----------------------------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


class Prometheus:
    def __init__(self, data, config, log):
        self.data, self.config, self.log = data, config, log
        self.process = self.output = None
        self.url = None

    def start(self, timeout=30):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.output = open(self.log, "ab")
        self.process = subprocess.Popen(
            [tool("prometheus"), f"--storage.tsdb.path={self.data}", f"--config.file={self.config}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
            stdout=subprocess.DEVNULL, stderr=self.output)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if get(self.url + "/-/ready", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        pytest.fail(f"prometheus not ready within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.output:
            self.output.close()
        self.process = self.output = None

    def api(self, path, **params):
        status, body = get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}")
        reply = json.loads(body)
        assert status == 200 and reply["status"] == "success", body
        return reply["data"]

    def query(self, expr, at):
        data = self.api("query", query=expr, time=at)
        assert data["resultType"] == "vector", data
        return data["result"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    upstream_sglang = _extracted("sglang", PINNED["sglang"])
    end = (int(time.time()) - 3600) // STEP * STEP  # an hour ago: out of reach of live rule evaluation
    start = end - (STEPS - 1) * STEP
    series = fleet_series(upstream_sglang, end)
    (tmp / "fleet.om").write_text(series.openmetrics())
    data = tmp / "data"
    promtool = tool("promtool")
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "fleet.om"), str(data)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    rules = tmp / "rules"
    rules.mkdir()
    for path in RULE_FILES:
        shutil.copy(path, rules / path.name)
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": f"{STEP}s", "evaluation_interval": f"{STEP}s"},
                                      "rule_files": [str(rules / "*.yml")]}))
    done = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    server = Prometheus(data, config, tmp / "prometheus.log")
    try:
        server.start()
        recorded = tmp / "recorded"
        done = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "rules", f"--url={server.url}", f"--start={start}",
             f"--end={end + 1}", f"--eval-interval={STEP}s", f"--output-dir={recorded}",
             *map(str, RULE_FILES)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        server.stop()
        blocks = [path for path in recorded.iterdir() if path.is_dir()]
        assert blocks, done.stdout + done.stderr
        for block in blocks:
            shutil.move(str(block), str(data / block.name))
        server.start()
        server.end = end
        yield server
    finally:
        server.stop()


# --- the tests ---------------------------------------------------------------------------------------

def expand(expr, host):
    for name, value in GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    return expr.replace("$host", host).replace("${host}", host)


def all_hosts():
    return "(" + "|".join(sorted(HOSTS)) + ")"


def test_dashboard_is_valid_grafana_json_with_its_variables():
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"] and dashboard["title"]
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    host = variables["host"]
    assert host["type"] == "query" and host["multi"] and host["includeAll"]
    assert host["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert re.fullmatch(r"label_values\((.+), host\)", host["query"]["query"])
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_panel_and_target_reads_the_datasource_variable():
    dashboard = load_dashboard()
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
    for panel, target in targets(dashboard):
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert target["expr"].strip(), panel["title"]


def test_panels_cover_the_issue_s_list():
    dashboard = load_dashboard()
    assert [panel["title"] for panel in dashboard["panels"]] == list(PANELS)
    exprs = " ".join(target["expr"] for _panel, target in targets(dashboard))
    for name in ("generation_tokens_total", "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket"):
        assert f'{{__name__=~"sglang[:_]{name}"' in exprs, name
    for record in ("instance:sglang_num_queue_reqs:max", "instance:sglang_token_usage:max",
                   "instance:sglang_spec_accept_length:max"):
        assert record in exprs
    assert "histogram_quantile" in exprs and "smg_worker_health" in exprs
    for name in ("nvidia_smi_utilization_gpu_ratio", "nvidia_smi_memory_used_bytes",
                 "nvidia_smi_temperature_gpu_celsius", "nvidia_smi_xid_errors_total", "nvidia_smi_ecc_errors_total"):
        assert name in exprs, name


def test_queries_read_both_spellings_or_a_recording_rule(upstream_sglang):
    """No raw sglang:NAME selector (it misses sglang_NAME); every name is sglang 0.5.9's or a rule's."""
    exprs = " ".join(target["expr"] for _panel, target in targets(load_dashboard()))
    assert not re.search(r"(?<![:\w])sglang:[a-z]", exprs)
    names, _buckets = sglang_declared(upstream_sglang)
    used = {re.sub(r"_bucket$", "", name) for name in re.findall(r'sglang\[:_\]([a-z_]+)', exprs)}
    assert used and used - names == set()
    recorded = {rule["record"] for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
                for rule in group["rules"] if "record" in rule}
    assert set(re.findall(r"\b(instance:sglang_[a-z_]+:[a-z0-9]+)", exprs)) - recorded == set()


def defaults_user():
    return yaml.safe_load((ROOT / "roles/fleet_monitoring/defaults/main.yml").read_text())["fleet_monitoring_web_user"]


def test_provisioning_files():
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/sglang-fleet.yml").read_text())
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"]
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    (prometheus,) = source["datasources"]
    assert prometheus["type"] == "prometheus" and prometheus["url"] == "http://PROMETHEUS:9090"
    # Prometheus answers only with basic auth: its user, the password from Grafana's environment.
    assert (prometheus["basicAuth"], prometheus["basicAuthUser"]) == (True, defaults_user())
    assert prometheus["secureJsonData"] == {"basicAuthPassword": "$FLEET_MONITORING_WEB_PASSWORD"}
    defaults = yaml.safe_load((ROOT / "roles/fleet_monitoring/defaults/main.yml").read_text())
    assert prometheus["jsonData"]["timeInterval"] == defaults["fleet_monitoring_scrape_interval"] == f"{STEP}s"


def test_host_variable_lists_the_fleet_s_hosts(prometheus):
    host = {var["name"]: var for var in load_dashboard()["templating"]["list"]}["host"]
    match = re.fullmatch(r"label_values\((.+), host\)", host["query"]["query"]).group(1)
    values = prometheus.api("label/host/values", **{"match[]": match, "start": prometheus.end - 900,
                                                    "end": prometheus.end})
    assert set(values) == HOSTS


@pytest.mark.parametrize("title", list(PANELS))
def test_every_panel_query_returns_series_from_prometheus(prometheus, title):
    (panel,) = [panel for panel in load_dashboard()["panels"] if panel["title"] == title]
    for target in panel["targets"]:
        expr = expand(target["expr"], all_hosts())
        result = prometheus.query(expr, prometheus.end)
        assert result, f"{title} [{target['refId']}]: no series for {expr}"
        assert all(math.isfinite(float(row["value"][1])) for row in result), (expr, result)
        hosts = {row["metric"]["host"] for row in result if "host" in row["metric"]}
        if hosts:
            assert hosts == PANELS[title], (expr, hosts)
        if title not in UNFILTERED and hosts:
            one = prometheus.query(expand(target["expr"], "gpu-node-02"), prometheus.end)
            assert one and {row["metric"].get("host") for row in one} == {"gpu-node-02"}, expr


def test_panels_show_what_the_series_say(prometheus):
    """A few values: the router's three states, the XID on gpu-node-01 only, percentiles in range."""
    def values(title, ref="A", by=("host",)):
        (panel,) = [panel for panel in load_dashboard()["panels"] if panel["title"] == title]
        (target,) = [target for target in panel["targets"] if target["refId"] == ref]
        return {tuple(row["metric"].get(key) for key in by): float(row["value"][1])
                for row in prometheus.query(expand(target["expr"], all_hosts()), prometheus.end)}

    assert values("Router worker health", by=("worker",)) == {("http://10.0.0.11:30000",): 1.0,
                                                             ("http://10.0.0.12:30000",): -1.0}
    assert values("GPU XID and uncorrectable ECC errors") == {("gpu-node-01",): 1.0, ("gpu-node-02",): 0.0}
    ttft = values("Time to first token (TTFT) p50 / p90 / p99")
    assert 0.2 < ttft[("gpu-node-01",)] < 0.4 < ttft[("gpu-node-02",)] < 0.6
    throughput = values("Fleet output throughput (generation tokens/s)")
    assert 2000 < throughput[("gpu-node-01",)] < 2800 and 1700 < throughput[("gpu-node-02",)] < 2400
    assert values("KV-cache use") == pytest.approx({("gpu-node-01",): 0.55, ("gpu-node-02",): 0.75})


def test_a_query_that_reads_nothing_fails(prometheus):
    """The check above can fail: one spelling only, a name sglang does not serve."""
    for expr in ('sum by (host) (rate(sglang:generation_tokens_total{host="gpu-node-02"}[1m]))',
                 'histogram_quantile(0.9, sum by (le) (rate({__name__=~"sglang[:_]time_to_first_token_bucket"}[1m])))'):
        assert prometheus.query(expr, prometheus.end) == [], expr
