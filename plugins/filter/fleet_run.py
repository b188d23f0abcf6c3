# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who this run is, for the fleet run lock: its id, the process that holds the lock, and the lock host."""
from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_run_id
short_description: The id of this run, shared by the slices of one AWX workflow job
description:
  - The id every ansible-playbook process of one run shares, so that they hold the fleet run lock together
    C(fleet_run_lock). AWX gives each job it launches its C(awx_job_id), and the jobs of a workflow (the
    slices of a sliced job template are one) also C(awx_workflow_job_id); elsewhere the run is this process.
  - C(fleet_run_holder) is this ansible-playbook process (its controller, pid and user) and every
    ansible-playbook process alive on this controller; C(fleet_lock_host) the host that keeps the lock.
positional: _input
options:
  _input:
    description: The run's variables (C(vars)), read for C(awx_workflow_job_id) and C(awx_job_id).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: This run's id
  ansible.builtin.debug:
    msg: "{{ vars | fleet_run_id }}"   # awx-workflow-118, or ops@ctl-1:4242
"""

RETURN = r"""
_value:
  description: C(awx-workflow-<id>), C(awx-job-<id>), or C(<user>@<controller>:<pid>).
  type: str
"""

import getpass
import os
import socket


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def _parent(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _is_playbook(argv):
    return any(os.path.basename(part.decode(errors="replace")) in ("ansible-playbook", "ansible-runner")
               for part in argv[:3])


def playbook_pid(pid=None):
    """The ansible-playbook process this code runs under: templating runs in one of its forked workers,
    which share its command line, so the topmost ancestor with that command line is the playbook itself."""
    pid = pid or os.getpid()
    argv = _cmdline(pid)
    while True:
        parent = _parent(pid)
        if parent <= 1 or _cmdline(parent) != argv:
            return pid
        pid = parent


def live_playbooks():
    """The pids of every ansible-playbook process alive on this controller."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _is_playbook(_cmdline(int(name))):
            found.append(int(name))
    return sorted(found)


def fleet_run_id(run_vars):
    """AWX's workflow job (its slices share it), else AWX's job, else this very process."""
    run_vars = run_vars or {}
    for name, prefix in (("awx_workflow_job_id", "awx-workflow-"),
                         ("awx_job_id", "awx-job-")):
        if str(run_vars.get(name) or "").strip():
            return prefix + str(run_vars[name]).strip()
    return "%s@%s:%d" % (getpass.getuser(), socket.gethostname(), playbook_pid())


def fleet_run_holder(_ignored=None):
    """This process, and what else runs playbooks on this controller (a holder here that is not among
    them has died)."""
    return {"controller": socket.gethostname(), "pid": playbook_pid(), "user": getpass.getuser(),
            "live_pids": live_playbooks()}


def fleet_lock_host(groups):
    """The host that keeps the fleet run lock: the first router host by name, else the first GPU host."""
    for group in ("sglang_routers", "gpu_nodes"):
        members = sorted((groups or {}).get(group) or [])
        if members:
            return members[0]
    return ""


class FilterModule(object):
    def filters(self):
        return {"fleet_run_id": fleet_run_id, "fleet_run_holder": fleet_run_holder,
                "fleet_lock_host": fleet_lock_host}
