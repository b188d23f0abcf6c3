"""The rollout's waves under a floor of units in service (sglang_rollout_waves): one tested planner."""
import math

import pytest
from ansible.errors import AnsibleFilterError

from sglang_rollout import sglang_rollout_out, sglang_rollout_waves


def units(count, group_every=0):
    """`count` units; with group_every, every group_every-th unit is a two-host multi-node group."""
    made = []
    for index in range(count):
        if group_every and index % group_every == group_every - 1:
            made.append({"name": "tp%d" % index, "rank0": "g%da" % index, "ranks": ["g%da" % index, "g%db" % index]})
        else:
            made.append({"name": "g%d" % index, "rank0": "g%d" % index, "ranks": ["g%d" % index]})
    return made


def replay(plan, waves, fleet_units, out=()):
    """Units out of service at each wave's height: those out and not yet restarted (a unit out that a
    wave restarts is back after it), plus the wave's serving units."""
    queue, worst, still_out = list(plan), [], set(out)
    for size in waves:
        wave, hosts = [], 0
        while hosts < size:
            unit = queue.pop(0)
            wave.append(unit)
            hosts += len(unit["ranks"])
        assert hosts == size, "a wave split a unit"
        worst.append(len(still_out) + sum(1 for unit in wave if unit["name"] not in set(out)))
        still_out -= {unit["name"] for unit in wave}
    assert not queue
    return worst


@pytest.mark.parametrize("fleet", list(range(1, 65)))
@pytest.mark.parametrize("floor", ["75%", "50%", "90%", 1])
def test_every_wave_keeps_the_floor_and_the_canary_goes_alone(fleet, floor):
    plan = units(fleet, group_every=5)
    keep = int(float(str(floor)[:-1]) / 100 * fleet + 1e-9) if str(floor).endswith("%") else floor
    if fleet > 1 and fleet - keep < 1:
        with pytest.raises(AnsibleFilterError, match="no unit that serves can restart"):
            sglang_rollout_waves(plan, fleet, floor)
        return
    waves = sglang_rollout_waves(plan, fleet, floor)
    out_at = replay(plan, waves, fleet)
    assert out_at[0] == 1 and waves[0] == len(plan[0]["ranks"])  # the canary: one unit
    assert all(fleet - count >= min(keep, fleet - 1) for count in out_at)
    spare = max(fleet - keep, 1)
    # Nothing slower than the floor asks for: every full wave after the canary takes what it spares.
    assert len(waves) == 1 + math.ceil((fleet - 1) / spare)


def test_eight_servers_at_the_default_floor_restart_one_then_two_at_a_time_not_four():
    assert sglang_rollout_waves(units(8), 8, "75%") == [1, 2, 2, 2, 1]


def test_a_two_server_fleet_restarts_one_at_a_time_and_a_lone_server_restarts():
    assert sglang_rollout_waves(units(2), 2, "75%") == [1, 1]
    assert sglang_rollout_waves(units(1), 1, "75%") == [1]


def test_only_the_changed_part_of_a_larger_fleet_restarts_and_the_whole_fleet_sets_the_floor():
    # 3 of 16 change: 16 - 12 = 4 may be out, so after the canary the other two go together.
    assert sglang_rollout_waves(units(3), 16, "75%") == [1, 2]


def test_a_multi_node_group_is_one_unit_and_its_hosts_one_wave():
    plan = units(4, group_every=2)  # g0, tp1 (2 hosts), g2, tp3 (2 hosts)
    assert sglang_rollout_waves(plan, 4, "50%") == [1, 3, 2]


def test_units_already_out_cost_nothing_and_the_floor_counts_them():
    plan = units(6)
    # g1 and g2 are down: 4 serve; the floor of 4 spares nothing for a serving unit.
    with pytest.raises(AnsibleFilterError, match=r"keeps 4 of the fleet's 6 units in service, and 4 serve now \(2 out\)"):
        sglang_rollout_waves(plan, 6, 4, out={"g1", "g2"})
    # A floor of 3 spares one while two are out: the down units ride along, and once they are back
    # the floor spares three.
    waves = sglang_rollout_waves(plan, 6, 3, out={"g1", "g2"})
    assert waves == [1, 3, 2]
    assert max(replay(plan, waves, 6, out={"g1", "g2"})) <= 3
    # Out first, as the rollout orders them: each comes back before a serving unit leaves, and the floor
    # of 4 that refused above is kept all the way.
    first = [plan[1], plan[2], plan[0], plan[3], plan[4], plan[5]]
    waves = sglang_rollout_waves(first, 6, 4, out={"g1", "g2"})
    assert waves == [1, 2, 2, 1] and max(replay(first, waves, 6, out={"g1", "g2"})) <= 2
    # Only units that are out restart: nothing that serves goes out, whatever the floor.
    assert sglang_rollout_waves(units(2), 6, 6, out={"g0", "g1"}) == [1, 1]


def test_a_serial_cap_makes_waves_smaller_never_larger():
    assert sglang_rollout_waves(units(8), 8, "50%", serial=[1, 2]) == [1, 2, 2, 2, 1]
    assert sglang_rollout_waves(units(8), 8, "75%", serial=[1, "100%"]) == [1, 2, 2, 2, 1]


def test_a_floor_that_is_no_number_is_refused():
    with pytest.raises(AnsibleFilterError, match="neither a count nor a percentage"):
        sglang_rollout_waves(units(2), 2, "most")


def test_the_fleet_s_units_are_counted_over_the_whole_fleet_in_a_slice_too():
    from fleet_layer import fleet_units
    whole = {"g1": "", "g2": "", "t1a": "t1", "t1b": "t1", "g3": ""}
    # A slice's inventory holds g1 alone; fleet_gpu_nodes names all five hosts, one of them a group of two.
    assert fleet_units("g1", {"g1": {"fleet_gpu_nodes": whole}}, {"gpu_nodes": ["g1"]}) == 4
    hostvars = {"g1": {}, "t1a": {"sglang_server_multinode_group": "t1"}, "t1b": {"sglang_server_multinode_group": "t1"}}
    assert fleet_units("g1", hostvars, {"gpu_nodes": ["g1", "t1a", "t1b"], "t1": ["t1a", "t1b"]}) == 2


def test_a_two_unit_fleet_with_one_out_brings_it_back_then_restarts_the_other():
    """As a failed gate leaves a fleet of two: the unit out (its fix rolling out) comes back first."""
    plan = units(2)
    assert sglang_rollout_waves(plan, 2, "75%", out={"g0"}) == [1, 1]
    with pytest.raises(AnsibleFilterError, match="keeps 1 of the fleet's 2 units in service, and 1 serve now"):
        sglang_rollout_waves(list(reversed(plan)), 2, "75%", out={"g0"})


def test_the_rollout_takes_the_units_that_are_out_first():
    from sglang_rollout import sglang_rollout_hosts
    out = {"__sglang_server_routers_in": {"results": [{"item": "router", "changed": True}]}}
    hostvars = {h: {"__sglang_server_rollout": True} for h in ("a", "b", "c")}
    hostvars["c"].update(out)
    assert sglang_rollout_hosts(["a", "b", "c"], hostvars, {}) == ["c", "a", "b"]


def test_a_unit_held_out_by_gpu_acceptance_counts_as_out_of_service_for_the_floor():
    """The plan never reaches a host that failed acceptance, and no router lists it: it is out."""
    fleet = units(4, group_every=2)   # g0, tp1 (g1a, g1b), g2, tp3 (g3a, g3b)
    hostvars = {"g0": {"gpu_acceptance_passed": False}, "g1b": {"gpu_acceptance_passed": False},
                "g2": {"gpu_acceptance_passed": True}, "g3a": {}}
    assert sglang_rollout_out(fleet, hostvars) == ["g0", "tp1"]
    # Two of four out already: under a floor of 2 a serving unit cannot restart, and the plan says so.
    with pytest.raises(AnsibleFilterError, match=r"and 2 serve now \(2 out\)"):
        sglang_rollout_waves(fleet[2:3], 4, 2, sglang_rollout_out(fleet, hostvars))
