"""What the scenario's tests share: the fleet's names and addresses, commands on its nodes, the router's
API, and load through the router (files/lab/router_load.py, on the router's node, so every request
stays on the pod's loopback)."""
import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SERVERS = ["rt-gpu-1", "rt-gpu-2", "rt-gpu-3"]
ROUTER = "rt-router"
KEY = "lab-router-secret-7d1e"
ROUTER_URL = "http://127.0.1.4:30090"
WORKERS = {"rt-gpu-1": "http://127.0.1.1:30000", "rt-gpu-2": "http://127.0.1.2:30000"}
RANK1_URL = "http://127.0.1.3:30000"
KEY_FILE = "/etc/sglang/sglang-router.key"


def sh(node, script, check=True):
    done = subprocess.run(["podman", "exec", node, "sh", "-c", script], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, (node, script, done.stderr)
    return done


def router(path, payload=None):
    """The router's API, asked from its own node (curl there, on the pod's loopback)."""
    data = "-X POST -H 'Content-Type: application/json' -d '%s'" % json.dumps(payload) if payload else ""
    out = sh(ROUTER, "curl -sf -m 60 -H \"Authorization: Bearer $(cat %s)\" %s %s%s"
             % (KEY_FILE, data, ROUTER_URL, path)).stdout
    return json.loads(out)


def workers():
    return {w["url"]: w["is_healthy"] for w in router("/workers")["workers"]}


def ask_through_router():
    reply = router("/v1/chat/completions", {"model": "/models/nvidia/Kimi-K2.5-NVFP4", "temperature": 0,
                                            "messages": [{"role": "user", "content": "What is 17 + 25?"}]})
    return reply["choices"][0]["message"]["content"]


class Load:
    """router_load.py on the router's node, in the background, until stopped (or its own bounds): through
    the router, or straight to one worker's URL."""

    def __init__(self, name, concurrency=4, seconds=600, url=ROUTER_URL):
        self.out, self.stop_file = "/tmp/%s.json" % name, "/tmp/%s.stop" % name
        script = (ROOT / "files/lab/router_load.py").read_text()
        subprocess.run(["podman", "exec", "-i", ROUTER, "sh", "-c", "rm -f %s %s; cat > /tmp/router_load.py"
                        % (self.out, self.stop_file)], input=script, text=True, check=True)
        self.process = subprocess.Popen(
            ["podman", "exec", ROUTER, "python3", "/tmp/router_load.py", "--url", url, "--out", self.out,
             "--key-file", KEY_FILE, "--concurrency", str(concurrency), "--max-requests", "5000",
             "--max-seconds", str(seconds),
             "--stop-file", self.stop_file])
        time.sleep(2)  # under way before the rollout starts

    def finish(self):
        sh(ROUTER, "touch %s" % self.stop_file)
        assert self.process.wait(timeout=120) == 0
        return json.loads(sh(ROUTER, "cat %s" % self.out).stdout)


def say(capsys, text):
    with capsys.disabled():
        print("\n    " + text)
