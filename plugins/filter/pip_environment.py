# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pip's settings as PIP_* environment variables; whether a venv already holds its requirements."""
from __future__ import annotations

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


# Run by a venv's own python with requirements (pip's syntax) as arguments: exit 0 when its environment
# holds every one, else 1 and a line naming each it does not. Each named package is checked, not its
# dependencies, as `pip install` finds it satisfied. A venv without packaging still has pip's copy.
REQUIREMENTS_CHECK = """import sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
lines = []
for text in sys.argv[1:]:
    requirement = Requirement(text)
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        lines.append("%s: not installed" % text)
        continue
    if not requirement.specifier.contains(version, prereleases=True):
        lines.append("%s: %s is installed" % (text, version))
if lines:
    print("\\n".join(lines))
sys.exit(1 if lines else 0)"""


def pip_requirements_check(requirements, python):
    """argv of the check that a venv's own python holds `requirements`: a settled venv is one such read,
    not a run of pip. rc 0: all held; 1: some not (named on stdout); anything else: no venv to ask."""
    return [python, "-c", REQUIREMENTS_CHECK] + list(requirements)


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
        return {"pip_environment": pip_environment, "pip_requirements_check": pip_requirements_check}
