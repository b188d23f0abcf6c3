#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait a while for a background model fetch and say how far it got."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_model_watch
short_description: Wait a while for a background model fetch or verification and report its progress
description:
  - Waits up to I(wait) seconds for the async job behind I(results_file) to finish.
  - Reads the progress file that M(sglang_model_sync) writes (bytes done and total, the current
    file, the rate), so a long copy reports how far it got.
  - Once the job has ended, returns its result (and removes the job's results file); fails with the
    job's own message when the job failed.
options:
  results_file:
    description: The C(results_file) of the async task.
    type: path
    required: true
  progress_file:
    description: The progress file the task writes.
    type: path
    required: true
  wait:
    description: Seconds to wait before reporting, unless the job ends sooner.
    type: int
    default: 30
author: sglang-fleet
"""

EXAMPLES = r"""
- name: The fetch is watched for half a minute
  sglang_model_watch:
    results_file: "{{ fetch_job.results_file }}"
    progress_file: /run/sglang-model/nvidia--Kimi-K2.5-NVFP4.progress
    wait: 30
  register: watch
"""

RETURN = r"""
finished:
  description: Whether the job has ended, in success or failure.
  type: bool
  returned: always
done:
  description: Bytes done so far (fetched, or hashed when verifying).
  type: int
  returned: always
total:
  description: Bytes to do in all.
  type: int
  returned: always
result:
  description: The job's own result, once it has ended (empty before).
  type: dict
  returned: always
msg:
  description: One line for the operator.
  type: str
  returned: always
  sample: "fetching 12.6 of 54.5 GB (23%), model-00003-of-00119.safetensors, 1.1 GB/s, 11s elapsed"
"""

import os
import time

from ansible.module_utils.async_job import job_finished, read_json
from ansible.module_utils.basic import AnsibleModule


def size(nbytes):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return "%.1f %s" % (nbytes / scale, unit)
    return "%d B" % nbytes


def describe(progress, finished):
    if not progress:
        return "finished" if finished else "starting"
    done, total = progress.get("done", 0), progress.get("total", 0)
    line = "%s %s of %s (%d%%)" % (progress.get("phase", "working"), size(done), size(total),
                                   100 * done // total if total else 100)
    if progress.get("file") and not finished:
        line += ", " + progress["file"]
    return line + ", %s/s, %ds elapsed%s" % (size(progress.get("rate", 0)), progress.get("elapsed", 0),
                                              ", finished" if finished else "")


def main():
    module = AnsibleModule(
        argument_spec={
            "results_file": dict(type="path", required=True),
            "progress_file": dict(type="path", required=True),
            "wait": dict(type="int", default=30),
        },
        supports_check_mode=True,
    )
    deadline = time.time() + max(0, module.params["wait"])
    finished = job_finished(module.params["results_file"])
    while not finished and time.time() < deadline:
        time.sleep(0.2)
        finished = job_finished(module.params["results_file"])
    progress = read_json(module.params["progress_file"]) or {}
    line = describe(progress, finished)
    result = {}
    if finished:
        result = read_json(module.params["results_file"]) or {}
        try:
            os.unlink(module.params["results_file"])
        except OSError:
            pass
        if result.get("failed") or "state" not in result:
            # A crash leaves no msg, only the exception's (ansible-core 2.19 nests it).
            crash = ((result.get("exception") or {}).get("event") or {}).get("msg") \
                if isinstance(result.get("exception"), dict) else result.get("exception")
            module.fail_json(msg=result.get("msg") or "the background job crashed: %s" % (crash or result),
                             finished=True, progress=line)
    module.exit_json(changed=bool(result.get("changed")), finished=finished, done=progress.get("done", 0),
                     total=progress.get("total", 0), result=result, msg=line)


if __name__ == "__main__":
    main()
