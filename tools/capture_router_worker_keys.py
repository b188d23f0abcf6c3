#!/usr/bin/env python3
"""What sglang-router 0.3.2 sends each worker when one was added through POST /workers with a key of
its own: the base of a key rotation without failed requests (docs/operations.md).

    python3 tools/capture_router_worker_keys.py ROUTER_VENV_PYTHON \
        > tests/fixtures/upstream/sglang-router-0.3.2/worker-keys.json

The router starts with --api-key K1 in front of worker W1 (--worker-urls); W2 is added with
{"api_key": "K2"}; clients send K1 through the router, and each worker records the Authorization
header of every request it is sent. Everything listens on 127.0.0.1 only."""
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROUTER = "http://127.0.0.1:31100"
W1, W2 = 31101, 31102
CALLS = {}
COMPLETION = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def worker(port):
    """A worker that answers what the router asks of one, and records each request's Authorization."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self):
            CALLS.setdefault(str(port), []).append(
                {"method": self.command, "path": self.path, "authorization": self.headers.get("Authorization")})

        def do_GET(self):
            self._record()
            if "server_info" in self.path:
                self._answer({"model_path": "m", "tp_size": 1, "dp_size": 1})
            elif "model_info" in self.path:
                self._answer({"model_path": "m", "is_generation": True})
            elif self.path.startswith("/v1/models"):
                self._answer({"object": "list", "data": [{"id": "m", "object": "model"}]})
            else:
                self._answer({})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._record()
            self._answer(COMPLETION)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def call(method, path, body=None, key="K1"):
    """The router's HTTP status for one request, sent with `key` (None: no Authorization header)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(ROUTER + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def main(python):
    worker(W1)
    worker(W2)
    router = subprocess.Popen([python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", "31100",
                               "--worker-urls", "http://127.0.0.1:%d" % W1, "--api-key", "K1",
                               "--policy", "round_robin"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {"what": "sglang-router 0.3.2 with --worker-urls W1 (port %d) --api-key K1; W2 (port %d) added by "
                   "POST /workers with api_key K2; clients send K1, round robin" % (W1, W2)}
    try:
        for _ in range(60):
            try:
                if call("GET", "/workers") == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        out["add_w2_with_key_K2"] = call("POST", "/workers", {"url": "http://127.0.0.1:%d" % W2, "api_key": "K2"})
        time.sleep(8)  # the router's job queue adds it in the background
        CALLS.clear()
        chat = {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 4}
        out["chats"] = [call("POST", "/v1/chat/completions", chat) for _ in range(4)]
        out["generate"] = [call("POST", "/generate", {"text": "q", "sampling_params": {"max_new_tokens": 2}})
                           for _ in range(2)]
        out["calls_during_requests"] = json.loads(json.dumps(CALLS))  # a copy: the requests below add to CALLS
        # What the router asks of its own clients and of its worker API: a rotation moves the clients'
        # key only when the router restarts with the new one.
        out["client_key"] = {
            name: {"chat": call("POST", "/v1/chat/completions", chat, key=key),
                   "list_workers": call("GET", "/workers", key=key)}
            for name, key in (("K1", "K1"), ("K2", "K2"), ("none", None))}
    finally:
        router.terminate()
        router.wait(10)
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
