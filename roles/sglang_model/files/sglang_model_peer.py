#!/usr/bin/env python3
"""Serve a verified model directory to the fleet's other hosts while they copy it.

    SGLANG_MODEL_PEER_TOKEN=... SGLANG_MODEL_PEER_CONFIG=<base64 JSON> sglang_model_peer.py

The config: {"address": ..., "port": ..., "dir": ..., "files": [paths]}. Only the listed files of a
verified copy are served, to requests that carry the run's bearer token. Both come from the
environment, which systemd reads from a root-only file: never from the command line. GET and
HEAD, with Range for resumed copies. The copies verify every byte against the manifest, so this
server needs no trust beyond the token.
"""
import base64
import hmac
import json
import os
import re
import shutil
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def main():
    config = json.loads(base64.b64decode(os.environ.pop("SGLANG_MODEL_PEER_CONFIG", "")) or b"{}")
    token = os.environ.pop("SGLANG_MODEL_PEER_TOKEN", "")
    if len(token) < 16:
        sys.exit("SGLANG_MODEL_PEER_TOKEN is not set (or too short to be a token)")
    files = set(config["files"])
    root = config["dir"]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

        def refuse(self, status):
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            if not hmac.compare_digest(self.headers.get("Authorization", ""), "Bearer " + token):
                return self.refuse(401)
            path = unquote(urlsplit(self.path).path).lstrip("/")
            if path not in files:
                return self.refuse(404)
            full = os.path.join(root, path)
            size = os.path.getsize(full)
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            start = int(match.group(1)) if match and int(match.group(1)) < size else 0
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(size - start))
            self.end_headers()
            if self.command == "GET":
                with open(full, "rb") as handle:
                    handle.seek(start)
                    try:
                        shutil.copyfileobj(handle, self.wfile, 1024 * 1024)
                    except (BrokenPipeError, ConnectionResetError):
                        pass

    server = ThreadingHTTPServer((config["address"], int(config["port"])), Handler)
    server.daemon_threads = True
    print("serving %s on %s:%s" % (root, config["address"], config["port"]), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
