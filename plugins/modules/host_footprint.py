#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a host already holds a stage's whole footprint, in one read-only call."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_footprint
short_description: Say whether a host already holds what a stage would put there, changing nothing
description:
  - One read of a stage's files, directories, user, packages, venv packages and units, so that a host
    where all of them are as asked can skip the stage's tasks that would put them there.
  - Returns what differs as short phrases (a path and how it differs, a unit and its state), never
    what a file holds; the files' wanted contents are hidden from every log.
  - Read-only; runs the same under C(--check).
options:
  files:
    description: Paths and how each must be.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The path.
        type: path
        required: true
      state:
        description: C(file) (a regular file with I(content)), C(directory), C(link) (a symlink to I(target)), or C(absent).
        type: str
        choices: [file, directory, link, absent]
        default: file
      target:
        description: What the symlink must hold, as it holds it (not resolved), for I(state=link).
        type: str
        default: ""
      content:
        description: What the file must hold exactly, for I(state=file).
        type: str
        default: ""
      sha256:
        description:
          - The sha256 of what the file must hold, instead of I(content), for a file whose content is a
            secret (a key) that the module is then never handed.
        type: str
        default: ""
      mode:
        description: The permission bits, in octal (C("0644")); not checked when empty.
        type: str
        default: ""
      owner:
        description: The owning user.
        type: str
        default: root
      group:
        description: The owning group.
        type: str
        default: root
  users:
    description: Users that must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The user's name.
        type: str
        required: true
      home:
        description: The home directory it must have; not checked when empty.
        type: str
        default: ""
      shell:
        description: The login shell it must have; not checked when empty.
        type: str
        default: ""
  packages:
    description: Distribution packages (dpkg) that must be installed.
    type: list
    elements: str
    default: []
  venv_packages:
    description: Python projects a venv must hold, each at one version.
    type: list
    elements: dict
    default: []
    suboptions:
      venv:
        description: The venv's directory.
        type: path
        required: true
      name:
        description: The project's name, as pip names it.
        type: str
        required: true
      version:
        description: The version it must have.
        type: str
        required: true
  units:
    description: Systemd units that must be both enabled and active.
    type: list
    elements: str
    default: []
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What the router's stage would change is known
  host_footprint:
    files:
      - {path: /usr/local/lib/sglang-fleet, state: directory, mode: "0755"}
      - {path: /etc/systemd/system/sglang-router.service, content: "{{ lookup('template', 'unit.j2') }}",
         mode: "0644"}
    users: [{name: sglang-router, home: /nonexistent, shell: /usr/sbin/nologin}]
    packages: [python3-venv]
    venv_packages: [{venv: /opt/sglang-router, name: sglang-router, version: 0.3.2}]
    units: [sglang-router.service]
  register: footprint
"""

RETURN = r"""
settled:
  description: Whether the host holds the whole footprint as asked.
  returned: always
  type: bool
pending:
  description: Each way the host differs, as a short phrase, in the order of the options.
  returned: always
  type: list
  elements: str
  sample: ["/etc/sglang/sglang-router-healer.json differs", "sglang-router-healer.timer is inactive and enabled, not active and enabled"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_footprint import footprint_pending


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "state": {"type": "str", "choices": ["file", "directory", "link", "absent"], "default": "file"},
                "target": {"type": "str", "default": ""},
                # What a file holds may be a secret (a key file): masked wherever the module's log shows it.
                "content": {"type": "str", "default": "", "no_log": True},
                "sha256": {"type": "str", "default": ""},
                "mode": {"type": "str", "default": ""},
                "owner": {"type": "str", "default": "root"},
                "group": {"type": "str", "default": "root"}}},
            "users": {"type": "list", "elements": "dict", "default": [], "options": {
                "name": {"type": "str", "required": True},
                "home": {"type": "str", "default": ""},
                "shell": {"type": "str", "default": ""}}},
            "packages": {"type": "list", "elements": "str", "default": []},
            "venv_packages": {"type": "list", "elements": "dict", "default": [], "options": {
                "venv": {"type": "path", "required": True},
                "name": {"type": "str", "required": True},
                "version": {"type": "str", "required": True}}},
            "units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )

    def run(argv):
        if module.get_bin_path(argv[0]) is None:
            return 127, "", "%s not found" % argv[0]
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    params = module.params
    pending = footprint_pending(run, files=params["files"], users=params["users"], packages=params["packages"],
                                venv_packages=params["venv_packages"], units=params["units"])
    module.exit_json(changed=False, settled=not pending, pending=pending)


if __name__ == "__main__":
    main()
