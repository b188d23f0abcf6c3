#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the running server is older than what defines it, read on the host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_stale
short_description: Whether a running server is older than any file that defines it
description:
  - A server reads its unit, drop-ins, settings and key files, and the install C(current) names, only when it
    starts. A file changed after its main process started is one the running server does not serve; the
    server is stale, and must restart. This is read from the host on every run, so a run that stopped between
    writing a file and restarting the server (killed, failed, or a batch that never came) leaves nothing a
    rerun cannot see.
  - A file's change time (ctime) counts, which every write, rename and mode or owner change sets, and which no
    tool can set back; a symlink's own (C(current), switched by a rename). A path that does not exist counts
    for nothing; its directory's drop-ins, for I(dropin_dirs), each count.
  - A server that does not run is not stale (whether it must start is the caller's); the process is the
    unit's C(MainPID), its start time from C(/proc).
options:
  service:
    description: The server's systemd unit, without C(.service).
    type: str
    required: true
  paths:
    description: The files (and links) the server reads when it starts.
    type: list
    elements: path
    default: []
  dropin_dirs:
    description: Directories whose every entry is such a file (the unit's C(.d) drop-in directory).
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
    description: It reads and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Whether the running server is older than its files is known
  sglang_server_stale:
    service: sglang
    paths: [/etc/systemd/system/sglang.service, /etc/sglang/sglang.yaml, /opt/sglang/current]
    dropin_dirs: [/etc/systemd/system/sglang.service.d]
"""

RETURN = r"""
stale:
  description: Whether the server runs and a file changed after its process started.
  returned: always
  type: bool
started:
  description: When the server's main process started (seconds since the epoch), null when it does not run.
  returned: always
  type: float
newer:
  description: Each file changed after the process started, with how many seconds after.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule


def process_started(pid, proc="/proc"):
    """When process `pid` started, seconds since the epoch (its start in clock ticks after boot, plus boot)."""
    with open(os.path.join(proc, str(pid), "stat")) as handle:
        ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
    with open(os.path.join(proc, "stat")) as handle:
        boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def inputs(paths, dropin_dirs):
    """Every existing input with its ctime (a link's own)."""
    found = {}
    for path in list(paths) + [os.path.join(d, name) for d in dropin_dirs if os.path.isdir(d)
                               for name in sorted(os.listdir(d))]:
        try:
            found[path] = os.lstat(path).st_ctime
        except FileNotFoundError:
            pass
    return found


# A clock tick is 10 ms: a file written in the same tick as the start counts as older than the process.
GRACE = 0.01


def newer_than(started, changed):
    """The inputs changed after `started`, each with by how much, oldest change first."""
    late = sorted((when - started, path) for path, when in changed.items() if when - started > GRACE)
    return ["%s (changed %.0f s after the server started)" % (path, delay) for delay, path in late]


def main():
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "paths": {"type": "list", "elements": "path", "default": []},
            "dropin_dirs": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, err = module.run_command([systemctl, "show", "--property=MainPID", "--value", p["service"] + ".service"])
    if rc != 0:
        module.fail_json(msg="systemctl show %s.service: %s" % (p["service"], err.strip() or out.strip()))
    pid = int(out.strip() or 0)
    if pid <= 0:
        module.exit_json(changed=False, stale=False, started=None, newer=[])
    try:
        started = process_started(pid)
    except (OSError, ValueError, IndexError, StopIteration):
        module.exit_json(changed=False, stale=False, started=None, newer=[])  # it ended while we looked
    newer = newer_than(started, inputs(p["paths"], p["dropin_dirs"]))
    module.exit_json(changed=False, stale=bool(newer), started=started, newer=newer)


if __name__ == "__main__":
    main()
