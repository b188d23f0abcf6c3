# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Units of rollout: a host that serves alone, or every rank of a multi-node tensor-parallel group."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_rollout_units
short_description: The fleet's servers as units of rollout, rank 0 first
description:
  - A host without a multi-node group is a unit of its own. The hosts of one group, the inventory
    group named by their C(sglang_server_multinode_group), are one unit, ranked in that group's order
    as the server role ranks them (C(--node-rank)).
  - Units come in the order of I(_input), the first host of a unit deciding its place. The ranks of
    a group need not stand together there (AWX deals hosts to slices by name, so a group's ranks are
    never neighbours by name in a sliced inventory); the unit collects them wherever they are.
  - Every rank must be in I(_input), or the rolling restart would restart rank 0 against ranks that
    keep running the old group; a missing rank fails with the group's name.
positional: _input, hostvars, groups
options:
  _input:
    description: The server hosts, in rollout order (the play's hosts).
    type: list
    elements: str
    required: true
  hostvars:
    description:
      - The C(hostvars) variable, for each host's C(sglang_server_multinode_group) (none or empty
        for a host that serves alone).
    type: dict
    required: true
  groups:
    description: The inventory's groups (the C(groups) variable), for the ranks of each group.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The units of rollout are known
  ansible.builtin.set_fact:
    units: "{{ groups['gpu_nodes'] | sglang_rollout_units(hostvars, groups) }}"
"""

RETURN = r"""
_value:
  description: One dict a unit, C(name) (the group, or the host), C(rank0) and C(ranks) (rank order).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError


def sglang_rollout_units(hosts, hostvars, groups):
    hosts = list(hosts)
    units, seen = [], {}
    for host in hosts:
        group = (hostvars[host] if host in hostvars else {}).get("sglang_server_multinode_group") or ""
        if not group:
            units.append({"name": host, "rank0": host, "ranks": [host]})
            continue
        if group in seen:
            continue
        ranks = list(groups.get(group) or [])
        if host not in ranks:
            raise AnsibleFilterError("%s names multi-node group %s, which is not an inventory group holding it"
                                     % (host, group))
        missing = [rank for rank in ranks if rank not in hosts]
        if missing:
            raise AnsibleFilterError("multi-node group %s: %s not among the server hosts; every rank of a group "
                                     "restarts with it" % (group, ", ".join(missing)))
        seen[group] = True
        units.append({"name": group, "rank0": ranks[0], "ranks": ranks})
    return units


def sglang_rollout_hosts(hosts, hostvars, groups):
    """The hosts of I(hosts) whose plan put them in the rollout (C(__sglang_server_rollout)), unit by
    unit: the order the rollout play takes them in, so that its batches hold whole groups."""
    rolling = [host for host in hosts if (hostvars[host] if host in hostvars else {}).get("__sglang_server_rollout")]
    return [rank for unit in sglang_rollout_units(rolling, hostvars, groups) for rank in unit["ranks"]]


def _batch_size(spec, total):
    """A `serial` entry as Ansible reads it: a count, or a percentage of every host (at least 1)."""
    text = str(spec).strip()
    try:
        if text.endswith("%"):
            return int(float(text[:-1]) / 100.0 * total) or 1
        return int(text)
    except ValueError:
        raise AnsibleFilterError("serial entry %r is neither a count nor a percentage" % (spec,))


def sglang_rollout_batches(units, serial):
    """Batch sizes (host counts) for the play's `serial`: each batch takes whole units until it holds
    at least the hosts its `serial` entry asks for, so a group is never split; the last entry repeats."""
    serial = serial if isinstance(serial, (list, tuple)) else [serial]
    serial = list(serial) or [0]
    total = sum(len(unit["ranks"]) for unit in units)
    sizes, index, queue = [], 0, list(units)
    while queue:
        want = _batch_size(serial[min(index, len(serial) - 1)], total)
        if want <= 0:
            want = total
        batch = 0
        while queue and batch < want:
            batch += len(queue.pop(0)["ranks"])
        sizes.append(batch)
        index += 1
    return sizes


class FilterModule(object):
    def filters(self):
        return {
            "sglang_rollout_units": sglang_rollout_units,
            "sglang_rollout_batches": sglang_rollout_batches,
            "sglang_rollout_hosts": sglang_rollout_hosts,
        }

