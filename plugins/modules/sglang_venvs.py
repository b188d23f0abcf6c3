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
  description: Every install under venvs/, newest built first.
  returned: always
  type: list
  elements: dict
  sample: [{id: 0.5.9-3f2a9c1d0b7e, complete: true, built: 1764540000.0}]
legacy:
  description: I(legacy) when it is a real directory still to adopt, else "".
  returned: always
  type: str
removed:
  description: The installs C(prune) removed (or would remove, in check mode).
  returned: always
  type: list
  elements: str
"""

import json
import os
import shutil

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
        },
        required_if=[("state", "switch", ["id"]), ("state", "adopt", ["id", "legacy"])],
        supports_check_mode=True,
    )
    p = module.params
    root, action = p["root"], p["state"]
    for value in [p["id"] or ""] + [p["previous"] or ""] + p["protect"]:
        if value and not ID.match(value):
            module.fail_json(msg="%r is not an install id (letters, digits, '.', '_', '+', '-')" % value)
    if p["keep"] < 1:
        module.fail_json(msg="keep must be at least 1, not %d" % p["keep"])
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
    module.exit_json(changed=changed, removed=removed, **after)


if __name__ == "__main__":
    main()
