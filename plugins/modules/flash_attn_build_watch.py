#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait a while for a background flash-attn build and say how far it got."""
from __future__ import annotations

DOCUMENTATION = r"""
module: flash_attn_build_watch
short_description: Wait one round for a background flash-attn build and report its progress
description:
  - One round of a watch. Waits up to I(wait) seconds for the async job behind I(results_file) to
    finish, then says how far the build got. A task loops over it, one round per progress line.
  - Reads the build log for ninja's C([done/total]) lines, so a long compile reports how many
    objects are compiled out of how many, and how long it has run.
  - Returns the tail of the log, for the failure message when the build fails.
options:
  results_file:
    description: The C(results_file) of the async task that runs the build.
    type: path
    required: true
  log:
    description: The build's log file.
    type: path
    required: true
  started_file:
    description: A file holding the build's start time in epoch seconds.
    type: path
    required: true
  wait:
    description: Seconds to wait before reporting, unless the build ends sooner; fractions are fine.
    type: float
    default: 60
  tail_lines:
    description: Lines of the log to return.
    type: int
    default: 40
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The build is watched, one progress line a minute, until it ends
  flash_attn_build_watch:
    results_file: "{{ build_job.results_file }}"
    log: /var/cache/sglang-fleet/flash_attn/build.log
    started_file: /var/cache/sglang-fleet/flash_attn/build.started
    wait: 60
  register: watch
  loop: "{{ range((180 * 60) | watch_rounds(60)) | list }}"
  loop_control:
    label: "{{ watch.msg }}"
    break_when: watch is failed or watch.finished | default(false)
"""

RETURN = r"""
finished:
  description: Whether the build has ended, in success or failure.
  type: bool
  returned: always
compiled:
  description: Objects compiled so far (ninja's count), or null before the first compile step.
  type: int
  returned: always
  sample: 57
total:
  description: Objects to compile in all, or null before the first compile step.
  type: int
  returned: always
  sample: 73
elapsed_s:
  description: Seconds since the build started.
  type: int
  returned: always
  sample: 1390
log_tail:
  description: The last lines of the build log.
  type: list
  elements: str
  returned: always
msg:
  description: One line for the operator.
  type: str
  returned: always
  sample: "compiled 57/73 objects (78%), 23m10s elapsed"
"""

import re
import time

from ansible.module_utils.async_job import wait_for_job
from ansible.module_utils.basic import AnsibleModule

# pip --verbose indents its build output.
NINJA_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\] ", re.MULTILINE)


def progress(text):
    """(compiled, total) from the last ninja step line, or (None, None)."""
    steps = NINJA_STEP.findall(text or "")
    if not steps:
        return None, None
    done, total = steps[-1]
    return int(done), int(total)


def describe(compiled, total, elapsed_s, last_line, finished):
    elapsed = "%dm%02ds" % divmod(int(elapsed_s), 60)
    if finished:
        # The last line of a watch, success or failure: how far the compile got is its summary.
        state = "build ended after %s" % elapsed + (", %d/%d objects compiled" % (compiled, total) if total else "")
    elif total:
        state = "compiled %d/%d objects (%d%%), %s elapsed" % (compiled, total, 100 * compiled // total, elapsed)
    else:
        state = "%s elapsed, no compile step yet" % elapsed
    return state + (": " + last_line if last_line and not total else "")


def read_log(path):
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_file=dict(type="path", required=True),
            log=dict(type="path", required=True),
            started_file=dict(type="path", required=True),
            wait=dict(type="float", default=60),
            tail_lines=dict(type="int", default=40),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # A build that ends is noticed within 2 s: reading the results file that often costs nothing.
    finished = wait_for_job(params["results_file"], params["wait"], poll=2)

    try:
        with open(params["started_file"]) as handle:
            started = float(handle.read().strip())
    except (OSError, ValueError):
        started = time.time()
    text = read_log(params["log"])
    lines = [line for line in text.splitlines() if line.strip()]
    # The last line that says something: compiler warnings end in lines of bare carets.
    wordy = [line.strip() for line in lines if re.search(r"[A-Za-z]{3}", line)]
    compiled, total = progress(text)
    elapsed_s = max(0, int(time.time() - started))
    module.exit_json(changed=False, finished=finished, compiled=compiled, total=total, elapsed_s=elapsed_s,
                     log_tail=lines[-params["tail_lines"]:],
                     msg=describe(compiled, total, elapsed_s, wordy[-1][:160] if wordy else "", finished))


if __name__ == "__main__":
    main()
