# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many rounds the progress watch of a background job may take before it gives up."""
from __future__ import annotations

import math

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: watch_rounds
short_description: The rounds a progress watch of a background job may take, from its timeout and round length
description:
  - A watch is one task that loops over a module waiting up to one round for the job, so a job that
    runs for its whole timeout needs the timeout over the round length, rounded up.
  - One round more than that, because the async wrapper kills a job only at its time limit and writes
    that down a moment later; the watch should read the wrapper's verdict rather than run out first.
positional: _input, round_seconds
options:
  _input:
    description: The job's timeout, in seconds.
    type: float
    required: true
  round_seconds:
    description: The longest one round waits, in seconds (fractions are fine).
    type: float
    required: true
"""

EXAMPLES = r"""
- name: A day's copy, watched in half-minute rounds
  ansible.builtin.debug:
    msg: "{{ (24 * 3600) | watch_rounds(30) }}"   # 2881
"""

RETURN = r"""
_value:
  description: The number of rounds, at least 2.
  type: int
"""


def watch_rounds(timeout_seconds, round_seconds):
    try:
        timeout, length = float(timeout_seconds), float(round_seconds)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("watch_rounds: %s" % exc)
    if not (timeout > 0 and length > 0) or math.isinf(timeout) or math.isinf(length):
        raise AnsibleFilterError("watch_rounds: the timeout (%s s) and the round length (%s s) must be positive"
                                 % (timeout_seconds, round_seconds))
    return math.ceil(timeout / length) + 1


class FilterModule(object):
    def filters(self):
        return {"watch_rounds": watch_rounds}
