#!/usr/bin/env python3
"""The router stage's host side on a real host (Ubuntu 24.04, its Python 3.12), without systemd.

    python3 tests/device/router_real_host.py WHEEL_DIR OUT_DIR

Builds the router's venv as the role does (python3 -m venv, sglang-router 0.3.2 from WHEEL_DIR), runs
the role's launcher twice: --check (the flag lint, with the installed router's parser) on a bad and
on a good command line, then for real with --key-file, in front of two workers (the lab's server
fixture on 127.0.0.2 and 127.0.0.3, with sglang 0.5.9's parser from WHEEL_DIR for its flag lint).
With load running through the router it then does what the server stage does to a worker around a
restart, with the stage's own module code: out of the router (sglang_router_worker), drain
(sglang_server_drain), restart, back in. Records the argv the host shows for the router, the
router's worker list, each step's figures and the load's counts to OUT_DIR/router.json.
Everything listens on 127.0.0.0/8 only.
"""
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = "real-host-router-key-5c2a"
WORKERS = ["http://127.0.0.2:30000", "http://127.0.0.3:30000"]
ROUTER = "http://127.0.0.4:30090"


def load_module(name, path):
    # The modules import the project's module_utils as ansible.module_utils.<name>, as on a managed host.
    import ansible.module_utils
    if str(ROOT / "plugins/module_utils") not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(str(ROOT / "plugins/module_utils"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_http(url, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:
            time.sleep(0.5)
    raise SystemExit("%s never answered" % url)


def main(wheels, out):
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="router-real-host-"))
    record = {"host": {"platform": platform.platform(), "python": platform.python_version()}}
    venv = work / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    subprocess.run(pip + ["sglang-router==0.3.2"], check=True)
    subprocess.run(pip + ["--no-deps", "sglang==0.5.9"], check=True)  # the server fixture's parser
    record["venv_seconds"] = round(time.monotonic() - started, 1)
    python = str(venv / "bin/python")
    launcher = str(ROOT / "roles/sglang_router/files/sglang_router_launch.py")
    argv = ["--host", "127.0.0.4", "--port", "30090", "--policy", "cache_aware",
            "--prometheus-host", "127.0.0.4", "--prometheus-port", "29000",
            "--health-check-interval-secs", "5", "--health-check-timeout-secs", "5",
            "--health-failure-threshold", "3", "--health-success-threshold", "2",
            "--retry-max-retries", "5", "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "30000",
            "--request-timeout-secs", "1800", "--worker-urls", *WORKERS]
    bad = subprocess.run([python, launcher, "--check", "--", *argv, "--no-such-flag"], capture_output=True, text=True)
    good = subprocess.run([python, launcher, "--check", "--", *argv], capture_output=True, text=True)
    in_argv = subprocess.run([python, launcher, "--check", "--", *argv, "--api-key", "x"], capture_output=True,
                             text=True)
    record["lint"] = {"bad_rc": bad.returncode, "bad_message": bad.stderr.strip().splitlines()[-1:],
                      "good_rc": good.returncode, "parsed_worker_urls": json.loads(good.stdout)["worker_urls"],
                      "api_key_in_argv_rc": in_argv.returncode, "api_key_in_argv_message": in_argv.stderr.strip()}

    # Two workers: the lab's server fixture, as the lab runs it (its flag lint reads sglang's parser).
    fixture_dir = work / "fixture"
    fixture_dir.mkdir()
    (fixture_dir / "sglang_fleet_lab_server.py").write_text((ROOT / "files/lab/sglang_lab_server.py").read_text())
    (fixture_dir / "sglang_fleet_lab_args.py").write_text((ROOT / "plugins/module_utils/sglang_args.py").read_text())
    config = work / "server.json"
    config.write_text(json.dumps({"mode": "healthy", "startup_seconds": 1, "tokens_per_second": 200}))
    env = dict(os.environ, PYTHONPATH=str(fixture_dir), LAB_SERVER_CONFIG=str(config))
    keyfile = work / "api-key"
    keyfile.write_text(KEY + "\n")
    keyfile.chmod(0o640)
    config_file = work / "server-key.yaml"
    config_file.write_text(json.dumps({"api-key": KEY}) + "\n")
    servers = {}

    def start_server(url):
        host, port = url[7:].split(":")
        servers[url] = subprocess.Popen(
            [python, "-m", "sglang_fleet_lab_server", "--model-path", "/models/nvidia/Kimi-K2.5-NVFP4", "--tp", "8",
             "--host", host, "--port", port, "--config", str(config_file)],
            env=env, stderr=open(work / ("server-%s.log" % host), "a"))
        wait_http(url + "/health")

    for url in WORKERS:
        start_server(url)
    log = open(work / "router.log", "w")
    router = subprocess.Popen([python, launcher, "--key-file", str(keyfile), "--", *argv], stdout=log, stderr=log)
    wait_http(ROUTER + "/liveness")
    worker_mod = load_module("sglang_router_worker", ROOT / "plugins/modules/sglang_router_worker.py")
    drain_mod = load_module("sglang_server_drain", ROOT / "plugins/modules/sglang_server_drain.py")
    base = {"router_url": ROUTER, "api_key": KEY, "timeout": 60, "router_down_ok": False}
    _, listed, waited = worker_mod.ensure(dict(base, state="query", url=None))
    deadline = time.monotonic() + 60
    while len([w for w in listed if w["healthy"]]) < 2 and time.monotonic() < deadline:
        time.sleep(1)
        _, listed, _ = worker_mod.ensure(dict(base, state="query", url=None))
    record["workers_at_start"] = [{"url": w["url"], "healthy": w["healthy"]} for w in listed]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    cmdline = Path("/proc/%d/cmdline" % router.pid).read_bytes().replace(b"\0", b" ").decode()
    record["key_in_ps"] = KEY in ps
    record["key_in_router_cmdline"] = KEY in cmdline
    record["router_cmdline_title"] = cmdline.strip()[:60]

    # Load through the router while the first worker leaves, drains, restarts and comes back.
    load_out = work / "load.json"
    stop = work / "load.stop"
    load = subprocess.Popen([sys.executable, str(ROOT / "files/lab/router_load.py"), "--url", ROUTER,
                             "--out", str(load_out), "--key-file", str(keyfile), "--concurrency", "4",
                             "--max-requests", "3000", "--max-seconds", "120", "--stop-file", str(stop)])
    time.sleep(3)
    steps = {}
    target = WORKERS[0]
    changed, _, steps["out_seconds"] = worker_mod.ensure(dict(base, state="absent", url=target))
    steps["out_changed"] = changed
    steps["drain"] = drain_mod.drain({"url": target, "api_key": KEY, "timeout": 60, "settle": 2, "interval": 0.5,
                                      "unreachable_ok": True})
    servers[target].terminate()
    servers[target].wait(timeout=30)
    start_server(target)
    changed, listed, steps["in_seconds"] = worker_mod.ensure(dict(base, state="present", url=target))
    steps["in_changed"] = changed
    time.sleep(3)
    stop.write_text("")
    load.wait(timeout=60)
    record["restart"] = steps
    record["workers_at_end"] = [{"url": w["url"], "healthy": w["healthy"]} for w in listed]
    summary = json.loads(load_out.read_text())
    record["load"] = {k: summary[k] for k in ("sent", "ok", "failed", "errors", "seconds", "concurrency",
                                              "worker_lists")}
    record["stopped_worker_said"] = [line for line in (work / "server-127.0.0.2.log").read_text().splitlines()
                                     if "in flight" in line]
    router.terminate()
    for process in servers.values():
        process.terminate()
    (out / "router.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
