"""The health gate against a real HTTP server on loopback."""
import threading
from http.server import ThreadingHTTPServer

import pytest

import sglang_health_gate as gate
from conftest import JsonHandler


class Handler(JsonHandler):
    def do_GET(self):
        state = self.server.state
        if self.path == "/health":
            state["polls"] += 1
            return self.reply(200 if state["polls"] > state["unhealthy_polls"] else 503, {})
        return self.reply(200, {"data": [{"id": m} for m in state["models"]]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        return self.reply(200, {"choices": [{"message": {"content": self.server.state["answer"]}}]})


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.state = {"polls": 0, "unhealthy_polls": 2, "models": ["/models/k"], "answer": "42"}
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


def params(server, **over):
    p = {"url": "http://127.0.0.1:%d" % server.server_address[1], "service": "", "model": "/models/k",
         "prompt": "What is 17 + 25?", "expect": r"\b42\b", "api_key": "", "timeout": 30}
    p.update(over)
    return p


def test_waits_for_health_then_checks_model_and_answer(server):
    p = params(server)
    gate.wait_healthy(None, p, sleep=lambda s: None)
    assert server.state["polls"] == 3
    assert gate.check_model_and_answer(p) == (["/models/k"], "42")


def test_garbage_is_caught(server):
    server.state["answer"] = "¿¿¿ ####"
    with pytest.raises(gate.GateError, match="known-answer check failed"):
        gate.check_model_and_answer(params(server))


def test_a_missing_model_is_named(server):
    server.state["models"] = ["other"]
    with pytest.raises(gate.GateError, match="/v1/models lists other, not /models/k"):
        gate.check_model_and_answer(params(server))


def test_never_healthy_times_out(server):
    server.state["unhealthy_polls"] = 10 ** 6
    ticks = iter(range(0, 10 ** 6, 5))
    with pytest.raises(gate.GateError, match="/health did not answer 200 within 30s"):
        gate.wait_healthy(None, params(server), sleep=lambda s: None, clock=lambda: next(ticks))


def test_a_crash_is_caught_without_waiting_for_the_timeout(server):
    class Module:
        restarts = iter([0, 0, 1])

        def run_command(self, args):
            return 0, "ActiveState=activating\nNRestarts=%d\n" % next(self.restarts), ""

    server.state["unhealthy_polls"] = 10 ** 6
    with pytest.raises(gate.GateError, match="crashed and was restarted"):
        gate.wait_healthy(Module(), params(server, service="sglang"), sleep=lambda s: None)


def test_a_crash_is_caught_while_systemd_waits_to_restart_it(server):
    """After a crash the unit sits in auto-restart for RestartSec (30 s) before NRestarts moves."""
    class Module:
        states = iter(["running", "running", "auto-restart"])

        def run_command(self, args):
            return 0, "ActiveState=activating\nSubState=%s\nNRestarts=0\n" % next(self.states), ""

    server.state["unhealthy_polls"] = 10 ** 6
    with pytest.raises(gate.GateError, match="crashed while starting"):
        gate.wait_healthy(Module(), params(server, service="sglang"), sleep=lambda s: None)
