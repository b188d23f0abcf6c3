"""What the scenario's tests share: the fleet's names and addresses, commands on its nodes, the router's
API, and load through the router (files/lab/lab_nodes.py runs files/lab/router_load.py on the router's
node, so every request stays on the pod's loopback)."""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "files/lab"))
from lab_nodes import RouterLoad, node_sh as sh  # noqa: E402  (sh: a command on a node)

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SERVERS = ["rt-gpu-1", "rt-gpu-2", "rt-gpu-3"]
ROUTER = "rt-router"
KEY = "lab-router-secret-7d1e"
ROUTER_URL = "http://127.0.1.4:30090"
WORKERS = {"rt-gpu-1": "http://127.0.1.1:30000", "rt-gpu-2": "http://127.0.1.2:30000"}
RANK1_URL = "http://127.0.1.3:30000"
KEY_FILE = "/etc/sglang/sglang-router.key"


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


def Load(name, concurrency=4, seconds=600, url=ROUTER_URL):
    """The lab's load on the router's node, through the router (or straight to one worker's URL), with the
    router's key file, until finished (or its own bounds)."""
    return RouterLoad(ROUTER, name, url, key_file=KEY_FILE, concurrency=concurrency, seconds=seconds)


def say(capsys, text):
    with capsys.disabled():
        print("\n    " + text)
