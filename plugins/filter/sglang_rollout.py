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
    unit: the order the rollout play takes them in, so that its batches hold whole groups. The units that
    are out of service now go first: each comes back before a serving one leaves (sglang_rollout_waves)."""
    rolling = [host for host in hosts if (hostvars[host] if host in hostvars else {}).get("__sglang_server_rollout")]
    units = sglang_rollout_units(rolling, hostvars, groups)
    out = set(sglang_rollout_out(units, hostvars))
    ordered = [unit for unit in units if unit["name"] in out] + [unit for unit in units if unit["name"] not in out]
    return [rank for unit in ordered for rank in unit["ranks"]]


def _batch_size(spec, total):
    """A `serial` entry as Ansible reads it: a count, or a percentage of every host (at least 1)."""
    text = str(spec).strip()
    try:
        if text.endswith("%"):
            return int(float(text[:-1]) / 100.0 * total) or 1
        return int(text)
    except ValueError:
        raise AnsibleFilterError("serial entry %r is neither a count nor a percentage" % (spec,))


def held_out_by_acceptance(unit, hostvars):
    """Whether a host of `unit` failed GPU acceptance in this run (gpu_acceptance_passed false: the
    stage's verdict, or in a run without the stage its record's): the unit serves whole or not at all,
    and no router lists it. A host with no verdict (never measured) is not held out."""
    return any((hostvars[rank] if rank in hostvars else {}).get("gpu_acceptance_passed") is False
               for rank in unit["ranks"])


def sglang_rollout_out(units, hostvars):
    """The names of the units out of service now: a rank 0 that some router does not hold, as the plan
    found it (the plan's check-mode pass would put it back), or a unit held out by GPU acceptance, which
    no router lists and the plan never reached."""
    out = []
    for unit in units:
        found = (hostvars[unit["rank0"]] if unit["rank0"] in hostvars else {}).get("__sglang_server_routers_in") or {}
        if held_out_by_acceptance(unit, hostvars) or any(
                result.get("changed") for result in found.get("results") or [] if not result.get("skipped")):
            out.append(unit["name"])
    return out


def _floor(min_in_service, fleet_units):
    """fleet_min_in_service as a count of units: a count, or a percentage of the fleet rounded down."""
    text = str(min_in_service).strip()
    try:
        value = float(text[:-1]) / 100.0 * fleet_units if text.endswith("%") else float(text)
    except ValueError:
        raise AnsibleFilterError("fleet_min_in_service %r is neither a count nor a percentage" % (min_in_service,))
    if value < 0 or (text.endswith("%") and float(text[:-1]) > 100):
        raise AnsibleFilterError("fleet_min_in_service %r is out of range" % (min_in_service,))
    return int(value + 1e-9)


def sglang_rollout_floor(min_in_service, fleet_units):
    """The floor as a count of workers (units) that must stay in service, what each router's drain slot
    checks live: fleet_min_in_service over the whole fleet's units, as the waves are planned."""
    return _floor(min_in_service, int(fleet_units))


def sglang_rollout_waves(units, fleet_units, min_in_service, out=(), serial=()):
    """The rollout's waves, as host counts for the play's `serial`, under a floor of units in service.

    `units` restart, in rollout order (sglang_rollout_hosts puts the units that are out first: each
    comes back before another leaves); the fleet has `fleet_units` units behind its routers, of which the
    units named in `out` are out of service now (down, or out of a router). The first wave is one unit
    alone, the canary; every later wave takes as many serving units as the fleet can lose while
    `min_in_service` (a count, or a percentage of the fleet rounded down) stay in service, counting the
    units still out, capped by `serial` (an optional list of counts or percentages of the restarting
    hosts, its last entry repeating). A unit already out costs nothing to restart, and is back in
    service after its wave. A plan whose next serving unit fits under no wave fails before any restart,
    naming the numbers; a one-unit fleet has no floor to hold (its restart is an outage, as any restart
    of a lone server is)."""
    units = list(units)
    if not units:
        return []
    fleet_units = max(int(fleet_units), len(units))
    out = set(out)
    floor = _floor(min_in_service, fleet_units)
    # Out for the whole rollout: units out now that this rollout does not restart.
    stays_out = len(out - {unit["name"] for unit in units})
    pending = {unit["name"] for unit in units if unit["name"] in out}  # out now, back after their wave
    serial = [entry for entry in (serial if isinstance(serial, (list, tuple)) else [serial]) if str(entry).strip()]
    total_hosts = sum(len(unit["ranks"]) for unit in units)
    waves, queue, index = [], list(units), 0
    while queue:
        # What this wave may take out of service beyond the units that are out during it anyway.
        spare = fleet_units - floor - stays_out - len(pending)
        if fleet_units > 1 and queue[0]["name"] not in out and spare < 1:
            serve = fleet_units - stays_out - len(pending)
            raise AnsibleFilterError(
                "fleet_min_in_service %s keeps %d of the fleet's %d units in service, and %d serve now (%d out): "
                "no unit that serves can restart. Lower the floor, or bring the units that are out back first"
                % (min_in_service, floor, fleet_units, serve, fleet_units - serve))
        spare = max(spare, 1)
        cap = _batch_size(serial[min(index, len(serial) - 1)], total_hosts) if serial else 0
        wave, serving = [], 0
        # The canary restarts alone; then as many serving units as the floor spares, with any that are out.
        while queue and not (waves == [] and wave):
            unit = queue[0]
            costs = unit["name"] not in out
            hosts = sum(len(u["ranks"]) for u in wave) + len(unit["ranks"])
            if wave and ((costs and serving + 1 > spare) or (cap > 0 and hosts > cap)):
                break
            wave.append(queue.pop(0))
            serving += costs
        pending -= {unit["name"] for unit in wave}
        waves.append(sum(len(unit["ranks"]) for unit in wave))
        index += 1
    return waves


class FilterModule(object):
    def filters(self):
        return {
            "sglang_rollout_units": sglang_rollout_units,
            "sglang_rollout_hosts": sglang_rollout_hosts,
            "sglang_rollout_waves": sglang_rollout_waves,
            "sglang_rollout_out": sglang_rollout_out,
            "sglang_rollout_floor": sglang_rollout_floor,
        }

