#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read bench_serving's result file on the host, the server's arguments cut to what the report needs."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_result
short_description: Read a bench_serving result, with the server's arguments cut down on the host
description:
  - sglang's C(bench_serving --output-file) appends one JSON line per run, and stores in it the server's own
    C(/get_server_info), which sglang answers with every server argument, the API keys included
    (C(dataclasses.asdict(server_args)) in sglang 0.5.9's C(srt/entrypoints/http_server.py)).
  - This module cuts C(server_info) down to I(keep) on the host, in the file itself (rewritten in place,
    atomically, keeping its mode), before anything leaves the host. Neither the file nor the result then
    holds a key, in any encoding; a slurp would have carried the whole file, base64-encoded, into the run's
    output, its events and the report.
  - Returns the last line, the run this task's bench_serving call made.
options:
  path:
    description: The result file (JSON lines) on the host.
    type: path
    required: true
  keep:
    description: The C(server_info) entries the report needs; every other entry is removed.
    type: list
    elements: str
    required: true
attributes:
  check_mode:
    support: full
    description: In check mode it reads the file and rewrites nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The run's result is read, the server's arguments cut down on the host
  sglang_bench_result:
    path: /var/lib/sglang-bench/20261204T101500Z/eagle3-c8.jsonl
    keep: [speculative_algorithm, tp_size, enable_flashinfer_allreduce_fusion, version]
"""

RETURN = r"""
result:
  description: The file's last line, its C(server_info) cut to I(keep) (null when the server did not answer).
  returned: always
  type: dict
cut:
  description: How many of the file's lines had their C(server_info) cut (0 on a file already cut).
  returned: always
  type: int
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def cut_line(line, keep):
    """(the line's record with server_info cut to `keep`, whether that changed it)."""
    record = json.loads(line)
    info = record.get("server_info")
    if info is None:
        return record, False
    if isinstance(info, dict) and isinstance(info.get("decode"), list):  # prefill/decode: per role
        info = info["decode"][0] if info["decode"] else {}
    kept = {k: v for k, v in info.items() if k in keep} if isinstance(info, dict) else None
    changed = kept != record["server_info"]
    record["server_info"] = kept
    return record, changed


def cut_file(path, keep, check_mode=False):
    """(the last record, lines cut): every line's server_info cut, the file rewritten when any was."""
    with open(path) as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    if not lines:
        raise ValueError("%s holds no result: bench_serving wrote nothing" % path)
    records, removed = [], 0
    for line in lines:
        record, changed = cut_line(line, keep)
        records.append(record)
        removed += changed
    if removed and not check_mode:
        mode = os.stat(path).st_mode & 0o7777
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".bench-result.")
        try:
            with os.fdopen(handle, "w") as out:
                out.write("".join(json.dumps(record) + "\n" for record in records))
            os.chmod(temporary, mode)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    return records[-1], removed


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "keep": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        result, removed = cut_file(module.params["path"], set(module.params["keep"]), module.check_mode)
    except (OSError, ValueError) as exc:
        # A JSON error names a position, never the file's text (which may hold the key).
        module.fail_json(msg="The bench result %s cannot be read: %s" % (module.params["path"], exc))
    module.exit_json(changed=removed > 0, result=result, cut=removed)


if __name__ == "__main__":
    main()
