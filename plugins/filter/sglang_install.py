# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The id of an sglang install: the same inputs give the same id on every host."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_install_id
short_description: The id of an sglang install, from what defines it
description:
  - The id is C(<sglang version>-<12 hex digits>), the digits from the sha256 of I(_input) written
    as canonical JSON (sorted keys, no spaces), so key order and YAML formatting do not matter
    and every host with the same inputs gets the same id.
  - I(_input) must name the sglang version as C(sglang).
positional: _input
options:
  _input:
    description: What defines the install (versions, wheel URLs and checksums, Python, patch set).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The install id is known
  ansible.builtin.set_fact:
    install_id: "{{ {'sglang': '0.5.9', 'python': 'cpython-312'} | sglang_install_id }}"
"""

RETURN = r"""
_value:
  description: The install id, for example 0.5.9-3f2a9c1d0b7e.
  type: str
"""

import hashlib
import json

from ansible.errors import AnsibleFilterError


def sglang_install_mismatches(report, expected):
    """What a venv holds that its install's pins do not say, one line each ([] when it matches).

    report is venv_report.py's output; expected maps a package to its version ("" when not pinned,
    so not checked) or, for a wheel installed by URL, to {url, sha256}; expected["python"] is the
    interpreter's cache tag."""
    problems = []
    if report.get("python") != expected.get("python"):
        problems.append("python is %s, not %s" % (report.get("python"), expected.get("python")))
    for name, want in sorted(expected.get("packages", {}).items()):
        have = (report.get("packages") or {}).get(name)
        if not want:
            continue
        if have is None:
            problems.append("%s is not installed" % name)
        elif isinstance(want, dict):
            if have.get("url") != want.get("url") or (want.get("sha256") and have.get("sha256") != want["sha256"]):
                problems.append("%s came from %s, not %s" % (name, have.get("url") or "an index", want.get("url")))
        elif have.get("version") != want:
            problems.append("%s is %s, not %s" % (name, have.get("version"), want))
    return problems


def sglang_install_id(inputs):
    if not isinstance(inputs, dict) or not str(inputs.get("sglang") or ""):
        raise AnsibleFilterError("sglang_install_id needs a dict that names the sglang version as 'sglang'")
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return "%s-%s" % (inputs["sglang"], hashlib.sha256(canonical.encode()).hexdigest()[:12])


class FilterModule:
    def filters(self):
        return {"sglang_install_id": sglang_install_id, "sglang_install_mismatches": sglang_install_mismatches}
