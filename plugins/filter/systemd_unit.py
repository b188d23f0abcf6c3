# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quote words for systemd unit files."""
from __future__ import annotations

import re

DOCUMENTATION = r"""
name: systemd_quote
short_description: Quote one word for a systemd ExecStart= or Environment= line
description:
  - Leaves plain words as they are; wraps anything else in double quotes, escaping C(\), C(")
    and doubling C($) (and C(%) to C(%%)) so systemd passes the word through unchanged.
positional: _input
options:
  _input:
    description: The word.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: A quoted ExecStart word
  ansible.builtin.debug:
    msg: "{{ 'a b$c' | systemd_quote }}"   # "a b$$c"
"""

RETURN = r"""
_value:
  description: The word as systemd must read it.
  type: str
"""

PLAIN = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")


def systemd_quote(word):
    word = str(word)
    if PLAIN.match(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
    return '"%s"' % escaped


class FilterModule:
    def filters(self):
        return {"systemd_quote": systemd_quote}
