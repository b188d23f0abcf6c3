# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The versioned sglang installs under one root, read-only: which exist, which are complete, and what
the current and previous links name. sglang_venvs changes them; sglang_server_probe reads them."""
from __future__ import annotations

import json
import os
import re

MARKER = ".sglang-fleet-install.json"
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def link_target(path: str) -> str:
    """The install a link under root names ("" when the link is missing or points elsewhere)."""
    if not os.path.islink(path):
        return ""
    target = os.readlink(path)
    parent, name = os.path.split(os.path.normpath(target))
    return name if os.path.basename(parent) == "venvs" else ""


def recorded_id(marker: str) -> str:
    """The id a complete install's marker records ("" when it records none): its directory's name, or,
    for an install built under an earlier representation of the same inputs, today's id for them."""
    try:
        with open(marker) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return ""
    value = found.get("id") if isinstance(found, dict) else None
    return value if isinstance(value, str) and ID.match(value) else ""


def installs(root: str) -> list[dict]:
    """Every install under root/venvs, newest built first (a marker's mtime is its build time)."""
    base = os.path.join(root, "venvs")
    found = []
    for name in os.listdir(base) if os.path.isdir(base) else []:
        path = os.path.join(base, name)
        if name.startswith(".") or os.path.islink(path) or not os.path.isdir(path):
            continue
        marker = os.path.join(path, MARKER)
        complete = os.path.isfile(marker)
        found.append({"id": name, "complete": complete, "built": os.stat(marker if complete else path).st_mtime,
                      "recorded": recorded_id(marker) if complete else ""})
    return sorted(found, key=lambda i: (i["built"], i["id"]), reverse=True)


def state_of(root: str, legacy: str | None) -> dict:
    return {"current": link_target(os.path.join(root, "current")),
            "previous": link_target(os.path.join(root, "previous")),
            "installs": installs(root),
            "legacy": legacy if legacy and os.path.isdir(legacy) and not os.path.islink(legacy) else ""}
