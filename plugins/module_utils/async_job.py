# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Ansible's async wrapper leaves on the host about a background job (its results file)."""
from __future__ import annotations

import json
import time

# What the async wrapper writes when it kills a job at its `async:` limit.
WRAPPER_TIMEOUT = "Timeout exceeded"


def read_json(path):
    """The file's JSON, or None while it is not written yet or being replaced."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def job_finished(results_file):
    """The async wrapper writes {"started": 1, "finished": 0} until the job ends."""
    data = read_json(results_file)
    return data is not None and ("started" not in data or bool(data.get("finished")))


def wait_for_job(results_file, wait, poll=0.2):
    """Whether the job has ended, after waiting at most `wait` seconds (a fraction is fine) for it to.

    One watch round: the caller reports progress after each, so the wait bounds how long an
    operator goes without a line, and `poll` how late an ended job is noticed.
    """
    deadline = time.monotonic() + max(0.0, float(wait))
    while True:
        if job_finished(results_file):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll, left))


def job_failure(result):
    """Why a finished job failed, in words, or None when its result does not say it failed.

    The wrapper's own results: a job killed at its time limit, one whose module crashed (ansible-core
    2.19 nests the exception's message), one whose output was not JSON.
    """
    if not isinstance(result, dict):
        return "it left no result"
    if result.get("msg") == WRAPPER_TIMEOUT and "child_pid" in result:
        return "it ran past its time limit and was stopped"
    exception = result.get("exception")
    if isinstance(exception, dict):
        exception = (exception.get("event") or {}).get("msg") or exception.get("msg")
    if not (result.get("failed") or exception):
        return None
    return result.get("msg") or ("it crashed: %s" % exception if exception else "it failed: %s" % (result,))
