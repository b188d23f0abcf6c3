#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait a while for a background model fetch and say how far it got."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_model_watch
short_description: Wait one round for a background model fetch or verification and report its progress
description:
  - One round of a watch. Waits up to I(wait) seconds for the async job behind I(results_file) to
    finish, then says how far it got. A task loops over it, one round per progress line.
  - Reads the progress file that M(sglang_model_sync) writes (bytes done and total, the current
    file, the rate), so a long copy reports how far it got.
  - Once the job has ended, returns its result (and removes the job's results file); fails with the
    job's own message, and the last progress, when the job failed, crashed or ran past its time limit.
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
    description: Seconds to wait before reporting, unless the job ends sooner; fractions are fine.
    type: float
    default: 30
  job:
    description: What the job is, for the messages, e.g. C(the fetch of nvidia/Kimi-K2.5-NVFP4).
    type: str
    default: the background job
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The fetch is watched, one progress line each half minute, until it ends
  sglang_model_watch:
    results_file: "{{ fetch_job.results_file }}"
    progress_file: /run/sglang-model/nvidia--Kimi-K2.5-NVFP4.progress
    wait: 30
    job: the fetch of nvidia/Kimi-K2.5-NVFP4
  register: watch
  loop: "{{ range((24 * 3600) | watch_rounds(30)) | list }}"
  loop_control:
    label: "{{ watch.msg }}"
    break_when: watch is failed or watch.finished | default(false)
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
  description: One line for the operator; on failure, why, then the last progress.
  type: str
  returned: always
  sample: "fetching 12.6 of 54.5 GB (23%), model-00003-of-00119.safetensors, 1.1 GB/s, 11s elapsed"
progress:
  description: The last progress line, when the job failed.
  type: str
  returned: failure
"""

import os

from ansible.module_utils.async_job import job_failure, read_json, wait_for_job
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
            "wait": dict(type="float", default=30),
            "job": dict(type="str", default="the background job"),
        },
        supports_check_mode=True,
    )
    params = module.params
    finished = wait_for_job(params["results_file"], params["wait"])
    progress = read_json(params["progress_file"]) or {}
    line = describe(progress, finished)
    result = {}
    if finished:
        result = read_json(params["results_file"]) or {}
        try:
            os.unlink(params["results_file"])
        except OSError:
            pass
        why = job_failure(result) or (None if "state" in result else "it returned no state: %s" % (result,))
        if why:
            # Where it was when it stopped: the file it was on, not "finished".
            line = describe(progress, False)
            module.fail_json(msg="%s failed: %s (last progress: %s)" % (params["job"], why, line),
                             finished=True, progress=line)
    module.exit_json(changed=bool(result.get("changed")), finished=finished, done=progress.get("done", 0),
                     total=progress.get("total", 0), result=result, msg=line)


if __name__ == "__main__":
    main()
