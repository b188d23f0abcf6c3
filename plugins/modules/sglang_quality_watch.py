#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait one round for a background quality eval and say how far it got."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_quality_watch
short_description: Wait one round for a background quality eval and report its progress
description:
  - One round of a watch. Waits up to I(wait) seconds for the async job behind I(results_file) (the
    sglang_quality role's eval) to finish, then says how far the eval got, from the progress file it writes.
  - A task loops over it, one round per progress line, so a long eval is never silent.
options:
  results_file:
    description: The C(results_file) of the async task that runs the eval.
    type: path
    required: true
  progress:
    description: The eval's progress file (JSON with phase, answered, total, elapsed_s).
    type: path
    required: true
  wait:
    description: Seconds to wait before reporting, unless the eval ends sooner; fractions are fine.
    type: float
    default: 30
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The eval is watched, one progress line every 30 s, until it ends
  sglang_quality_watch:
    results_file: "{{ eval_job.results_file }}"
    progress: /var/lib/sglang-fleet/quality-runs/20261204T210000Z/progress.json
    wait: 30
  register: watch
  loop: "{{ range((30 * 60) | watch_rounds(30)) | list }}"
  loop_control:
    label: "{{ watch.msg }}"
    break_when: watch is failed or watch.finished | default(false)
"""

RETURN = r"""
finished:
  description: Whether the eval has ended, in success or failure.
  type: bool
  returned: always
progress:
  description: The eval's last progress record, or an empty dict before its first.
  type: dict
  returned: always
  sample: {"phase": "eval", "answered": 120, "total": 200, "elapsed_s": 61.4}
msg:
  description: One line for the operator.
  type: str
  returned: always
  sample: "GSM8K: 120/200 questions answered, 1m01s"
"""

from ansible.module_utils.async_job import read_json, wait_for_job
from ansible.module_utils.basic import AnsibleModule

PHASES = {"starting": "starting", "eval": "GSM8K", "latency": "timing single streams", "done": "done"}


def describe(progress, finished):
    """One progress line from the eval's progress record."""
    progress = progress or {}
    elapsed = "%dm%02ds" % divmod(int(float(progress.get("elapsed_s") or 0)), 60)
    phase = progress.get("phase") or "starting"
    if phase == "eval":
        state = "GSM8K: %s/%s questions answered" % (progress.get("answered", 0), progress.get("total", "?"))
    else:
        state = PHASES.get(phase, phase)
    if finished and phase != "done":
        state = "ended while %s" % state
    return "%s, %s" % (state, elapsed)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_file=dict(type="path", required=True),
            progress=dict(type="path", required=True),
            wait=dict(type="float", default=30),
        ),
        supports_check_mode=True,
    )
    finished = wait_for_job(module.params["results_file"], module.params["wait"], poll=1)
    progress = read_json(module.params["progress"]) or {}
    module.exit_json(changed=False, finished=finished, progress=progress, msg=describe(progress, finished))


if __name__ == "__main__":
    main()
