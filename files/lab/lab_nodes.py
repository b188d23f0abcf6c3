"""What the lab's checks do on its nodes from the controller: a load through a router, run on a node
(files/lab/router_load.py, so every request stays on the pod's loopback), and the lab server's starts
and stops, read from a node's journal. The router scenario's tests and files/lab/slices.py share it."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def node_sh(node: str, script: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", "exec", node, "sh", "-c", script], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError((node, script, done.stderr))
    return done


def server_events(node: str) -> list[tuple[float, str]]:
    """The lab server's starts and stops on `node` so far, from its journal: (unix time, "start" or the
    journal's line) for each start, stop and drain."""
    events = []
    for line in node_sh(node, "journalctl -u sglang --no-pager -o short-unix").stdout.splitlines():
        if " on 127.0.1." in line and "lab-server: /models" in line:
            events.append((float(line.split()[0]), "start"))
        elif "Stopped sglang.service" in line or "request(s) in flight" in line:
            events.append((float(line.split()[0]), line.split("]: ", 1)[-1]))
    return events


def server_starts(node: str) -> int:
    return sum(1 for _, what in server_events(node) if what == "start")


class RouterLoad:
    """router_load.py on `router`'s node in the background, until finish() or its own bounds: chat requests
    to `url` (the router, or one worker) at a fixed concurrency, with the key in `key_file` on that node."""

    def __init__(self, router: str, name: str, url: str, key_file: str = "", concurrency: int = 4,
                 max_requests: int = 5000, seconds: float = 600) -> None:
        self.router, self.out, self.stop_file = router, "/tmp/%s.json" % name, "/tmp/%s.stop" % name
        subprocess.run(["podman", "exec", "-i", router, "sh", "-c", "rm -f %s %s; cat > /tmp/router_load.py"
                        % (self.out, self.stop_file)], input=(HERE / "router_load.py").read_text(), text=True,
                       check=True)
        self.process = subprocess.Popen(
            ["podman", "exec", router, "python3", "/tmp/router_load.py", "--url", url, "--out", self.out,
             "--concurrency", str(concurrency), "--max-requests", str(max_requests), "--max-seconds", str(seconds),
             "--stop-file", self.stop_file] + (["--key-file", key_file] if key_file else []))
        time.sleep(2)  # under way before what it measures starts

    def finish(self) -> dict:
        node_sh(self.router, "touch %s" % self.stop_file)
        assert self.process.wait(timeout=120) == 0
        return json.loads(node_sh(self.router, "cat %s" % self.out).stdout)
