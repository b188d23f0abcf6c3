"""The lab server's auth (files/lab/sglang_lab_server.py) is sglang 0.5.9's: each route's level read from
the real wheel's @auth_level decorators, the decision the wheel's own srt/utils/auth.py takes."""
import importlib.util
import itertools
import json
import re
import sys
import threading
import urllib.error
import urllib.request

import pytest



@pytest.fixture
def upstream_auth(upstream_sglang):
    """The wheel's srt/utils/auth.py itself: it imports nothing beyond the standard library."""
    spec = importlib.util.spec_from_file_location("sglang_upstream_auth", upstream_sglang / "sglang/srt/utils/auth.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_admin_route_of_the_wheel_is_read_with_its_level(lab_server, upstream_sglang):
    routes = lab_server.route_auth_levels(upstream_sglang)
    level = lambda method, path: lab_server.auth_level_of(routes, method, path)  # noqa: E731
    source = (upstream_sglang / "sglang/srt/entrypoints/http_server.py").read_text()
    marked = re.findall(r'@app\.(\w+)\("([^"]+)"[^)]*\)\n\s*@auth_level\(AuthLevel\.ADMIN_OPTIONAL\)', source)
    assert len(marked) >= 30
    assert sum(1 for *_, found in routes if found == "ADMIN_OPTIONAL") >= len(marked)
    for path in ("/update_weights_from_disk", "/load_lora_adapter", "/hicache/storage-backend/clear",
                 "/init_weights_update_group", "/flush_cache"):
        assert level("POST", path) == "ADMIN_OPTIONAL", path
    for method in ("GET", "PUT", "DELETE"):
        assert level(method, "/hicache/storage-backend") == "ADMIN_OPTIONAL", method
    assert level("POST", "/dumper/start") == "ADMIN_OPTIONAL"   # a path parameter
    # A route matched by path alone (starlette's PARTIAL match) is no match: NORMAL, as auth.py finds it.
    assert level("GET", "/update_weights_from_disk") == "NORMAL"
    for method, path in (("POST", "/generate"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                         ("GET", "/get_server_info"), ("GET", "/nowhere")):
        assert level(method, path) == "NORMAL", path


def test_the_decision_is_the_wheel_s_own_for_every_case(lab_server, upstream_auth):
    keys = (None, "", "client-key", "admin-key")
    headers = (None, "", "Bearer client-key", "bearer admin-key", "Bearer admin-key", "Bearer", "Basic client-key",
               "Bearer client-key ")
    paths = ("/update_weights_from_disk", "/health", "/health_generate", "/metrics", "/generate")
    cases = 0
    for method, path, header, api_key, admin_key, level in itertools.product(
            ("GET", "POST", "OPTIONS"), paths, headers, keys, keys, list(upstream_auth.AuthLevel)):
        theirs = upstream_auth.decide_request_auth(method=method, path=path, authorization_header=header,
                                                   api_key=api_key, admin_api_key=admin_key, auth_level=level)
        ours = lab_server.decide_request_auth(method, path, header, api_key, admin_key, level.name)
        assert ours == (theirs.allowed, None if theirs.allowed else theirs.error_status_code), (
            method, path, header, api_key, admin_key, level)
        cases += 1
    assert cases == 3 * 5 * 8 * 4 * 4 * 3


class Lab:
    """The lab server on a loopback port, as main() builds it, with these keys."""

    def __init__(self, lab_server, site, api_key, admin_api_key):
        self.server = lab_server.Server(("127.0.0.1", 0), lab_server.Handler)
        s = self.server
        s.dummy, s.in_flight, s.streams, s.lock, s.metrics = False, 0, 0, threading.Lock(), None
        s.ready = threading.Event()
        s.ready.set()
        s.model, s.mode, s.args, s.tokens_per_second = "m", "healthy", {"model_path": "m"}, 1000.0
        s.speculative, s.accept_length = False, 0.0
        s.api_key, s.admin_api_key, s.routes = api_key, admin_api_key, lab_server.route_auth_levels(site)
        self.url = "http://127.0.0.1:%d" % s.server_address[1]
        threading.Thread(target=s.serve_forever, daemon=True).start()

    def ask(self, method, path, key=None, body=None):
        request = urllib.request.Request(self.url + path, method=method, data=json.dumps(body).encode()
                                         if body is not None else None,
                                         headers={"Authorization": "Bearer " + key} if key else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture
def lab(lab_server, upstream_sglang):
    started = []

    def start(api_key, admin_api_key):
        started.append(Lab(lab_server, upstream_sglang, api_key, admin_api_key))
        return started[-1]
    yield start
    for one in started:
        one.server.shutdown()
        one.server.server_close()


def test_with_an_admin_key_only_it_opens_an_admin_route_and_only_the_client_key_the_rest(lab):
    server = lab("client-key", "admin-key")
    update = {"model_path": "/models/other"}
    assert server.ask("POST", "/update_weights_from_disk", "client-key", update) == (401, {"error": "Unauthorized"})
    assert server.ask("POST", "/update_weights_from_disk", None, update)[0] == 401
    assert server.ask("POST", "/update_weights_from_disk", "admin-key", update) == (
        400, {"success": False, "message": "lab", "num_paused_requests": 0})
    assert server.ask("GET", "/hicache/storage-backend", "client-key")[0] == 401
    status, answer = server.ask("GET", "/hicache/storage-backend", "admin-key")
    assert status == 200 and "hicache_write_policy" in answer
    # The client routes still ask the client key, not the admin key (0.5.9: NORMAL routes ignore it).
    assert server.ask("GET", "/v1/models", "client-key")[0] == 200
    assert server.ask("GET", "/v1/models", "admin-key")[0] == 401
    assert server.ask("GET", "/health")[0] == 200


def test_without_an_admin_key_the_client_key_opens_the_admin_routes(lab):
    server = lab("client-key", None)
    update = {"model_path": "/models/other"}
    assert server.ask("POST", "/update_weights_from_disk", "client-key", update)[0] == 400
    assert server.ask("POST", "/update_weights_from_disk", "other", update)[0] == 401
    # 0.5.9's handler itself refuses to read the hicache settings on a server started without an admin key.
    status, answer = server.ask("GET", "/hicache/storage-backend", "client-key")
    assert status == 400 and "admin-api-key" in answer["error"]
    assert lab(None, None).ask("POST", "/update_weights_from_disk", None, update)[0] == 400


def run_module(capsys, name, args):
    """A verify module of plugins/modules run with these arguments: its result as Ansible reads it."""
    import importlib
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(args), pytest.raises(SystemExit):
        importlib.import_module(name).main()
    return json.loads(capsys.readouterr().out)


def run_admin_auth(capsys, args):
    return run_module(capsys, "sglang_admin_auth", args)


def test_the_verify_module_shows_the_client_key_refused_and_the_admin_key_through(lab, capsys):
    server = lab("client-key-5f1", "admin-key-9c2")
    result = run_admin_auth(capsys, {"url": server.url, "api_key": "client-key-5f1", "admin_api_key": "admin-key-9c2"})
    assert not result.get("failed"), result
    assert (result["client_key_status"], result["admin_key_status"]) == (401, 200)
    assert "key-5f1" not in json.dumps(result) and "key-9c2" not in json.dumps(result)


def test_the_verify_module_fails_where_the_client_key_opens_the_admin_routes(lab, capsys):
    server = lab("client-key-5f1", None)   # a server started without its admin key
    result = run_admin_auth(capsys, {"url": server.url, "api_key": "client-key-5f1", "admin_api_key": "admin-key-9c2"})
    assert result["failed"] and result["client_key_status"] == 400
    assert "the client key got 400 on the admin route /hicache/storage-backend, not 401 or 403" in result["msg"]
    assert "key-5f1" not in json.dumps(result) and "key-9c2" not in json.dumps(result)
    wrong = lab("client-key-5f1", "another-admin-key")
    result = run_admin_auth(capsys, {"url": wrong.url, "api_key": "client-key-5f1", "admin_api_key": "admin-key-9c2"})
    assert result["failed"] and "the admin key got 401" in result["msg"]


def test_verify_names_the_keys_an_unpatched_server_hands_out_and_none_once_patched(lab, lab_server, site_packages,
                                                                                    capsys):
    """0.5.9 unpatched answers /get_server_info with its keys to any client-key holder; the lab server does
    so until the installed http_server.py carries server_info_redact_secrets, as the real one (its own test:
    test_sglang_patch_probe.py). The verify module names the fields, never their values."""
    from test_sglang_patch_probe import write_blocks
    server = lab("client-key-5f1", "admin-key-9c2")
    server.server.args = {"model_path": "m", "api_key": "client-key-5f1", "admin_api_key": "admin-key-9c2"}
    site = site_packages()
    assert lab_server.server_info_is_redacted(site) is False
    result = run_module(capsys, "sglang_server_info", {"url": server.url, "api_key": "client-key-5f1"})
    assert result["keys_shown"] == ["api_key", "admin_api_key"]
    assert "key-5f1" not in json.dumps(result) and "key-9c2" not in json.dumps(result)
    write_blocks(site)
    server.server.info_redacted = lab_server.server_info_is_redacted(site)
    assert server.server.info_redacted is True
    status, answer = server.ask("GET", "/get_server_info", "client-key-5f1")
    assert status == 200 and (answer["api_key"], answer["admin_api_key"]) == ("<redacted>", "<redacted>")
    patched = run_module(capsys, "sglang_server_info", {"url": server.url, "api_key": "client-key-5f1"})
    assert patched["keys_shown"] == []
