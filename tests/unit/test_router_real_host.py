"""What the router stage's host side did on a real host (Ubuntu 24.04, Python 3.12, the real
sglang-router 0.3.2 wheel), captured by tests/device/router_real_host.py."""
import json

from conftest import H200

RUN = json.loads((H200 / "router/router.json").read_text())


def test_the_real_host_ran_the_real_wheel_on_its_own_python():
    assert RUN["host"]["python"].startswith("3.12") and "glibc2.39" in RUN["host"]["platform"]


def test_the_flag_lint_is_the_router_s_own_parser_and_refuses_the_key_on_the_command_line():
    lint = RUN["lint"]
    assert lint["good_rc"] == 0 and lint["parsed_worker_urls"] == ["http://127.0.0.2:30000", "http://127.0.0.3:30000"]
    assert lint["bad_rc"] == 2 and "unrecognized arguments: --no-such-flag" in lint["bad_message"][0]
    assert lint["api_key_in_argv_rc"] == 2 and "give it with --key-file" in lint["api_key_in_argv_message"]


def test_the_router_ran_with_its_key_which_no_process_list_shows():
    assert RUN["key_in_ps"] is False and RUN["key_in_router_cmdline"] is False
    # The workers demand the key: both healthy in the router means the router sent it.
    assert sorted((w["url"], w["healthy"]) for w in RUN["workers_at_start"]) == [
        ("http://127.0.0.2:30000", True), ("http://127.0.0.3:30000", True)]


def test_out_drain_restart_in_under_load_dropped_no_request():
    steps, load = RUN["restart"], RUN["load"]
    assert steps["out_changed"] and steps["in_changed"] and steps["drain"]["drained"]
    assert load["failed"] == 0 and load["sent"] == load["ok"] >= 100
    lists = [set(urls) for _, urls in load["worker_lists"]]
    assert {"http://127.0.0.2:30000"} - lists[1] and lists[-1] == {"http://127.0.0.2:30000", "http://127.0.0.3:30000"}
    assert RUN["stopped_worker_said"] == ["lab-server: stopping with 0 request(s) in flight"]
