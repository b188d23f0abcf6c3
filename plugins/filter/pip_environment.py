# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pip's settings as PIP_* environment variables."""
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
        return {"pip_environment": pip_environment}
