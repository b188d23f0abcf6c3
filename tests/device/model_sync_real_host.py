#!/usr/bin/env python3
"""The model stage's host side on a real GPU host's disk and Python, at a size where speed shows.

    python3 tests/device/model_sync_real_host.py OUT_DIR [GB]

Makes a fake model of GB gigabytes (safetensors-sized shards plus a config) on the host's disk, then
runs the sglang_model_sync module's own code (plugins/module_utils/model_sync.py, stdlib only, the
host's python3) through what a fleet run does: learn the manifest from a directory source (hash
it), fetch a verified copy from that directory, fetch another from the first over HTTP with the
role's copy server (sglang_model_peer.py on 127.0.0.1, its token from the environment), verify by
stamp (quick) and by hashing (full), find a flipped byte, repair it. Writes each step's figures
to OUT_DIR/model_sync.json. Sends nothing beyond 127.0.0.1.
"""
import base64
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("model_sync", ROOT / "plugins/module_utils/model_sync.py")
ms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ms)

out = Path(sys.argv[1])
gb = float(sys.argv[2]) if len(sys.argv) > 2 else 8
work = Path(tempfile.mkdtemp(prefix="model-sync-", dir=os.environ.get("MODEL_SYNC_DIR", "/var/tmp")))
steps = []


def step(name, fn, nbytes=None):
    started = time.monotonic()
    value = fn()
    seconds = time.monotonic() - started
    steps.append({"step": name, "seconds": round(seconds, 2),
                  "gb_per_s": round(nbytes / seconds / 1e9, 2) if nbytes else None})
    print(json.dumps(steps[-1]), flush=True)
    return value


try:
    source = work / "shared/Kimi-like"
    source.mkdir(parents=True)
    (source / "config.json").write_text('{"architectures": ["KimiK25ForConditionalGeneration"]}\n')
    shard = 2 * 1024 ** 3 if gb >= 4 else 256 * 1024 ** 2
    block = os.urandom(64 * 1024 ** 2)
    total = 0
    for i in range(max(1, int(gb * 1e9 // shard))):
        with open(source / ("model-%05d.safetensors" % (i + 1)), "wb") as handle:
            for _ in range(shard // len(block)):
                handle.write(block)
                total += len(block)
    revision = "0" * 39 + "1"
    manifest = step("manifest from the source directory (hash %d bytes)" % total,
                    lambda: ms.dir_manifest(str(source), "lab/kimi-like", revision), total)
    dest = str(work / "models/Kimi-like")
    wanted = {f["path"] for f in manifest["files"]}
    step("fetch from the directory, verified",
         lambda: ms.fetch(ms.Source("path", "lab/kimi-like", revision, directory=str(source)), manifest, dest,
                          wanted, progress_file=str(work / "run/progress")), total)
    shutil.rmtree(source)  # room for the peer copy
    quick = step("verify by stamp (quick)", lambda: ms.inspect(dest, manifest))
    assert quick == ({}, 0), quick

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = base64.b16encode(os.urandom(20)).decode()
    config = {"address": "127.0.0.1", "port": port, "dir": dest, "files": sorted(wanted)}
    peer = subprocess.Popen([sys.executable, str(ROOT / "roles/sglang_model/files/sglang_model_peer.py")],
                            env=dict(os.environ, SGLANG_MODEL_PEER_TOKEN=token,
                                     SGLANG_MODEL_PEER_CONFIG=base64.b64encode(json.dumps(config).encode()).decode()))
    copy = str(work / "models/Kimi-like-copy")
    try:
        step("fetch from a peer over HTTP (127.0.0.1), verified",
             lambda: ms.fetch(ms.Source("peer", "lab/kimi-like", revision, endpoint="http://127.0.0.1:%d" % port,
                                        token=token), manifest, copy, wanted), total)
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/config.json" % port, timeout=5)
            refused = False
        except urllib.error.HTTPError as err:
            refused = err.code == 401
    finally:
        peer.terminate()
        peer.wait()
    shutil.rmtree(copy)
    full = step("verify by hashing (full)", lambda: ms.inspect(dest, manifest, full=True), manifest["total_size"])
    assert full == ({}, manifest["total_size"]), full
    first = sorted(wanted)[-1]
    with open(os.path.join(dest, first), "r+b") as handle:
        handle.seek(12345)
        byte = handle.read(1)
        handle.seek(12345)
        handle.write(bytes([byte[0] ^ 0xFF]))
    problems, hashed = step("find the flipped byte (quick)", lambda: ms.inspect(dest, manifest))
    result = {
        "host": platform.node(), "python": platform.python_version(), "kernel": platform.release(),
        "filesystem": subprocess.run(["df", "-T", str(work)], capture_output=True, text=True).stdout.splitlines()[-1],
        "model_bytes": total, "files": len(wanted), "steps": steps,
        "quick_verify": {"problems": quick[0], "hashed_bytes": quick[1]},
        "full_verify": {"problems": full[0], "hashed_bytes": full[1]},
        "flipped": {"problems": problems, "hashed_bytes": hashed, "file": first},
        "peer_refused_without_token": refused,
        "stamp": json.loads(Path(dest, ms.STAMP).read_text())["manifest_sha256"] == ms.manifest_digest(manifest),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_sync.json").write_text(json.dumps(result, indent=1) + "\n")
finally:
    shutil.rmtree(work, ignore_errors=True)
