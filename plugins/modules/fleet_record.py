#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stage's record on its host: one JSON local fact per stage, written and read in one call."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_record
short_description: Write or read a stage's record, a JSON local fact
description:
  - Every stage that leaves something for later runs records it the same way, as
    C(<dir>/<name>.fact), a JSON local fact that C(ansible_local.<name>) also shows after
    gathering. Writer and reader name the record, never a path (the directory is the fleet
    layer's C(fleet_state_dir)).
  - I(state=present) writes I(content) when it differs (atomically, C(root:root 0644), making
    I(dir)), and removes every I(legacy) file, the record an earlier release kept elsewhere.
    Check mode says what would change; diff mode shows it.
  - I(state=read) returns the record, or, where there is none yet, the first I(legacy) file that
    exists, so a host recorded by an earlier release is read as it is until its stage writes again.
    A record that is not JSON fails, naming the file. Read-only.
options:
  name:
    description: The record's name (the stage's), a word.
    type: str
    required: true
  dir:
    description: The directory of the records.
    type: path
    default: /etc/ansible/facts.d
  content:
    description: The record (I(state=present)).
    type: dict
  legacy:
    description: Where earlier releases kept this record (JSON files).
    type: list
    elements: path
    default: []
  state:
    description: Write the record, or read it.
    type: str
    choices: [present, read]
    default: present
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would write or remove, and changes nothing.
  diff_mode:
    support: full
    description: It returns the record before and after a write.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The install is recorded
  fleet_record:
    name: sglang
    dir: "{{ fleet_state_dir }}"
    content: {id: 0.5.9-9559f4d77ef0, venv: /opt/sglang/venvs/0.5.9-9559f4d77ef0}
    legacy: [/etc/sglang/install.json]

- name: The install the sglang stage chose is read
  fleet_record:
    name: sglang
    dir: "{{ fleet_state_dir }}"
    legacy: [/etc/sglang/install.json]
    state: read
  register: install
"""

RETURN = r"""
path:
  description: The record's file.
  returned: always
  type: str
  sample: /etc/ansible/facts.d/sglang.fact
record:
  description: The record (I(state=read)); empty when the host has none.
  returned: always
  type: dict
found:
  description: Whether a record (or a legacy file) was there to read (I(state=read)).
  returned: always
  type: bool
source:
  description: The file it was read from (the record, or a legacy file); empty when none.
  returned: always
  type: str
removed:
  description: The legacy files removed (I(state=present)), or that would be in check mode.
  returned: always
  type: list
  elements: str
"""

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RecordError(Exception):
    pass


def record_path(directory, name):
    if not NAME.match(name or ""):
        raise RecordError("record name %r: use lowercase letters, digits and _ (it becomes ansible_local.<name>)"
                          % (name,))
    return os.path.join(directory, name + ".fact")


def _load(path):
    try:
        with open(path) as handle:
            found = json.load(handle)
    except ValueError as error:
        raise RecordError("%s is not JSON (%s): fix or remove it, and run its stage again" % (path, error))
    if not isinstance(found, dict):
        raise RecordError("%s holds %s, not a record (a JSON object)" % (path, type(found).__name__))
    return found


def read(directory, name, legacy=()):
    path = record_path(directory, name)
    for source in [path] + list(legacy):
        if os.path.isfile(source):
            return {"path": path, "record": _load(source), "found": True, "source": source}
    return {"path": path, "record": {}, "found": False, "source": ""}


def render(content):
    return json.dumps(content, indent=4, sort_keys=True) + "\n"


def write(directory, name, content, legacy=(), check=False):
    """Writes the record when it differs and removes the legacy files; returns what changed."""
    path = record_path(directory, name)
    text = render(content)
    before = ""
    if os.path.isfile(path):
        with open(path) as handle:
            before = handle.read()
    removed = [old for old in legacy if os.path.lexists(old) and old != path]
    changed = before != text or bool(removed)
    if changed and not check:
        if before != text:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=directory, prefix="." + name + ".")
            try:
                with os.fdopen(handle, "w") as out:
                    out.write(text)
                os.chmod(temporary, 0o644)
                os.replace(temporary, path)
            except BaseException:
                if os.path.exists(temporary):
                    os.unlink(temporary)
                raise
        for old in removed:
            os.unlink(old)
    return {"path": path, "changed": changed, "removed": removed,
            "diff": {"before": before, "after": text, "before_header": path, "after_header": path}}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            dir=dict(type="path", default="/etc/ansible/facts.d"),
            content=dict(type="dict"),
            legacy=dict(type="list", elements="path", default=[]),
            state=dict(type="str", choices=["present", "read"], default="present"),
        ),
        required_if=[("state", "present", ["content"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "read":
            module.exit_json(changed=False, removed=[], **read(p["dir"], p["name"], p["legacy"]))
        done = write(p["dir"], p["name"], p["content"], p["legacy"], check=module.check_mode)
    except (RecordError, OSError) as error:
        module.fail_json(msg="record %s: %s" % (p["name"], error))
    diff = done.pop("diff")
    result = dict(done, record=p["content"], found=True, source=done["path"])
    if module._diff and done["changed"]:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
