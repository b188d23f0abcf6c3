"""Adding and removing workers through a router that behaves as sglang-router 0.3.2's worker API
(tests/fixtures/upstream/sglang-router-0.3.2/worker-calls.json): bearer-guarded, 202 Accepted, and the
change shows in GET /workers only a moment later, as the router's job queue applies it."""
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import sglang_router_worker as worker
from conftest import FIXTURES

CAPTURE = json.loads((FIXTURES / "upstream/sglang-router-0.3.2/worker-calls.json").read_text())["router_api"]
KEY = "k-123"


class Router(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, payload=None):
        body = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def later(self, change):
        threading.Timer(self.server.delay, change).start()

    def handle_any(self):
        state = self.server.state
        if self.headers.get("Authorization") != "Bearer " + KEY:
            return self.reply(401)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.command == "GET" and self.path == "/workers":
            return self.reply(200, {"workers": list(state.values()), "total": len(state)})
        if self.command == "POST" and self.path == "/workers":
            self.server.posted.append(body)
            wid = str(uuid.uuid4())
            entry = dict(CAPTURE["GET /workers entry"], id=wid, url=body["url"], is_healthy=False)
            self.later(lambda: state.update({wid: entry}))
            self.later(lambda: entry.update(is_healthy=self.server.worker_healthy))
            return self.reply(202, {"status": "accepted", "worker_id": wid, "url": body["url"]})
        if self.command == "DELETE" and self.path.startswith("/workers/"):
            wid = self.path.rsplit("/", 1)[1]
            self.later(lambda: state.pop(wid, None))
            return self.reply(202, {"status": "accepted"})
        return self.reply(404)

    do_GET = do_POST = do_DELETE = handle_any


@pytest.fixture
def router():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Router)
    httpd.state, httpd.posted, httpd.delay, httpd.worker_healthy = {}, [], 0.3, True
    existing = dict(CAPTURE["GET /workers entry"], id="w1", url="http://10.0.0.1:30000")
    httpd.state["w1"] = existing
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.url = "http://127.0.0.1:%d" % httpd.server_address[1]
    yield httpd
    httpd.shutdown()


def params(router, **kw):
    return dict({"router_url": router.url, "url": "http://10.0.0.2:30000", "state": "present", "api_key": KEY,
                 "timeout": 5, "router_down_ok": False}, **kw)


def test_an_added_worker_counts_once_the_router_lists_it_healthy_and_gets_the_key(router):
    changed, listed, waited = worker.ensure(params(router))
    assert changed and waited >= 0.25
    assert {w["url"]: w["healthy"] for w in listed} == {"http://10.0.0.1:30000": True, "http://10.0.0.2:30000": True}
    assert router.posted == [{"url": "http://10.0.0.2:30000", "api_key": KEY}]  # the router sends it on
    assert worker.ensure(params(router))[0] is False  # in and healthy: nothing to do


def test_a_removed_worker_is_gone_from_the_list_before_the_module_returns(router):
    changed, listed, _ = worker.ensure(params(router, url="http://10.0.0.1:30000/", state="absent"))
    assert changed and listed == []
    assert worker.ensure(params(router, url="http://10.0.0.1:30000", state="absent"))[0] is False


def test_check_mode_changes_nothing(router):
    assert worker.ensure(params(router, state="absent", url="http://10.0.0.1:30000"), check_mode=True)[0]
    assert worker.ensure(params(router), check_mode=True)[0]
    time.sleep(0.5)
    assert list(router.state) == ["w1"] and router.posted == []


def test_check_mode_does_not_wait_on_a_listed_worker_that_is_unhealthy(router):
    """A server that is down stays listed: a check run (and the server stage's plan) finds nothing to
    register and goes on at once; whether it is healthy is the health gate's to say, not a 120 s wait."""
    router.state["w1"]["is_healthy"] = False
    start = time.monotonic()
    changed, listed, waited = worker.ensure(params(router, url="http://10.0.0.1:30000", timeout=3), check_mode=True)
    assert (changed, waited) == (False, 0.0) and time.monotonic() - start < 1
    assert [w["healthy"] for w in listed] == [False]


def test_a_worker_that_never_turns_healthy_fails_with_its_url(router):
    router.worker_healthy = False
    with pytest.raises(worker.RouterError, match=r"http://10.0.0.2:30000 is not healthy in the router 1s"):
        worker.ensure(params(router, timeout=1))


def test_a_wrong_key_is_named_as_such(router):
    with pytest.raises(worker.RouterError, match="api_key is wrong or missing"):
        worker.ensure(params(router, api_key="nope"))


def test_a_router_that_is_not_running_is_told_apart():
    with pytest.raises(worker.RouterDown, match="is the router running"):
        worker.ensure({"router_url": "http://127.0.0.1:9", "url": "http://x:1", "state": "absent", "api_key": "",
                       "timeout": 1, "router_down_ok": True})


# sglang-router 0.3.2, captured (tools/capture_router_worker_keys.py): a worker added through POST /workers
# with a key of its own is sent that key, the others the router's; the router's own API (clients, /workers)
# takes only the router's key.
KEYS = json.loads((FIXTURES / "upstream/sglang-router-0.3.2/worker-keys.json").read_text())


def test_the_real_router_keeps_a_key_per_worker_and_asks_its_own_of_its_clients():
    sent = {port: {call["authorization"] for call in calls} for port, calls in KEYS["calls_during_requests"].items()}
    assert sent == {"31101": {"Bearer K1"}, "31102": {"Bearer K2"}}
    assert KEYS["client_key"]["K1"] == {"chat": 200, "list_workers": 200}
    assert KEYS["client_key"]["K2"] == KEYS["client_key"]["none"] == {"chat": 401, "list_workers": 401}


def test_a_rotated_server_is_added_with_its_own_key_through_the_router_s_key_read_on_its_host(router, tmp_path):
    """A run that rotates the key: the router still runs with the old one (its key file), the server
    restarted with the new. The worker API is asked with the router's key, the worker handed its own."""
    key_file = tmp_path / "sglang-router.key"
    key_file.write_text(KEY + "\n")
    p = worker.with_key_file(params(router, api_key="the-new-key", api_key_file=str(key_file),
                                    worker_api_key="the-new-key"))
    changed, listed, _ = worker.ensure(p)
    assert changed and router.posted == [{"url": "http://10.0.0.2:30000", "api_key": "the-new-key"}]
    # Before: the inventory's new key asked the router, which refused it (the lab's 401 of issue 41).
    with pytest.raises(worker.RouterError, match="api_key is wrong or missing"):
        worker.ensure(params(router, api_key="the-new-key", url="http://10.0.0.3:30000"))
    # No key file yet (a first run, before the router stage): no key.
    assert worker.with_key_file(params(router, api_key_file=str(tmp_path / "none")))["api_key"] == ""
