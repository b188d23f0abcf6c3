#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find the apt sources that name a repository URI already (they would conflict with ours)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_source_conflicts
short_description: Find other apt sources for a repository URI
description:
  - Reads C(/etc/apt/sources.list) and every C(.list) and C(.sources) file of
    C(/etc/apt/sources.list.d) and reports the ones that name I(uri) (trailing slashes ignored),
    other than I(own).
  - A host that got CUDA from NVIDIA's network repository has C(cuda-keyring)'s
    C(cuda-<distro>-<arch>.list) for the same URI with another C(signed-by); apt then refuses to
    read any source ("Conflicting values set for option Signed-By").
  - Per file it says whether the URI is all the file holds (C(whole)), so the caller can move the
    file away, or which lines name it, so the caller can comment them out.
  - Read-only.
options:
  uri:
    description: The repository URI.
    type: str
    required: true
  own:
    description: The source file that is ours (never reported).
    type: path
    required: true
  sources_dir:
    description: The apt configuration directory.
    type: path
    default: /etc/apt
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would change, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Other sources of NVIDIA's repository are found
  apt_source_conflicts:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
    own: /etc/apt/sources.list.d/cuda.sources
  register: conflicts
"""

RETURN = r"""
conflicts:
  description: One entry per file that names the URI.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
    whole:
      description: True when every source in the file is this URI (the file can be moved away as a whole).
      type: bool
    lines:
      description: The lines (one-line format) that name the URI, as written.
      type: list
      elements: str
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule


def _same(a, b):
    return a.rstrip("/") == b.rstrip("/")


def one_line_uris(text):
    """[(line, uri)] of the active `deb`/`deb-src` lines of a one-line-style file."""
    found = []
    for line in text.splitlines():
        words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 2 and words[0] in ("deb", "deb-src"):
            found.append((line, words[1]))
    return found


def deb822_uris(text):
    """[uri] of the enabled stanzas of a deb822 .sources file."""
    uris = []
    for stanza in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() != "no":
            uris.extend(fields.get("uris", "").split())
    return uris


def conflicts(files, uri, own):
    """files: {path: text}. The entries of RETURN's conflicts."""
    out = []
    for path in sorted(files):
        if path == own:
            continue
        text = files[path]
        if path.endswith(".sources"):
            uris = deb822_uris(text)
            if any(_same(u, uri) for u in uris):
                out.append({"path": path, "whole": all(_same(u, uri) for u in uris), "lines": []})
        else:
            entries = one_line_uris(text)
            lines = [line for line, u in entries if _same(u, uri)]
            if lines:
                out.append({"path": path, "whole": len(lines) == len(entries), "lines": lines})
    return out


def read_sources(sources_dir):
    paths = [os.path.join(sources_dir, "sources.list")]
    paths += glob.glob(os.path.join(sources_dir, "sources.list.d", "*.list"))
    paths += glob.glob(os.path.join(sources_dir, "sources.list.d", "*.sources"))
    files = {}
    for path in paths:
        try:
            with open(path) as handle:
                files[path] = handle.read()
        except OSError:
            continue
    return files


def main():
    module = AnsibleModule(
        argument_spec={
            "uri": {"type": "str", "required": True},
            "own": {"type": "path", "required": True},
            "sources_dir": {"type": "path", "default": "/etc/apt"},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, conflicts=conflicts(read_sources(p["sources_dir"]), p["uri"], p["own"]))


if __name__ == "__main__":
    main()
