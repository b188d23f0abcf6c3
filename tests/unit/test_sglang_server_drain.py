"""The drain: zero requests seen twice in a row, a bounded wait, and sglang 0.5.9's load endpoints."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import sglang_server_drain as drain


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def run(readings, timeout=10, settle=2):
    clock, values = Clock(), iter(readings)

    def read(url, key):
        value = next(values)
        if isinstance(value, Exception):
            raise value
        return value
    p = {"url": "http://x", "api_key": "", "timeout": timeout, "settle": settle, "interval": 1.0,
         "unreachable_ok": True}
    return drain.drain(p, sleep=clock.sleep, clock=clock, read=read)


def test_drained_after_two_zero_readings_in_a_row():
    result = run([3, 1, 0, 2, 0, 0])
    assert result == {"drained": True, "in_flight": 0, "peak": 3, "waited": 5.0}


def test_a_server_that_keeps_its_requests_is_reported_not_failed():
    result = run([2] * 20, timeout=4)
    assert result["drained"] is False and result["in_flight"] == 2 and result["waited"] == 5.0


def test_a_server_that_is_down_has_nothing_in_flight():
    assert run([1, ConnectionRefusedError()])["drained"] is True


class Server(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        routes = self.server.routes
        path = self.path
        if path not in routes:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps(routes[path]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.url = "http://127.0.0.1:%d" % httpd.server_address[1]
    yield httpd
    httpd.shutdown()


def test_v1_loads_is_summed_over_data_parallel_ranks(server):
    # The shape of sglang 0.5.9's /v1/loads (entrypoints/v1_loads.py): per-rank loads and an aggregate.
    server.routes = {"/v1/loads?include=core": {"dp_rank_count": 2, "loads": [
        {"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1, "num_total_reqs": 3},
        {"dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": 0, "num_total_reqs": 1}],
        "aggregate": {"total_running_reqs": 3, "total_waiting_reqs": 1, "total_reqs": 4}}}
    assert drain.in_flight(server.url, "") == 4


def test_get_load_where_v1_loads_is_missing(server):
    server.routes = {"/get_load": [{"dp_rank": 0, "num_reqs": 2, "num_waiting_reqs": 0}]}
    assert drain.in_flight(server.url, "") == 2



def test_a_server_that_refuses_the_key_fails_the_drain_instead_of_passing_as_down():
    """A 401 is an answer: its requests in flight are unknown, and a restart now would cut them off."""
    import urllib.error
    refused = urllib.error.HTTPError("http://x/v1/loads", 401, "Unauthorized", {}, None)
    with pytest.raises(urllib.error.HTTPError):
        run([refused])


def test_the_key_is_the_one_the_running_server_started_with_from_its_config_file(tmp_path):
    config = tmp_path / "sglang.yaml"
    config.write_text(json.dumps({"api-key": "key-it-runs-with", "admin-api-key": "adm"}, indent=2) + "\n")
    assert drain.key_of({"api_key": "rotated", "api_key_file": str(config)}) == "key-it-runs-with"
    assert drain.key_of({"api_key": "rotated", "api_key_file": str(tmp_path / "absent")}) == ""
    assert drain.key_of({"api_key": "k", "api_key_file": ""}) == "k"
