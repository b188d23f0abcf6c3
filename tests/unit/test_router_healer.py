"""The router host's drain-lease healer against a fake sglang-router 0.3.2 (the worker API's
test fixture) and a fake worker on loopback: it puts back only the worker of a lease that ran out and
that answers /health and the known answer, with the router's key; it refuses an unhealthy one and says
why; it leaves a failed lease, a running lease and a worker out by hand alone."""
import importlib.util
import json
import shutil
import tempfile
import threading
from http.server import ThreadingHTTPServer

from pathlib import Path

import pytest
import yaml

from ansible.module_utils import drain_lease as leases
from conftest import JsonHandler, ROOT
from test_sglang_router_worker import KEY, router  # noqa: F401 (the fake router fixture)



def installed_healer():
    """The healer as the router role lays it out: its file with the module_utils files the role's vars name
    (__sglang_router_healer_libs) beside it, in a directory of its own, imported from there."""
    libs = yaml.safe_load((ROOT / "roles/sglang_router/vars/main.yml").read_text())["__sglang_router_healer_libs"]
    where = Path(tempfile.mkdtemp(prefix="healer-"))
    shutil.copy(ROOT / "roles/sglang_router/files/sglang_router_healer.py", where)
    for name in libs:
        shutil.copy(ROOT / "plugins/module_utils" / name, where)
    spec = importlib.util.spec_from_file_location("sglang_router_healer", where / "sglang_router_healer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert Path(module.api.__file__).parent == where and Path(module.leases.__file__).parent == where
    return module


healer = installed_healer()
MODEL = "/models/nvidia/Kimi-K2.5-NVFP4"


class Worker(JsonHandler):
    def do_GET(self):
        self.server.keys.append(self.headers.get("Authorization"))
        if self.path == "/health":
            return self.reply(self.server.health, {})
        return self.reply(200, {"data": [{"id": MODEL}]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        return self.reply(200, {"choices": [{"message": {"content": self.server.answer}}]})


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Worker)
    httpd.health, httpd.answer, httpd.keys = 200, "42", []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.url = "http://127.0.0.1:%d" % httpd.server_address[1]
    yield httpd
    httpd.shutdown()


def config(router, tmp_path):  # noqa: F811
    return {"router_url": router.url, "key_file": "", "lease_dir": str(tmp_path), "model": MODEL,
            "prompt": "What is 17 + 25? Reply with the number only.", "expect": r"\b42\b", "timeout": 5}


def lease_on(url, until_from_now, state="draining", now=10_000.0):
    return dict(leases.new(url, "ops@ctl 2026-12-01T11:00:00Z", "gpu-1", 60, now=now + until_from_now - 60),
                state=state)


def urls(router):  # noqa: F811
    return sorted(w["url"] for w in router.state.values())


def test_an_expired_lease_of_a_worker_fit_to_serve_puts_it_back_with_one_line(router, server, tmp_path):  # noqa: F811
    leases.write(str(tmp_path), lease_on(server.url, -1))
    said = []
    outcome = healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0, log=said.append)
    assert outcome == {server.url: "healed"}
    assert urls(router) == sorted(["http://10.0.0.1:30000", server.url])
    assert router.posted == [{"url": server.url, "api_key": KEY}]
    assert server.keys and set(server.keys) == {"Bearer " + KEY}  # asked with the router's key
    assert leases.read_all(str(tmp_path)) == []
    assert len(said) == 1 and said[0].startswith("sglang-router-healer: put %s back into the router" % server.url)
    assert "run ops@ctl 2026-12-01T11:00:00Z (gpu-1)" in said[0]
    # The next pass has nothing to do.
    assert healer.heal(config(router, tmp_path), KEY, log=said.append) == {} and len(said) == 1


@pytest.mark.parametrize("health, answer, why", [
    (503, "42", "HTTPError: HTTP Error 503"),
    (200, "41", "known-answer check failed"),
])
def test_an_unfit_worker_is_left_out_and_the_line_says_why(router, server, tmp_path, health, answer, why):  # noqa: F811
    server.health, server.answer = health, answer
    leases.write(str(tmp_path), lease_on(server.url, -1))
    said = []
    assert healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0, log=said.append) == {server.url: "refused"}
    assert urls(router) == ["http://10.0.0.1:30000"] and router.posted == []
    assert leases.read(str(tmp_path), server.url)["state"] == "draining"  # the next pass tries again
    assert len(said) == 1 and ("left %s out" % server.url) in said[0] and why in said[0], said


def test_a_worker_that_does_not_answer_at_all_is_left_out(router, tmp_path):  # noqa: F811
    leases.write(str(tmp_path), lease_on("http://127.0.0.1:9", -1))
    said = []
    assert healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0, log=said.append) == {
        "http://127.0.0.1:9": "refused"}
    assert "Connection refused" in said[0] and router.posted == []


def test_a_failed_lease_and_a_running_one_are_left_alone_even_when_the_worker_is_fit(router, server, tmp_path):  # noqa: F811
    leases.write(str(tmp_path), lease_on(server.url, -600, state="failed"))
    said = []
    assert healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0, log=said.append) == {server.url: "failed"}
    leases.write(str(tmp_path), lease_on(server.url, +30))
    assert healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0, log=said.append) == {server.url: "wait"}
    assert router.posted == [] and server.keys == [] and said == []  # the worker was not even asked


def test_a_worker_out_by_hand_has_no_lease_and_is_never_touched(router, server, tmp_path):  # noqa: F811
    assert healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0) == {}
    assert router.posted == [] and server.keys == []


def test_a_lease_whose_worker_is_back_is_only_removed(router, tmp_path):  # noqa: F811
    leases.write(str(tmp_path), lease_on("http://10.0.0.1:30000", -1))
    said = []
    assert healer.heal(config(router, tmp_path), KEY, now=lambda: 10_000.0, log=said.append) == {
        "http://10.0.0.1:30000": "in"}
    assert leases.read_all(str(tmp_path)) == [] and router.posted == [] and "is in the router again" in said[0]


def test_decide_reads_the_lease_before_anything_is_asked():
    listed = [{"id": "a", "url": "http://w:1", "healthy": True}]
    assert healer.decide(lease_on("http://w:2", +1), listed, 10_000.0) == "wait"
    assert healer.decide(lease_on("http://w:2", 0), listed, 10_000.0) == "check"  # until is the last second
    assert healer.decide(lease_on("http://w:1", -1), listed, 10_000.0) == "in"
    assert healer.decide(lease_on("http://w:2", -1, state="failed"), listed, 10_000.0) == "failed"
    assert healer.decide(lease_on("http://w:1", -1, state="failed"), listed, 10_000.0) == "in"  # put back by hand


def test_main_reads_the_key_from_its_file_and_fails_when_the_router_is_down(tmp_path, capsys):
    (tmp_path / "key").write_text(KEY + "\n")
    (tmp_path / "leases").mkdir()
    leases.write(str(tmp_path / "leases"), lease_on("http://w:2", -1))
    cfg = {"router_url": "http://127.0.0.1:9", "key_file": str(tmp_path / "key"), "lease_dir": str(tmp_path / "leases"),
           "model": MODEL, "prompt": "q", "expect": "42", "timeout": 1}
    (tmp_path / "healer.json").write_text(json.dumps(cfg))
    assert healer.main(["--config", str(tmp_path / "healer.json")]) == 1
    err = capsys.readouterr().err
    assert "cannot be read, nothing done" in err and KEY not in err
