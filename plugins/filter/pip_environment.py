# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pip's settings as PIP_* environment variables; which exact pins a venv already meets."""
from __future__ import annotations

import json

DOCUMENTATION = r"""
name: pip_environment
short_description: pip's index, find-links and offline settings as PIP_* environment variables
description:
  - Settings travel as environment variables rather than pip options, so the pip module can still
    tell under check mode whether anything would change (with extra_args it always says it would).
  - Empty settings are left out; I(_input) (proxy variables, other PIP_* settings) is kept.
positional: _input
options:
  _input:
    description: Variables to start from.
    type: dict
    required: true
  index_url:
    description: PIP_INDEX_URL.
    type: str
  extra_index_urls:
    description: PIP_EXTRA_INDEX_URL, space separated.
    type: list
    elements: str
  find_links:
    description: PIP_FIND_LINKS, space separated.
    type: list
    elements: str
  no_index:
    description: PIP_NO_INDEX.
    type: bool
"""

EXAMPLES = r"""
- name: pip installs from a wheelhouse only
  ansible.builtin.pip:
    name: einops
  environment: "{{ {} | pip_environment(find_links=['/srv/wheels'], no_index=true) }}"
"""

RETURN = r"""
_value:
  description: The environment for the pip task.
  type: dict
"""


# Run by the venv's own python: the installed version of each distribution named, null where none is.
PINS_PROBE = """import importlib.metadata as metadata, json, sys
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
print(json.dumps({name: version(name) for name in sys.argv[1:]}))"""


def _exact_pin(requirement):
    """(name, version) of a plain `name==version` requirement; None for anything else (a range, extras,
    a marker, a URL), which only pip itself can judge."""
    name, sep, version = str(requirement).partition("==")
    name, version = name.strip(), version.strip()
    if not sep or not name or not version or any(c in name for c in "<>=!~;[@ /") or any(c in version for c in ",;= *"):
        return None
    return name, version


def pip_pins_probe(requirements, python):
    """argv for the command that reads, with the venv's own python, the installed version of every
    exactly pinned requirement: a settled venv is then one such read, not a run of pip."""
    return [python, "-c", PINS_PROBE] + [pin[0] for pin in map(_exact_pin, requirements) if pin]


def pip_pins_unmet(requirements, probe):
    """The requirements a venv does not meet, from pip_pins_probe's registered result: all of them where
    the read failed (no venv yet), and always those that are not exact pins, so pip runs for them."""
    installed = {}
    if probe and probe.get("rc") == 0:
        try:
            installed = json.loads(probe.get("stdout") or "{}")
        except ValueError:
            installed = {}
    unmet = []
    for requirement in requirements:
        pin = _exact_pin(requirement)
        if pin is None or installed.get(pin[0]) != pin[1]:
            unmet.append(requirement)
    return unmet


def pip_environment(base, index_url="", extra_index_urls=None, find_links=None, no_index=False):
    env = dict(base or {})
    if index_url:
        env["PIP_INDEX_URL"] = index_url
    if extra_index_urls:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(extra_index_urls)
    if find_links:
        env["PIP_FIND_LINKS"] = " ".join(find_links)
    if no_index:
        env["PIP_NO_INDEX"] = "1"
    return env


class FilterModule:
    def filters(self):
        return {"pip_environment": pip_environment, "pip_pins_probe": pip_pins_probe,
                "pip_pins_unmet": pip_pins_unmet}
