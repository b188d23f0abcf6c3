# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Ansible's async wrapper leaves on the host about a background job (its results file)."""
from __future__ import annotations

import json


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
