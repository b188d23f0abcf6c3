#!/usr/bin/env python3
"""Capture what the real sglang-router serves on its Prometheus port, in the states the alert rules read.

    python3 tools/capture_router_metrics.py VENV_PYTHON OUT_DIR

VENV_PYTHON is a venv's python with sglang-router 0.3.2 installed and sglang 0.5.9 (--no-deps, the
lab server fixture's flag lint reads its parser). Two workers (the lab's server fixture) on
127.0.0.0/8, the router in front of them with a 1-second health check; OUT_DIR gets the router's
/metrics text:

  metrics-healthy.txt    both workers healthy, a few requests answered through the router
  metrics-unhealthy.txt  worker 2 stopped, the router's health checks failing it
  metrics-removed.txt    worker 2 taken out through the worker API (DELETE /workers/<id>)

Everything listens on 127.0.0.0/8 only and stops at the end.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def free_port():
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def http(method, url, body=None, seconds=10):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=seconds) as response:
        return response.read().decode()


def wait_for(check, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("timed out waiting for " + what)


def main(python, out):
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="router-metrics-"))
    fixture = work / "fixture"
    fixture.mkdir()
    (fixture / "sglang_fleet_lab_server.py").write_text((ROOT / "files/lab/sglang_lab_server.py").read_text())
    (fixture / "sglang_fleet_lab_args.py").write_text((ROOT / "plugins/module_utils/sglang_args.py").read_text())
    config = work / "server.json"
    config.write_text(json.dumps({"mode": "healthy", "startup_seconds": 0, "tokens_per_second": 2000}))
    env = dict(os.environ, PYTHONPATH=str(fixture), LAB_SERVER_CONFIG=str(config))
    workers = ["http://%s:%d" % (HOST, free_port()) for _ in range(2)]
    router_port, metrics_port = free_port(), free_port()
    router_url = "http://%s:%d" % (HOST, router_port)
    metrics_url = "http://%s:%d/metrics" % (HOST, metrics_port)
    processes = []
    try:
        for url in workers:
            port = url.rsplit(":", 1)[1]
            processes.append(subprocess.Popen(
                [python, "-m", "sglang_fleet_lab_server", "--model-path", "/models/lab-org/lab-model", "--tp", "8",
                 "--host", HOST, "--port", port], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for url in workers:
            wait_for(lambda: http("GET", url + "/health") is not None, 60, url)
        router = subprocess.Popen(
            [python, "-m", "sglang_router.launch_router", "--host", HOST, "--port", str(router_port),
             "--prometheus-host", HOST, "--prometheus-port", str(metrics_port),
             "--health-check-interval-secs", "1", "--health-check-timeout-secs", "1",
             "--health-failure-threshold", "2", "--health-success-threshold", "1",
             "--worker-urls", *workers],
            stdout=open(work / "router.log", "w"), stderr=subprocess.STDOUT)
        processes.append(router)

        def listed():
            return json.loads(http("GET", router_url + "/workers"))["workers"]

        wait_for(lambda: len([w for w in listed() if w["is_healthy"]]) == 2, 60, "both workers healthy")
        for _ in range(4):
            http("POST", router_url + "/v1/chat/completions",
                 {"model": "/models/lab-org/lab-model", "max_tokens": 8,
                  "messages": [{"role": "user", "content": "What is 17 + 25? Reply with the number only."}]})
        time.sleep(2)
        (out / "metrics-healthy.txt").write_text(http("GET", metrics_url))

        processes[1].terminate()
        processes[1].wait(timeout=30)
        wait_for(lambda: [w for w in listed() if w["url"] == workers[1] and not w["is_healthy"]], 60,
                 "worker 2 unhealthy")
        time.sleep(2)
        (out / "metrics-unhealthy.txt").write_text(http("GET", metrics_url))

        worker_id = [w["id"] for w in listed() if w["url"] == workers[1]][0]
        http("DELETE", router_url + "/workers/" + worker_id)
        wait_for(lambda: workers[1] not in [w["url"] for w in listed()], 60, "worker 2 removed")
        time.sleep(2)
        (out / "metrics-removed.txt").write_text(http("GET", metrics_url))
        (out / "capture.json").write_text(json.dumps({
            "what": "sglang-router 0.3.2's /metrics (--prometheus-host, --prometheus-port) in front of two lab "
                    "server fixtures, captured by tools/capture_router_metrics.py",
            "router_argv": router.args[3:],
            "worker_urls": workers,
            "steps": {"metrics-healthy.txt": "both workers healthy, 4 chat completions through the router",
                      "metrics-unhealthy.txt": "worker 2 stopped, failed by the router's health checks",
                      "metrics-removed.txt": "worker 2 then removed with DELETE /workers/<id>"},
        }, indent=1) + "\n")
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
