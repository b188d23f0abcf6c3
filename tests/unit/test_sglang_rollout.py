"""Units of rollout and their waves: a multi-node group is one unit, never split across waves."""
import pytest
from ansible.errors import AnsibleFilterError

from sglang_rollout import sglang_rollout_hosts, sglang_rollout_units, sglang_rollout_waves

GROUPS = {"tp": ["b0", "b1"], "big": ["c0", "c1", "c2", "c3"]}


def units(hosts, of):
    """of: each host's multi-node group, given to the filter as hostvars (a host may have none)."""
    return sglang_rollout_units(hosts, {h: {"sglang_server_multinode_group": g} for h, g in of.items()}, GROUPS)


def test_single_hosts_and_a_group_in_rank_order():
    found = units(["a", "b1", "b0", "d"], {"b0": "tp", "b1": "tp"})
    assert found == [{"name": "a", "rank0": "a", "ranks": ["a"]},
                     {"name": "tp", "rank0": "b0", "ranks": ["b0", "b1"]},  # rank order is the group's
                     {"name": "d", "rank0": "d", "ranks": ["d"]}]


def test_waves_hold_whole_groups_and_a_cap_only_makes_them_smaller():
    found = units(["a", "b0", "b1", "c0", "c1", "c2", "c3", "d", "e"],
                  {"b0": "tp", "b1": "tp", "c0": "big", "c1": "big", "c2": "big", "c3": "big"})
    # 5 units, a floor of 1: 4 may be out at once after the canary; a group of 4 hosts is one unit.
    assert sglang_rollout_waves(found, 5, 1) == [1, 8]
    assert sglang_rollout_waves(found, 5, 1, serial=[3]) == [1, 2, 4, 2]  # at most 3 hosts, whole units
    assert sum(sglang_rollout_waves(found, 5, "75%")) == 9


def test_a_group_missing_a_rank_is_refused():
    with pytest.raises(AnsibleFilterError, match="multi-node group tp: b1 not among the server hosts"):
        units(["a", "b0"], {"b0": "tp"})


def test_a_group_whose_ranks_are_apart_is_one_unit_where_its_first_rank_stands():
    """An AWX slice lists its hosts by name, so a group's ranks (a slice count apart) are never neighbours."""
    found = units(["b1", "a", "b0", "d"], {"b0": "tp", "b1": "tp"})
    assert [unit["ranks"] for unit in found] == [["b0", "b1"], ["a"], ["d"]]


def test_the_rollout_order_is_unit_by_unit_and_holds_only_the_hosts_that_roll_out():
    hostvars = {h: {"sglang_server_multinode_group": "tp" if h.startswith("b") else "",
                    "__sglang_server_rollout": h != "d"} for h in ["a", "b0", "b1", "d", "e"]}
    assert sglang_rollout_hosts(["b1", "a", "d", "e", "b0"], hostvars, GROUPS) == ["b0", "b1", "a", "e"]


def test_a_bad_serial_entry_is_named():
    with pytest.raises(AnsibleFilterError, match="'half'"):
        sglang_rollout_waves(units(["a", "d"], {}), 2, 0, serial=["half"])

