#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find the CUDA toolkits of a host, however they were installed, and the `cuda` alternative."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit_info
short_description: Report the CUDA toolkits installed on a host and which one is active
description:
  - Looks at every C(cuda-X.Y) directory under I(prefix) and asks its C(bin/nvcc --version)
    which release it is, so toolkits installed from NVIDIA's packages and from a runfile are
    found alike.
  - Tells, for each, whether dpkg owns its nvcc (C(package)) or not (C(runfile)), and which
    C(cuda-*) packages of that version dpkg has installed.
  - Reads the C(cuda) alternative (C(update-alternatives --query)) and where C(/usr/local/cuda)
    resolves to.
  - Read-only.
options:
  prefix:
    description: Directory that holds the C(cuda-X.Y) toolkit directories.
    type: path
    default: /usr/local
  alternative:
    description: Name of the alternative that points C(prefix/cuda) at a toolkit.
    type: str
    default: cuda
  files:
    description:
      - Files to compare with what is asked of them, each C(path), C(content), C(mode), C(owner),
        C(group); those that are missing or differ in any of these are in C(files_differ).
      - What the role writes besides the toolkit (the profile script, the linker's file), so one
        read tells whether the stage has anything left to do.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: What it holds.
        type: str
        required: true
      mode:
        description: Its mode, in octal.
        type: str
        default: "0644"
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group.
        type: str
        default: root
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
- name: Find the CUDA toolkits
  cuda_toolkit_info:
  register: cuda

- name: Say which one is active
  ansible.builtin.debug:
    msg: "{{ cuda.active.version | default('none') }}"
"""

RETURN = r"""
toolkits:
  description: One entry per toolkit directory, sorted by version.
  returned: always
  type: list
  elements: dict
  sample:
    - version: "13.0"
      home: /usr/local/cuda-13.0
      nvcc_release: "13.0"
      nvcc_version: "13.0.88"
      source: package
      packages: ["cuda-nvcc-13-0 13.0.88-1", "cuda-toolkit-13-0 13.0.2-1"]
active:
  description: The toolkit that C(prefix/cuda) resolves to, or null.
  returned: always
  type: dict
alternative:
  description: The alternative as update-alternatives reports it, or null when it is not registered.
  returned: always
  type: dict
  sample:
    name: cuda
    link: /usr/local/cuda
    status: auto
    value: /usr/local/cuda-13.0
    choices: [{path: /usr/local/cuda-13.0, priority: 130}]
files_differ:
  description: The paths of I(files) that are missing or differ in content, mode, owner or group.
  returned: always
  type: list
  elements: str
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_footprint import file_differs
from ansible.module_utils.nvcc import parse_nvcc


def parse_alternative(text):
    """`update-alternatives --query NAME` into a dict."""
    result, choices, current = {}, [], None
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "Name":
            result["name"] = value
        elif key == "Link":
            result["link"] = value
        elif key == "Status":
            result["status"] = value
        elif key == "Value":
            result["value"] = None if value == "none" else value
        elif key == "Alternative":
            current = {"path": value, "priority": None}
            choices.append(current)
        elif key == "Priority" and current is not None:
            current["priority"] = int(value)
    if not result.get("name"):
        return None
    result["choices"] = choices
    return result


def version_key(version):
    return tuple(int(part) for part in version.split("."))


def gather(run, prefix, alternative):
    """Everything the module returns; run(args) -> (rc, out, err)."""
    toolkits = []
    for home in glob.glob(os.path.join(prefix, "cuda-[0-9]*.[0-9]*")):
        if os.path.islink(home) or not os.path.isdir(home):
            continue
        version = os.path.basename(home)[len("cuda-"):]
        if not re.match(r"^\d+\.\d+$", version):
            continue
        nvcc = os.path.join(home, "bin", "nvcc")
        release, full = (None, None)
        if os.access(nvcc, os.X_OK):
            rc, out, _ = run([nvcc, "--version"])
            release, full = parse_nvcc(out) if rc == 0 else (None, None)
        rc, out, _ = run(["dpkg-query", "-S", nvcc])
        source = "package" if rc == 0 and out.strip() else "runfile"
        dashed = version.replace(".", "-")
        rc, out, _ = run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n", "cuda-*-" + dashed])
        packages = sorted(" ".join(l.split()[:2]) for l in out.splitlines() if l.endswith(" installed")) if rc == 0 else []
        toolkits.append({"version": version, "home": home, "nvcc_release": release, "nvcc_version": full,
                         "source": source, "packages": packages})
    toolkits.sort(key=lambda t: version_key(t["version"]))
    link = os.path.join(prefix, "cuda")
    target = os.path.realpath(link) if os.path.exists(link) else None
    active = next((t for t in toolkits if t["home"] == target), None)
    rc, out, _ = run(["update-alternatives", "--query", alternative])
    return {"toolkits": toolkits, "active": active, "alternative": parse_alternative(out) if rc == 0 else None}


def main():
    module = AnsibleModule(
        argument_spec={"prefix": {"type": "path", "default": "/usr/local"},
                       "alternative": {"type": "str", "default": "cuda"},
                       "files": {"type": "list", "elements": "dict", "default": [], "options": {
                           "path": {"type": "path", "required": True},
                           "content": {"type": "str", "required": True},
                           "mode": {"type": "str", "default": "0644"},
                           "owner": {"type": "str", "default": "root"},
                           "group": {"type": "str", "default": "root"}}}},
        supports_check_mode=True,
    )

    def run(args):
        if module.get_bin_path(args[0]) is None and not os.path.isabs(args[0]):
            return 127, "", "%s not found" % args[0]
        return module.run_command(args, environ_update={"LC_ALL": "C"})

    differ = [f["path"] for f in module.params["files"]
              if file_differs(f["path"], f["content"], f["mode"], f["owner"], f["group"])]
    module.exit_json(changed=False, files_differ=differ,
                     **gather(run, module.params["prefix"], module.params["alternative"]))


if __name__ == "__main__":
    main()
