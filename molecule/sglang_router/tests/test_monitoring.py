"""The monitoring stage over the lab fleet: Debian's real Prometheus and Alertmanager on rt-telemetry,
scraping the servers' /metrics (the lab fixture serves sglang 0.5.9's own names), the real router's
exporter, and node_exporter with the GPU collector on every GPU node. Every dashboard query must return
series here, and a stopped server must fire SglangServerDown after its `for:` and resolve once back.

Prometheus, Alertmanager and node_exporter answer only with basic auth: without it, or with another
password, each says 401; Prometheus scrapes and alerts with it.

These tests run first in the scenario (file order) and leave the fleet as they found it. Prometheus is
asked from its own node (curl there, the password read from the stage's root-only file into curl's
standard input, never a command line); the screenshot's Chromium runs on the controller inside the pod's
network namespace, through a proxy on the monitoring node that adds the credentials, so every request
stays on the pod's loopback."""
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from datetime import datetime

import yaml

from conftest import INVENTORY, ROOT, WORKERS, Load, say, sh, workers
from fleet import report, run_playbook
from leak_scan import leaks

MONITOR = "rt-telemetry"  # after rt-router in the inventory: 127.0.1.5
PROMETHEUS = "http://127.0.1.5:9090"
ALERTMANAGER = "http://127.0.1.5:9093"
SCRAPE = 5  # seconds: fleet_monitoring_scrape_interval and _evaluation_interval in inventory/lab/group_vars
SERVING = {"rt-gpu-1", "rt-gpu-2"}  # rank 0 of each unit: rt-gpu-3 is rank 1 of rt-gpu-2's group
GPU_NODES = {"rt-gpu-1", "rt-gpu-2", "rt-gpu-3"}
MONITOR_UNITS = ["prometheus", "prometheus-alertmanager"]
DASHBOARD = ROOT / "files/monitoring/grafana/dashboards/sglang-fleet.json"
# Grafana's values at a 5 s scrape interval: $__rate_interval is max(4 x scrape, $__interval + scrape).
GRAFANA_VARS = {"$__rate_interval": "20s", "$__interval": "5s", "$__range": "5m"}
# The hosts each panel must show here (the unit test's fleet is a different one).
PANELS = {
    "Fleet output throughput (generation tokens/s)": SERVING,
    "Time to first token (TTFT) p50 / p90 / p99": SERVING,
    "Inter-token latency (ITL) p50 / p90 / p99": SERVING,
    "Queue: requests waiting and running": SERVING,
    "KV-cache use": SERVING,
    "EAGLE-3 accept length per host": SERVING,
    "Router worker health": {"rt-router"},
    "Scrape targets up": GPU_NODES | {"rt-router"},
    "GPU utilisation": GPU_NODES,
    "GPU memory used": GPU_NODES,
    "GPU temperature": GPU_NODES,
    "GPU XID and uncorrectable ECC errors": GPU_NODES,
    "GPUs visible / expected": GPU_NODES,
}
SCREENSHOTS = ROOT / ".cache/lab-monitoring"
PASSWORD = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())["fleet_monitoring_web_password"]
USER = "fleet"
WEB_CONFIG = "/etc/sglang/monitoring-web.yml"
PASSWORD_FILE = "/etc/sglang/monitoring-web.password"
NODE_EXPORTERS = {"rt-gpu-1": "http://127.0.1.1:9100", "rt-gpu-2": "http://127.0.1.2:9100",
                  "rt-gpu-3": "http://127.0.1.3:9100"}


def credentials(user=USER):
    """curl's configuration on its standard input: the user and the password from the stage's file."""
    return "{ printf 'user = \"%s:' ; cat %s; printf '\"\\n'; } | " % (user, PASSWORD_FILE)


# The screenshot's proxy: on the monitoring node, the credentials added to each request to Prometheus.
PROXY = "http://127.0.1.5:19090"
PROXY_SCRIPT = """
import base64, http.server, sys, urllib.error, urllib.request
user, password_file, upstream, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
token = base64.b64encode(("%s:%s" % (user, open(password_file).read().strip())).encode()).decode()
class Proxy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        request = urllib.request.Request(upstream + self.path, headers={"Authorization": "Basic " + token})
        try:
            reply = urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as error:
            reply = error
        body = reply.read()
        self.send_response(reply.code)
        if reply.headers.get("Content-Type"):
            self.send_header("Content-Type", reply.headers["Content-Type"])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("127.0.1.5", port), Proxy).serve_forever()
"""


def api(path, base=PROMETHEUS, **params):
    """Prometheus's (or Alertmanager's) HTTP API, asked on the monitoring node."""
    url = "%s/api/%s%s" % (base, path, "?" + urllib.parse.urlencode(params) if params else "")
    body = json.loads(sh(MONITOR, credentials() + "curl -sf -m 30 -K - '%s'" % url).stdout)
    if base == PROMETHEUS:
        assert body["status"] == "success", body
        return body["data"]
    return body


def query(expr):
    return api("v1/query", query=expr)["result"]


def server_down_alerts():
    return [a for a in api("v1/alerts")["alerts"] if a["labels"]["alertname"] == "SglangServerDown"]


def active_since(alert):
    """When the alert went pending, in seconds since the epoch."""
    return datetime.fromisoformat(alert["activeAt"].replace("Z", "+00:00")).timestamp()


def wait(what, predicate, timeout, step=1.0, explain=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "%s: not within %d s %s" % (what, timeout, explain())
        time.sleep(step)


def targets():
    return [(t["labels"]["job"], t["labels"].get("host"), t["labels"]["instance"], t["health"])
            for t in api("v1/targets", state="active")["activeTargets"]]


def in_pod_network(argv):
    """argv run on the controller in the pod's network namespace (rt-telemetry's), as root or rootless."""
    pid = subprocess.run(["podman", "inspect", "-f", "{{.State.Pid}}", MONITOR], capture_output=True, text=True,
                         check=True).stdout.strip()
    enter = ["nsenter", "-t", pid, "-n", "--"]
    return enter + argv if os.geteuid() == 0 else ["podman", "unshare", *enter, *argv]


def screenshot(url, path):
    """The page as headless Chromium renders it, saved as a PNG, and the text tesseract reads from it.
    Through PROXY: Chromium sends no credentials of its own."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    tesseract = shutil.which("tesseract")
    assert chromium and tesseract, "chromium and tesseract-ocr are missing: bin/setup installs them"
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["podman", "exec", "-i", MONITOR, "sh", "-c", "cat > /tmp/auth_proxy.py"], input=PROXY_SCRIPT,
                   text=True, check=True)
    proxy = subprocess.Popen(["podman", "exec", MONITOR, "sh", "-c", "echo $$ > /tmp/auth_proxy.pid; exec timeout 180 "
                              "python3 /tmp/auth_proxy.py %s %s %s %s" % (USER, PASSWORD_FILE, PROMETHEUS,
                                                                          PROXY.rsplit(":", 1)[1])])
    try:
        wait("the proxy answering", lambda: status(PROXY + "/-/ready") == "200", 30)
        return _screenshot(url, path, chromium, tesseract)
    finally:
        sh(MONITOR, "kill $(cat /tmp/auth_proxy.pid)", check=False)
        proxy.wait(timeout=30)


def _screenshot(url, path, chromium, tesseract):
    with tempfile.TemporaryDirectory() as profile:
        shot = subprocess.run(in_pod_network([
            chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--user-data-dir=" + profile, "--force-device-scale-factor=2", "--window-size=1280,1400",  # every rule group of the page
            "--virtual-time-budget=5000", "--screenshot=" + str(path), url]), capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and path.stat().st_size > 0, shot.stderr[-2000:]
    return subprocess.run([tesseract, str(path), "-"], capture_output=True, text=True, check=True).stdout


def status(url, user=None, wrong_password=None):
    """The HTTP status of a GET from the monitoring node: without credentials, or as the user with the stage's
    password (from its file) or a wrong one, on curl's standard input."""
    config = ""
    if wrong_password:
        config = "printf 'user = \"%s:%s\"\\n' | " % (user, wrong_password)
    elif user:
        config = credentials(user)
    auth = "-K - " if config else ""
    # 000 where nothing listens (yet): curl's own exit status says no more
    return sh(MONITOR, config + "curl -s -o /dev/null -w '%%{http_code}' -m 30 %s'%s'" % (auth, url), check=False).stdout


def test_prometheus_alertmanager_and_node_exporter_answer_only_with_basic_auth():
    urls = {"Prometheus": PROMETHEUS + "/api/v1/query?query=up", "Prometheus's readiness": PROMETHEUS + "/-/ready",
            "Alertmanager": ALERTMANAGER + "/api/v2/status"}
    urls.update({"node_exporter on %s" % host: url + "/metrics" for host, url in NODE_EXPORTERS.items()})
    found = {name: (status(url), status(url, USER, "not-the-password"), status(url, "prometheus"), status(url, USER))
             for name, url in urls.items()}
    assert found == {name: ("401", "401", "401", "200") for name in urls}, found
    # Each daemon's web configuration holds a bcrypt hash, and only root and the prometheus group read it;
    # Prometheus's password is in a file of theirs alone. The password is in no command line, unit or log.
    for node in [MONITOR, *NODE_EXPORTERS]:
        assert sh(node, "stat -c '%%U:%%G %%a' %s" % WEB_CONFIG).stdout.split() == ["root:prometheus", "640"], node
        web = yaml.safe_load(sh(node, "cat %s" % WEB_CONFIG).stdout)
        assert list(web) == ["basic_auth_users"] and web["basic_auth_users"][USER].startswith("$2b$10$"), node
        units = [MONITOR_UNITS, ["prometheus-node-exporter"]][node != MONITOR]
        said = sh(node, "ps -eo args; cat /etc/systemd/system/prometheus*.service.d/*.conf; "
                  "systemctl show -p ExecStart %s; journalctl --no-pager -q %s"
                  % (" ".join(units), " ".join("-u " + u for u in units))).stdout
        assert PASSWORD not in said and "--web.config.file=%s" % WEB_CONFIG in said, node
    assert sh(MONITOR, "stat -c '%%U:%%G %%a' %s" % PASSWORD_FILE).stdout.split() == ["root:prometheus", "640"]
    assert sh(MONITOR, "cat %s" % PASSWORD_FILE).stdout == PASSWORD


def test_a_verbose_check_run_of_the_stage_changes_nothing_and_carries_no_password():
    """--check --diff -vvv over the converged fleet: every host's web configuration hashes the password the
    same way on every run, so nothing would change; and the password is in no event (what AWX stores), fact
    or report line, in any encoding (tools/leak_scan.py)."""
    run = run_playbook(ROOT / "playbooks/monitoring.yml", INVENTORY, check=True, diff=True, extra_args=["-vvv"])
    assert run.rc == 0, run.failure_summary
    assert {host: r.changed for host, r in run.hosts.items() if r.changed} == {}
    assert run.events and not leaks(json.dumps(run.events), PASSWORD)
    assert not leaks(json.dumps([h.facts for h in run.hosts.values()]), PASSWORD)
    assert not leaks(report(run), PASSWORD)


def test_prometheus_scrapes_rank_0_of_each_server_the_router_and_every_gpu_node():
    def all_up():
        found = targets()
        return found if all(health == "up" for *_rest, health in found) else None
    found = wait("every target up", all_up, 60, explain=lambda: [t for t in targets() if t[-1] != "up"])
    assert {(job, host) for job, host, _instance, _health in found} == (
        {("sglang_server", h) for h in SERVING} | {("sglang_router", "rt-router")}
        | {("node", h) for h in GPU_NODES} | {("prometheus", MONITOR), ("alertmanager", MONITOR)})
    # At the addresses the hosts advertise (inventory/lab/group_vars: 127.0.1.N), never 0.0.0.0.
    instances = {(job, host): instance for job, host, instance, _health in found}
    assert instances[("sglang_server", "rt-gpu-1")] == "127.0.1.1:30000"
    assert instances[("sglang_router", "rt-router")] == "127.0.1.4:29000"
    assert instances[("node", "rt-gpu-3")] == "127.0.1.3:9100"
    # Since its first start, Prometheus has scraped these and nothing else: never Debian's own configuration
    # (apt's start at install), whose localhost:9100 as job node once fired NodeDown for no inventory host.
    ever = {(row["metric"]["job"], row["metric"]["instance"])
            for row in query("group by (job, instance) (last_over_time(up[1d]))")}
    assert ever == {(job, instance) for job, _host, instance, _health in found}, ever
    # The servers' own series, in the server's spelling, and the GPU collector's through node_exporter.
    assert {row["metric"]["host"] for row in query('sglang:num_running_reqs{job="sglang_server"}')} == SERVING
    visible = {row["metric"]["host"]: row["value"][1] for row in query("nvidia_smi_gpus_visible")}
    assert visible == {host: "8" for host in GPU_NODES}
    # Prometheus sends its alerts to the stage's Alertmanager.
    assert [a["url"] for a in api("v1/alertmanagers")["activeAlertmanagers"]] == [ALERTMANAGER + "/api/v2/alerts"]


def expand(expr, hosts):
    for name, value in GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    return expr.replace("$host", "(%s)" % "|".join(sorted(hosts)))


def test_every_dashboard_query_returns_series_from_the_lab_fleet(capsys):
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert [panel["title"] for panel in panels] == list(PANELS)
    # Through the router (its own metrics), and straight to each server: the router's cache-aware
    # policy sends one prompt to one worker, and every server's panels need its own requests.
    loads = [Load("monitoring-load", concurrency=1, seconds=120)] + [
        Load("monitoring-load-%s" % host, concurrency=1, seconds=120, url=WORKERS[host]) for host in sorted(SERVING)]
    try:
        time.sleep(5 * SCRAPE)  # a rate window's samples of the load, in every server's counters
        empty = []
        for panel in panels:
            for target in panel["targets"]:
                expr = expand(target["expr"], GPU_NODES)
                rows = query(expr)
                hosts = {row["metric"]["host"] for row in rows if "host" in row["metric"]}
                if not rows or any(not math.isfinite(float(row["value"][1])) for row in rows):
                    empty.append("%s [%s]: %s -> %s" % (panel["title"], target["refId"], expr, rows))
                elif hosts:
                    assert hosts == PANELS[panel["title"]], (panel["title"], target["refId"], hosts)
        assert not empty, "\n".join(empty)
    finally:
        summaries = [load.finish() for load in loads]
    for summary in summaries:
        assert summary["failed"] == 0 and summary["sent"] > 0, summary
    say(capsys, "every dashboard query returned series, under %s requests through the router and to each server"
        % " + ".join(str(summary["sent"]) for summary in summaries))


def test_a_stopped_server_fires_sglang_server_down_after_its_for_and_resolves_once_back(capsys):
    """While the alert waits out its `for:`, a rerun of the stage changes nothing and its report names the
    target that is down."""
    rules = yaml.safe_load((ROOT / "files/monitoring/rules/sglang.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "SglangServerDown"]
    hold = {"s": 1, "m": 60}[rule["for"][-1]] * int(rule["for"][:-1])
    assert not server_down_alerts()
    stopped, stopped_at = time.monotonic(), time.time()
    sh("rt-gpu-1", "systemctl stop sglang")
    try:
        run = run_playbook(ROOT / "playbooks/monitoring.yml", INVENTORY)
        assert run.rc == 0, run.failure_summary
        assert {host: r.changed for host, r in run.hosts.items() if r.changed} == {}
        assert "i %s: Prometheus %s: 7 of 8 targets up (down: sglang_server rt-gpu-1)" % (MONITOR, PROMETHEUS) \
            in report(run)

        def firing():
            return [a for a in server_down_alerts() if a["state"] == "firing"]
        # A scrape to see it down, `for:` to hold, an evaluation round to fire: never before `for:`.
        alerts = wait("SglangServerDown firing", firing, hold + 4 * SCRAPE + 10)
        fired = time.monotonic() - stopped
        # Pending from the first evaluation that saw the server down, after the stop; firing `for:` later.
        pending_since = active_since(alerts[0])
        assert stopped_at - 1 <= pending_since and time.time() - pending_since >= hold and fired >= hold, alerts
        assert [(a["labels"]["host"], a["labels"]["instance"], a["labels"]["severity"]) for a in alerts] == [
            ("rt-gpu-1", "127.0.1.1:30000", "critical")]
        assert "rt-gpu-1" in alerts[0]["annotations"]["summary"]
        # Alertmanager holds it, as an operator's receivers would get it.
        held = wait("the alert in Alertmanager", lambda: [a for a in api("v2/alerts", base=ALERTMANAGER)
                                                          if a["labels"]["alertname"] == "SglangServerDown"], 30)
        assert held[0]["labels"]["host"] == "rt-gpu-1" and held[0]["status"]["state"] == "active"

        def firing_now():
            return [a for a in api("v1/alerts")["alerts"] if a["state"] == "firing"]
        # Prometheus's own alerts page (Debian's package serves the classic UI, under /classic/), between
        # two reads of the API.
        before = firing_now()
        text = screenshot(PROXY + "/classic/alerts", SCREENSHOTS / "alerts-firing.png")
        after = firing_now()
        assert re.search(r"SglangServerDown \(1 active\)", text), text
        # The stop fires SglangServerDown and nothing else. An alert that went pending before the stop may
        # fire meanwhile: the lab's nodes have no kernel log, so GpuXidLogUnreadable fires once the lab's
        # Prometheus has run for its 30 min `for:` (a slow test machine gets there within the scenario).
        caused = [a for a in after if active_since(a) >= stopped_at - 1]
        assert [(a["labels"]["alertname"], a["labels"].get("host")) for a in caused] == [
            ("SglangServerDown", "rt-gpu-1")], after
        # Named with the instance each fired for, and since when: what an operator would look at next.
        earlier_said = ["%s %s (since %s)" % (a["labels"]["alertname"], a["labels"].get("instance", ""), a["activeAt"])
                        for a in after if a["labels"]["alertname"] != "SglangServerDown"]
        # The page counts the firing rules the API lists, as they stood when it was taken: before or after it,
        # where one of those earlier alerts fired or resolved in between.
        counts = {len({a["labels"]["alertname"] for a in alerts}) for alerts in (before, after)}
        assert any(re.search(r"Firing \(%d\)" % count, text) for count in counts), (text, before, after)
    finally:
        sh("rt-gpu-1", "systemctl start sglang")
        back = time.monotonic()
        # Even when the test failed: the next tests need rt-gpu-1 serving and in the router.
        wait("rt-gpu-1 healthy in the router", lambda: workers().get(WORKERS["rt-gpu-1"]), 60)
    wait("SglangServerDown resolved", lambda: not server_down_alerts(), 4 * SCRAPE + 30)
    say(capsys, "SglangServerDown fired %.0f s after the stop (for: %s) and resolved %.0f s after the start; "
        "firing before the stop and still: %s; screenshot: %s"
        % (fired, rule["for"], time.monotonic() - back, ", ".join(earlier_said) or "none",
           SCREENSHOTS / "alerts-firing.png"))
