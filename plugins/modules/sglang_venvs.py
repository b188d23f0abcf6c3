#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The versioned sglang venvs of a host: which exist, which one serves, switch, prune, adopt."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_venvs
short_description: List, switch, prune and adopt the versioned sglang venvs under one root
description:
  - Each install lives in I(root)/venvs/<id>/. An install is complete once the sglang role has
    written its marker, C(.sglang-fleet-install.json), inside it.
  - I(root)/current names the install in service and I(root)/previous the one before it. Both are
    relative symlinks, replaced atomically (a new link renamed over the old one), so a reader sees
    the old target or the new one, never neither.
  - C(query) reads all of this and changes nothing.
  - C(switch) points C(current) at I(id) and C(previous) at I(previous), which defaults to the
    install C(current) named. A rollback passes both, to put the links back exactly as they were.
  - C(prune) keeps at most I(keep) installs. C(current), C(previous) and I(protect) always count
    first; then the most recently built. The rest are renamed to a hidden name, then deleted, so a
    half-deleted venv never looks like an install. A compatibility link left by C(adopt) that
    names a removed install goes with it.
  - C(adopt) takes over a venv from before versioned installs (I(legacy), a real directory). It is
    renamed to venvs/<id> and I(legacy) becomes a link to it, so the scripts inside, whose
    shebangs name the old path, and a server still running from it keep working.
  - With I(probe), the same call also reads what Pythons hold, so a settled host needs no command
    of its own for it. I(interpreter) is run with the probe before the action and its JSON is
    returned as C(interpreter). I(report) names an install whose python is run with the probe after
    the action, when the install is complete; its JSON is returned as C(report).
options:
  root:
    description: Where C(venvs/), C(current) and C(previous) live.
    type: path
    default: /opt/sglang
  state:
    description: What to do.
    type: str
    choices: [query, switch, prune, adopt]
    default: query
  id:
    description: The install to switch to (C(switch)) or to adopt the legacy venv as (C(adopt)).
    type: str
  previous:
    description: For C(switch), what C(previous) names afterwards; "" removes the link.
    type: str
  keep:
    description: For C(prune), how many installs to keep.
    type: int
    default: 2
  protect:
    description: For C(prune), installs that are never removed (the one being built).
    type: list
    elements: str
    default: []
  legacy:
    description: The venv from before versioned installs.
    type: path
  complete:
    description: For C(adopt), write a marker so the adopted venv counts as a complete install.
    type: bool
    default: false
  probe:
    description:
      - Python source that prints one JSON object (the sglang role's C(venv_report.py)), run as
        C(python -c probe) for I(interpreter) and I(report).
    type: str
  interpreter:
    description: With I(probe), a python to run it with first; a python that fails it fails the task.
    type: path
  report:
    description:
      - With I(probe), the install whose python runs it after the action. An install that is missing
        or not complete, or whose python fails the probe, gives C(report) null and says why in
        C(report_error).
    type: str
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would change, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Switch the server's venv to the new install
  sglang_venvs:
    root: /opt/sglang
    state: switch
    id: 0.5.9-3f2a9c1d0b7e

- name: Keep the last two installs
  sglang_venvs:
    state: prune
    keep: 2
    protect: [0.5.9-3f2a9c1d0b7e]
"""

RETURN = r"""
current:
  description: The install C(current) names afterwards ("" when none).
  returned: always
  type: str
  sample: 0.5.9-3f2a9c1d0b7e
previous:
  description: The install C(previous) names afterwards ("" when none).
  returned: always
  type: str
  sample: 0.5.9-81d0c2b7aa41
installs:
  description:
    - Every install under venvs/, newest built first. C(recorded) is the id a complete install's marker
      records (its own name, or the id its inputs have today when an earlier release built it under
      another), "" for an install that is not complete.
  returned: always
  type: list
  elements: dict
  sample: [{id: 0.5.9-3f2a9c1d0b7e, complete: true, built: 1764540000.0, recorded: 0.5.9-3f2a9c1d0b7e}]
legacy:
  description: I(legacy) when it is a real directory still to adopt, else "".
  returned: always
  type: str
removed:
  description: The installs C(prune) removed (or would remove, in check mode).
  returned: always
  type: list
  elements: str
interpreter:
  description: What the probe printed, run with I(interpreter).
  returned: when interpreter is given
  type: dict
  sample: {python: cpython-311, platform: linux-x86_64}
report:
  description: What the probe printed, run with the python of install I(report); null when it could not run.
  returned: when report is given
  type: dict
report_error:
  description: Why C(report) is null ("" when it is not).
  returned: when report is given
  type: str
"""

import json
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_installs import ID, MARKER, link_target, state_of


def point(root: str, name: str, install: str) -> None:
    """root/name -> venvs/<install>, replaced in one rename; "" removes the link."""
    path = os.path.join(root, name)
    if not install:
        if os.path.islink(path):
            os.unlink(path)
        return
    partial = os.path.join(root, ".%s.partial" % name)
    if os.path.lexists(partial):
        os.unlink(partial)
    os.symlink(os.path.join("venvs", install), partial)
    os.replace(partial, path)


def choose_removals(found: list[dict], keep: int, protected: set[str]) -> list[str]:
    """What prune removes: protected installs count first, then the newest, up to keep."""
    kept = [i["id"] for i in found if i["id"] in protected]
    for install in found:
        if len(kept) >= keep:
            break
        if install["id"] not in kept:
            kept.append(install["id"])
    return [i["id"] for i in found if i["id"] not in kept]


def probe(python: str, source: str) -> tuple[dict | None, str]:
    """(what the probe printed, parsed; "") or (None, why not): a python that is missing, fails, or
    prints something other than one JSON object."""
    try:
        run = subprocess.run([python, "-c", source], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, "%s did not run: %s" % (python, error)
    if run.returncode != 0:
        return None, "%s exited %d: %s" % (python, run.returncode, run.stderr.strip()[-2000:])
    try:
        found = json.loads(run.stdout)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return None, "%s printed no JSON object: %r" % (python, run.stdout[:200])
    return found, ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/opt/sglang"},
            "state": {"type": "str", "default": "query", "choices": ["query", "switch", "prune", "adopt"]},
            "id": {"type": "str"},
            "previous": {"type": "str"},
            "keep": {"type": "int", "default": 2},
            "protect": {"type": "list", "elements": "str", "default": []},
            "legacy": {"type": "path"},
            "complete": {"type": "bool", "default": False},
            "probe": {"type": "str"},
            "interpreter": {"type": "path"},
            "report": {"type": "str"},
        },
        required_if=[("state", "switch", ["id"]), ("state", "adopt", ["id", "legacy"])],
        required_by={"interpreter": "probe", "report": "probe"},
        supports_check_mode=True,
    )
    p = module.params
    root, action = p["root"], p["state"]
    for value in [p["id"] or ""] + [p["previous"] or ""] + [p["report"] or ""] + p["protect"]:
        if value and not ID.match(value):
            module.fail_json(msg="%r is not an install id (letters, digits, '.', '_', '+', '-')" % value)
    if p["keep"] < 1:
        module.fail_json(msg="keep must be at least 1, not %d" % p["keep"])
    probed = {}
    if p["interpreter"]:
        probed["interpreter"], error = probe(p["interpreter"], p["probe"])
        if error:
            module.fail_json(msg="the interpreter that makes the venvs: " + error)
    before = state_of(root, p["legacy"])
    complete = {i["id"] for i in before["installs"] if i["complete"]}
    changed, removed = False, []

    if action == "switch":
        # Switching to the install in service keeps previous as it is.
        previous = p["previous"] if p["previous"] is not None else (
            before["previous"] if before["current"] in ("", p["id"]) else before["current"])
        for name in [p["id"]] + ([previous] if previous else []):
            if name not in complete:
                module.fail_json(msg="%s/venvs/%s is not a complete install (it has no %s): run the sglang "
                                     "stage for it first" % (root, name, MARKER), **before)
        wanted = {"current": p["id"], "previous": previous}
        changed = wanted != {"current": before["current"], "previous": before["previous"]}
        if changed and not module.check_mode:
            point(root, "previous", wanted["previous"])
            point(root, "current", wanted["current"])

    elif action == "prune":
        protected = {before["current"], before["previous"], *p["protect"]} - {""}
        removed = choose_removals(before["installs"], p["keep"], protected)
        changed = bool(removed)
        if changed and not module.check_mode:
            for name in removed:
                doomed = os.path.join(root, "venvs", ".removing-" + name)
                os.rename(os.path.join(root, "venvs", name), doomed)
                shutil.rmtree(doomed)
                if p["legacy"] and link_target(p["legacy"]) == name:
                    os.unlink(p["legacy"])

    elif action == "adopt":
        target = os.path.join(root, "venvs", p["id"])
        if before["legacy"]:
            if os.path.lexists(target):
                module.fail_json(msg="cannot adopt %s as %s: that install exists already" % (p["legacy"], p["id"]))
            changed = True
            if not module.check_mode:
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                # The rename and the link in one breath: a server running from the old path keeps
                # finding its files through the link.
                os.rename(p["legacy"], target)
                os.symlink(os.path.join("venvs", p["id"]), p["legacy"])
                if p["complete"]:
                    with open(os.path.join(target, MARKER), "w") as marker:
                        json.dump({"id": p["id"], "adopted_from": p["legacy"]}, marker, indent=2, sort_keys=True)
                        marker.write("\n")

    after = before if module.check_mode or not changed else state_of(root, p["legacy"])
    if module.check_mode and action == "switch" and changed:
        after = dict(before, current=wanted["current"], previous=wanted["previous"])
    if p["report"]:
        if p["report"] in {i["id"] for i in after["installs"] if i["complete"]}:
            probed["report"], probed["report_error"] = probe(
                os.path.join(root, "venvs", p["report"], "bin", "python"), p["probe"])
        else:
            probed["report"], probed["report_error"] = None, "%s/venvs/%s is no complete install" % (root, p["report"])
    module.exit_json(changed=changed, removed=removed, **after, **probed)


if __name__ == "__main__":
    main()
