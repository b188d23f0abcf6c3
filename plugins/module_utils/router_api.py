# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one home of what sglang-fleet asks of a router and of a worker over HTTP.

sglang-router 0.3's worker API (GET /workers, POST /workers, DELETE /workers/<id>), and what makes a
worker fit to serve: /health answers 200, /v1/models lists the model and a known question comes back
right at temperature 0.

Two kinds of caller use this file: the modules (sglang_router_worker, sglang_health_gate), which
import it as ansible.module_utils.router_api, and the router host's drain-lease healer
(roles/sglang_router/files/sglang_router_healer.py), which runs under systemd outside Ansible and
imports the copy the router role installs beside it. So: the standard library only.
"""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

# Never through a proxy: routers and workers are the fleet's own hosts (a proxy variable in the
# environment of a unit or a controller must not send the calls elsewhere).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RouterError(Exception):
    pass


class RouterDown(RouterError):
    pass


class AnswerError(Exception):
    """The worker is not fit to serve: it does not list the model, or answers the known question wrong."""


def request(url, api_key="", payload=None, timeout=30, method=None, opener=None):
    """(HTTP status, body text) of one call; HTTP errors and connection failures raise (urllib's own).
    opener: another urllib opener than the no-proxy one (a router restart's probe through its hold)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers=headers,
                                 method=method or ("POST" if payload is not None else "GET"))
    with (opener or _OPENER).open(req, timeout=timeout) as response:
        return response.getcode(), response.read().decode("utf-8", "replace")


def call(router_url, api_key, method, path, payload=None, timeout=30, opener=None):
    try:
        _, body = request(router_url + path, api_key, payload, timeout, method, opener)
    except Exception as exc:  # HTTPError, URLError, timeouts
        if isinstance(getattr(exc, "reason", None), ConnectionRefusedError) or isinstance(exc, ConnectionRefusedError):
            raise RouterDown("%s %s%s: nothing listens there (is the router running?)" % (method, router_url, path))
        code = getattr(exc, "code", None)
        hint = " (the router's api_key is wrong or missing)" if code == 401 else ""
        raise RouterError("%s %s%s: %s%s" % (method, router_url, path, exc, hint))
    return json.loads(body) if body.strip() else {}


def worker_rows(answer):
    """Each worker of a GET /workers answer: its id, URL and health."""
    listed = (answer or {}).get("workers") or []
    return [{"id": w.get("id"), "url": w.get("url"), "healthy": bool(w.get("is_healthy"))} for w in listed]


def workers(router_url, api_key, timeout=30, opener=None):
    return worker_rows(call(router_url, api_key, "GET", "/workers", timeout=timeout, opener=opener))


def find(listed, url):
    return next((w for w in listed if w["url"].rstrip("/") == url.rstrip("/")), None)


def wait_for(router_url, api_key, timeout, done, sleep=time.sleep, clock=time.monotonic):
    start = clock()
    while True:
        listed = workers(router_url, api_key)
        if done(listed):
            return listed, clock() - start
        if clock() - start > timeout:
            return listed, None
        sleep(0.5)


def read_key(path):
    """The key a router runs with, from its key file (the router role's: the key alone, then a newline)."""
    with open(path) as handle:
        return handle.read().strip()


def ensure(p, check_mode=False, sleep=time.sleep, clock=time.monotonic):
    """(changed, workers, waited) for the asked state; raises RouterError when the router does not get there.

    p: router_url, url, state (present | absent | query), api_key (the router's own, for its worker API),
    timeout, and optionally worker_api_key: the key the router is to send a worker it adds (sglang-router
    0.3.2 keeps one per worker, tests/fixtures/upstream/sglang-router-0.3.2/worker-keys.json); the router's
    own when empty."""
    router, key, url = p["router_url"].rstrip("/"), p["api_key"], (p["url"] or "").rstrip("/")
    listed = workers(router, key)
    if p["state"] == "query":
        return False, listed, 0.0
    current = find(listed, url)
    if p["state"] == "absent":
        if current is None:
            return False, listed, 0.0
        if check_mode:
            return True, listed, 0.0
        call(router, key, "DELETE", "/workers/" + current["id"])
        listed, waited = wait_for(router, key, p["timeout"], lambda ws: find(ws, url) is None, sleep, clock)
        if waited is None:
            raise RouterError("the router still lists %s %ds after it was asked to remove it" % (url, p["timeout"]))
        return True, listed, waited
    changed = current is None
    if changed:
        if check_mode:
            return True, listed, 0.0
        payload, worker_key = {"url": url}, p.get("worker_api_key") or key
        if worker_key:
            payload["api_key"] = worker_key
        call(router, key, "POST", "/workers", payload)
    elif current["healthy"] or check_mode:
        # Listed: nothing to register. Waiting for it to turn healthy is a real run's (and the health
        # gate's): a check run goes on at once, even past a server that is down.
        return False, listed, 0.0
    listed, waited = wait_for(router, key, p["timeout"], lambda ws: (find(ws, url) or {}).get("healthy"),
                              sleep, clock)
    if waited is None:
        worker = find(listed, url)
        raise RouterError("%s is %s in the router %ds after it was added" % (
            url, "not healthy" if worker else "not listed", p["timeout"]))
    return changed, listed, waited


def known_answer(url, api_key, model, prompt, expect, timeout=300):
    """(models, answer) when /v1/models lists model and prompt's answer matches the regex expect; else
    AnswerError. Errors of HTTP or of the replies' shape raise as they come (OSError, ValueError, KeyError)."""
    url = url.rstrip("/")
    _, body = request(url + "/v1/models", api_key)
    models = [m.get("id") for m in json.loads(body).get("data", [])]
    if model not in models:
        raise AnswerError("/v1/models lists %s, not %s" % (", ".join(models) or "nothing", model))
    payload = {"model": model, "temperature": 0, "max_tokens": 32, "messages": [{"role": "user", "content": prompt}]}
    _, body = request(url + "/v1/chat/completions", api_key, payload, timeout=timeout)
    answer = json.loads(body)["choices"][0]["message"]["content"] or ""
    if not re.search(expect, answer):
        raise AnswerError("known-answer check failed: asked %r, expected /%s/, got %r" % (prompt, expect, answer[:200]))
    return models, answer


def fit_to_serve(url, api_key, model, prompt, expect, timeout=60):
    """None when the worker at url answers /health 200 and the known question right, else why not (one line)."""
    url = url.rstrip("/")
    try:
        code, _ = request(url + "/health", api_key, timeout=10)
        if code != 200:
            return "/health answers HTTP %d" % code
        known_answer(url, api_key, model, prompt, expect, timeout)
    except AnswerError as exc:
        return str(exc)
    except Exception as exc:  # refused, reset, timed out, HTTP 5xx, a reply of the wrong shape
        return "%s: %s" % (type(exc).__name__, exc)
    return None
