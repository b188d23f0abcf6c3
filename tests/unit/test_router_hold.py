"""A router restart holds new connections instead of refusing them (plugins/module_utils/router_hold.py).

The hold itself runs for real: the kernel's nftables in a network namespace of the test's own (`unshare
--net`, loopback only), a listener on the router's port and clients connecting to it."""
import json
import subprocess
import sys
import textwrap

from ansible.module_utils import router_hold
from ansible.module_utils.router_api import worker_rows
from conftest import FIXTURES, ROOT

ROUTER_CAPTURES = FIXTURES / "upstream/sglang-router-0.3.2/metrics"


def test_the_workers_a_router_counts_healthy_are_read_from_its_metrics():
    """sglang-router 0.3.2's own /metrics: 1 healthy, 0 unhealthy, -1 removed (the second worker of each)."""
    read = {name: router_hold.healthy_in_metrics((ROUTER_CAPTURES / ("metrics-%s.txt" % name)).read_text())
            for name in ("healthy", "unhealthy", "removed")}
    assert read == {"healthy": {"http://127.0.0.1:58863", "http://127.0.0.1:51259"},
                    "unhealthy": {"http://127.0.0.1:58863"}, "removed": {"http://127.0.0.1:58863"}}


def test_the_workers_a_router_lists_healthy_are_read_from_its_worker_api():
    """A GET /workers entry as sglang-router 0.3.2 gives it (its capture), healthy and not."""
    entry = json.loads((FIXTURES / "upstream/sglang-router-0.3.2/worker-calls.json").read_text())[
        "router_api"]["GET /workers entry"]
    assert entry["is_healthy"] is True
    down = dict(entry, url="http://127.0.0.1:31002/", is_healthy=False)
    assert router_hold.healthy_urls(worker_rows({"workers": [entry, down]})) == {"http://127.0.0.1:31001"}
    assert router_hold.healthy_urls(worker_rows({})) == set()


def test_the_port_held_is_the_router_url_s():
    assert router_hold.port_of("http://127.0.1.4:30090") == 30090
    assert router_hold.port_of("http://[::1]:8080/") == 8080
    assert router_hold.port_of("http://gw") == 80


NAMESPACED = textwrap.dedent("""
    import json, socket, subprocess, sys, threading, time
    import ansible.module_utils
    ansible.module_utils.__path__.append(%(utils)r)  # as a module on a host imports them
    from ansible.module_utils import router_hold
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    def nft(text):
        return subprocess.run(["nft", "-f", "-"], input=text, text=True, capture_output=True)
    listener = socket.socket(); listener.bind(("127.0.1.4", 30090)); listener.listen(64)
    accepted = []
    def accept():
        while True:
            conn, _ = listener.accept(); accepted.append(conn)
    threading.Thread(target=accept, daemon=True).start()
    def connect(marked=False):
        sock = socket.socket(); sock.settimeout(20)
        if marked:
            sock.setsockopt(socket.SOL_SOCKET, router_hold.SO_MARK, router_hold.MARK)
        start = time.monotonic(); sock.connect(("127.0.1.4", 30090))
        return sock, round(time.monotonic() - start, 2)
    found = {}
    open_one, found["unheld"] = connect()
    time.sleep(0.2)
    tables = [open("/proc/net/tcp").read(), open("/proc/net/tcp6").read()]
    found["listening"] = router_hold.sockets(tables, 30090, "0A")
    found["established"] = router_hold.sockets(tables, 30090, "01")
    found["ruleset_rc"] = nft(router_hold.ruleset() + router_hold.hold(30090, 30)).returncode
    found["again_rc"] = nft(router_hold.ruleset() + router_hold.hold(30090, 30)).returncode  # a second run's
    open_one.send(b"x")  # an open connection is never held
    _, found["marked"] = connect(marked=True)
    waited = {}
    def held():
        waited["held"] = connect()[1]
    client = threading.Thread(target=held); client.start()
    time.sleep(1.5)
    found["still_waiting"] = client.is_alive()
    found["release_rc"] = nft(router_hold.release(30090)).returncode
    client.join(); found["held"] = waited["held"]
    found["expiring_rc"] = nft(router_hold.hold(30090, 2)).returncode
    _, found["expired"] = connect()
    found["late_release_rc"] = nft(router_hold.release(30090)).returncode  # the kernel ended it already
    print(json.dumps(found))
""")


def test_a_hold_delays_new_connections_lets_its_own_probe_through_and_ends_by_itself(tmp_path):
    script = tmp_path / "hold.py"
    script.write_text(NAMESPACED % {"utils": str(ROOT / "plugins/module_utils")})
    done = subprocess.run(["unshare", "--net", sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["unheld"] < 0.5 and found["listening"] == 1 and found["established"] == 1
    assert found["ruleset_rc"] == 0 and found["again_rc"] == 0
    # The restart's own probe passes at once; a client's connect waits while held, then succeeds: its SYN is
    # dropped, sent again after 1 s and 2 s more, and the retry after the release meets the listener.
    assert found["marked"] < 0.5
    assert found["still_waiting"] and 1.5 <= found["held"] < 5
    assert found["release_rc"] == 0
    # A hold the run never released ends at its timeout, in the kernel.
    assert 1.5 <= found["expired"] < 5 and found["expiring_rc"] == 0
    assert found["late_release_rc"] != 0
