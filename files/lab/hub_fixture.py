#!/usr/bin/env python3
"""Lab stand-in for the Hugging Face Hub: small fake models at pinned revisions, over HTTP.

    hub_fixture.py [--address 127.0.2.1] [--port 8080] [--rate-mb 16] [--stats FILE]

It answers what huggingface_hub 0.36 (sglang 0.5.9's pin) asks of the Hub, so tests can hold it to
the real client (tests/unit/test_lab_hub_fixture.py runs snapshot_download against it):
  GET  /api/models/<repo>/revision/<rev>[?blobs=true]   the repo's commit and its files; with blobs,
                                                        size, git blob id and, for LFS files, sha256
  HEAD|GET /<repo>/resolve/<rev>/<path>                 git files in place; LFS files redirect (302)
                                                        to /_cdn/<sha256>, as the Hub sends them to its CDN
  Errors as the Hub says them (X-Error-Code): RepoNotFound, RevisionNotFound, EntryNotFound, and
  GatedRepo for the gated repo's files without the right token.
Range requests resume downloads. Every byte of file content it sends is counted per repo in the
--stats file, and all of it passes one rate limit (--rate-mb, MB/s): the site's uplink to the Hub.

Lab only: nothing in roles/ uses this file.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

MIB = 1024 * 1024
LFS_SUFFIXES = (".safetensors", ".bin", ".pt")
GATED_TOKEN = "hf_lab_gated_token_8c1d"  # the token that is granted access to the gated repo


def safetensors(seed: str, size: int) -> bytes:
    """A well-formed safetensors file of about `size` bytes: one uint8 tensor of seeded bytes."""
    rng = random.Random(seed)
    data_len = size - 256
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "model.layers.0.weight": {"dtype": "U8", "shape": [data_len],
                                                   "data_offsets": [0, data_len]}}).encode()
    header += b" " * (248 - len(header))
    return len(header).to_bytes(8, "little") + header + rng.randbytes(data_len)


def model_files(name: str, shards: list[int]) -> dict[str, bytes]:
    files = {"config.json": json.dumps({"architectures": ["LabModel"], "model_type": "lab", "name": name},
                                       indent=2).encode() + b"\n",
             "tokenizer_config.json": b'{"model_max_length": 4096}\n'}
    names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    if len(shards) == 1:
        names = ["model.safetensors"]
    for shard, size in zip(names, shards):
        files[shard] = safetensors(f"{name}/{shard}", size)
    if len(shards) > 1:
        files["model.safetensors.index.json"] = json.dumps(
            {"weight_map": {f"model.layers.{i}.weight": shard for i, shard in enumerate(names)}}).encode()
    return files


# The lab's models: a target model with one shard large enough to show progress, and a drafter.
REPOS = {
    "lab-org/Kimi-K2.5-NVFP4-lab": model_files("kimi-lab", [48 * MIB, 4 * MIB]),
    "lab-org/kimi-k2.5-eagle3-lab": model_files("eagle3-lab", [6 * MIB]),
    "lab-org/gated-lab": model_files("gated-lab", [1 * MIB]),
}
GATED = {"lab-org/gated-lab"}


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def lfs_pointer(data: bytes) -> bytes:
    return (b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
            % (hashlib.sha256(data).hexdigest().encode(), len(data)))


class Repo:
    def __init__(self, repo_id: str, files: dict[str, bytes]):
        self.repo_id, self.files = repo_id, files
        self.meta = {}
        for path, data in sorted(files.items()):
            entry = {"rfilename": path, "size": len(data)}
            if is_lfs(path):
                pointer = lfs_pointer(data)
                entry["blobId"] = git_blob_sha1(pointer)
                entry["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                "pointerSize": len(pointer)}
            else:
                entry["blobId"] = git_blob_sha1(data)
            self.meta[path] = entry
        # A commit id that is a function of the content, as a git commit is.
        self.commit = hashlib.sha1(json.dumps(self.meta, sort_keys=True).encode()).hexdigest()


class Hub:
    def __init__(self, rate_bytes: float, stats_path: str | None):
        self.repos = {repo_id: Repo(repo_id, files) for repo_id, files in REPOS.items()}
        self.by_sha256 = {entry["lfs"]["sha256"]: (repo, path) for repo in self.repos.values()
                          for path, entry in repo.meta.items() if "lfs" in entry}
        self.rate = rate_bytes
        self.stats_path = stats_path
        self.lock = threading.Lock()
        self.next_slot = time.monotonic()
        self.stats = {"bytes_served": 0, "by_repo": {}, "requests": 0, "metadata_requests": 0}
        self.save()

    def throttle(self, nbytes: int) -> None:
        """One shared uplink: each chunk waits for its slot at `rate` bytes/s, whoever sends it."""
        if not self.rate:
            return
        with self.lock:
            now = time.monotonic()
            self.next_slot = max(self.next_slot, now) + nbytes / self.rate
            wait = self.next_slot - now - nbytes / self.rate
        if wait > 0:
            time.sleep(wait)

    def count(self, repo_id: str, nbytes: int) -> None:
        with self.lock:
            self.stats["bytes_served"] += nbytes
            self.stats["by_repo"][repo_id] = self.stats["by_repo"].get(repo_id, 0) + nbytes

    def save(self) -> None:
        if self.stats_path:
            with self.lock:
                text = json.dumps(self.stats)
            with open(self.stats_path + ".part", "w") as handle:
                handle.write(text)
            os.replace(self.stats_path + ".part", self.stats_path)


def make_handler(hub: Hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the stats file is the record
            pass

        def error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self):
            self.route()

        def do_GET(self):
            self.route()

        def route(self) -> None:
            with hub.lock:
                hub.stats["requests"] += 1
            url = urlsplit(self.path)
            path = unquote(url.path)
            api = re.fullmatch(r"/api/models/(.+?)/revision/([^/]+)", path)
            resolve = re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", path)
            cdn = re.fullmatch(r"/_cdn/([0-9a-f]{64})", path)
            if api:
                self.metadata(api.group(1), api.group(2), "blobs=true" in url.query.lower())
            elif resolve:
                self.resolve(*resolve.groups())
            elif cdn and cdn.group(1) in hub.by_sha256:
                repo, file_path = hub.by_sha256[cdn.group(1)]
                self.send_file(repo, file_path, {})
            else:
                self.error(404, "EntryNotFound", f"{path} not found")
            hub.save()

        def find(self, repo_id: str, revision: str) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self.error(401, "RepoNotFound", f"Repository {repo_id} not found")
                return None
            if revision not in (repo.commit, "main"):
                self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return repo

        def metadata(self, repo_id: str, revision: str, blobs: bool) -> None:
            repo = self.find(repo_id, revision)
            if repo is None:
                return
            with hub.lock:
                hub.stats["metadata_requests"] += 1
            siblings = [dict(entry) if blobs else {"rfilename": entry["rfilename"]} for entry in repo.meta.values()]
            body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                               "gated": "manual" if repo_id in GATED else False, "disabled": False,
                               "tags": [], "siblings": siblings}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def resolve(self, repo_id: str, revision: str, file_path: str) -> None:
            repo = self.find(repo_id, revision)
            if repo is None:
                return
            if file_path not in repo.files:
                self.error(404, "EntryNotFound", f"{file_path} does not exist at {revision}")
                return
            if repo_id in GATED:
                auth = self.headers.get("Authorization", "")
                if not auth:
                    self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have "
                               "access to it and be authenticated to access it. Please log in.")
                    return
                if auth != f"Bearer {GATED_TOKEN}":
                    self.error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not "
                               "in the authorized list.")
                    return
            entry = repo.meta[file_path]
            headers = {"X-Repo-Commit": repo.commit}
            if "lfs" in entry:
                sha256 = entry["lfs"]["sha256"]
                headers.update({"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(entry["size"]),
                                "ETag": f'"{entry["blobId"]}"',
                                "Location": f"http://{self.headers.get('Host')}/_cdn/{sha256}"})
                self.send_response(302)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            headers["ETag"] = f'"{entry["blobId"]}"'
            self.send_file(repo, file_path, headers)

        def send_file(self, repo: Repo, file_path: str, headers: dict) -> None:
            data = repo.files[file_path]
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if match and int(match.group(1)) < len(data):
                start = int(match.group(1))
            self.send_response(206 if start else 200)
            for key, value in headers.items():
                self.send_header(key, value)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            if self.command == "HEAD":
                return
            view = memoryview(data)[start:]
            for offset in range(0, len(view), 256 * 1024):
                chunk = view[offset:offset + 256 * 1024]
                hub.throttle(len(chunk))
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                hub.count(repo.repo_id, len(chunk))

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default="127.0.2.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--rate-mb", type=float, default=16.0, help="the uplink in MB/s (0: unlimited)")
    parser.add_argument("--stats", help="file that counts what was served (JSON)")
    parser.add_argument("--describe", action="store_true", help="print each repo's commit and files, and exit")
    args = parser.parse_args(argv)
    hub = Hub(args.rate_mb * 1e6, args.stats)
    if args.describe:
        print(json.dumps({repo_id: {"revision": repo.commit, "files": repo.meta}
                          for repo_id, repo in hub.repos.items()}, indent=2))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 of its container: podman stops it so
    server = ThreadingHTTPServer((args.address, args.port), make_handler(hub))
    server.daemon_threads = True
    print(f"lab hub on http://{args.address}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
