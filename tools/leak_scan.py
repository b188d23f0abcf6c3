#!/usr/bin/env python3
"""Find a secret in text in any of the forms a run's output can carry it.

    .venv/bin/python tools/leak_scan.py --secret-file KEYFILE FILE...    (exit 1 when found)

Ansible's output, ansible-runner's events and the fleet report carry a file's bytes base64-encoded
(slurp, a module's binary result) and URLs percent-encoded; a plain-text search finds none of them. A
secret inside a base64 stream lands at one of three byte alignments, each encoding it to different
characters: for each, the characters that its bytes alone decide are searched for.
"""
from __future__ import annotations

import argparse
import base64
import sys
import urllib.parse
from pathlib import Path


def forms(secret: str) -> dict:
    """{form name: the text that betrays the secret in that form}."""
    raw = secret.encode()
    found = {"plain": secret, "url-encoded": urllib.parse.quote(secret, safe=""),
             "form-encoded": urllib.parse.quote_plus(secret, safe="")}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        # Character i holds bits 6i..6i+5 of the stream; the secret's bits are 8*shift..8*(shift+len).
        start, end = -(-8 * shift // 6), 8 * (shift + len(raw)) // 6
        found["base64 at byte %d" % shift] = encoded[start:end]
        found["base64url at byte %d" % shift] = encoded[start:end].replace("+", "-").replace("/", "_")
    return found


def leaks(text: str, secret: str) -> list:
    """The names of the forms of `secret` that `text` holds."""
    return sorted({name for name, form in forms(secret).items() if form and form in text})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--secret-file", type=Path, required=True, help="a file whose first line is the secret")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    secret = args.secret_file.read_text().splitlines()[0].strip()
    if len(secret) < 8:
        parser.error("a secret of fewer than 8 characters would match by chance")
    status = 0
    for path in args.files:
        found = leaks(path.read_bytes().decode(errors="replace"), secret)
        if found:
            print("%s: the secret, as %s" % (path, ", ".join(found)))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
