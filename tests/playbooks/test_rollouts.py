"""Steps that take a host out of service pass one host (or batch) at a time, and a failure stops them."""
import sys

import pytest
import yaml

import fleet
from conftest import ROOT


def test_the_driver_reboot_rolls_one_host_at_a_time_and_a_failure_stops_the_play():
    tasks = yaml.safe_load((ROOT / "roles/cuda_toolkit/tasks/driver.yml").read_text())
    reboot = next(t for t in tasks if "ansible.builtin.reboot" in t)
    assert reboot["throttle"] == 1
    play = yaml.safe_load((ROOT / "playbooks/cuda.yml").read_text())[0]
    assert play["max_fail_percentage"] == 0


def plan_tasks(*names):
    """Tasks of the server stage's plan (roles/sglang_server/tasks/plan.yml and the decide.yml it
    imports), by name."""
    tasks = {t["name"]: t for f in ("plan.yml", "decide.yml")
             for t in yaml.safe_load((ROOT / "roles/sglang_server/tasks" / f).read_text())}
    return [tasks[name] for name in names]


def batches(tmp_path, monkeypatch, hosts, groups, extravars=None, changing=None, host_vars=None):
    """The batches playbooks/server.yml's own plays make of an inventory: the plan's tasks swapped for
    the plan's own tasks that decide who rolls out, fed with which hosts change (every host unless
    `changing` names them), the rollout's for a task that records each batch."""
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    held_out, named, plan, planner, rollout = yaml.safe_load((ROOT / "playbooks/server.yml").read_text())
    # (a host held out by its acceptance record fails there, before the plan: tested with the role)
    assert held_out["ansible.builtin.import_playbook"] == "acceptance_record.yml" and held_out["tags"] == ["server"]
    assert plan["max_fail_percentage"] == 0 and rollout["max_fail_percentage"] == 0
    assert "serial" not in plan and rollout["hosts"] == "sglang_server_rollout"
    plan.pop("pre_tasks")
    plan["tasks"] = [{"name": "Whether this host changes is given", "ansible.builtin.set_fact": {
        "__sglang_server_restart_needed": "{{ inventory_hostname in %r }}" % list(changing or hosts)}}]
    plan["tasks"] += plan_tasks("A multi-node group restarts as one",
                                "Whether this host rolls out (its group's restart, or a way back into a router) is known",
                                "The hosts that roll out join the rollout's group, unit by unit")
    rollout["tasks"] = [{"name": "The batch is recorded", "ansible.builtin.set_fact": {
        "sglang_batch": "{{ ansible_play_batch }}"}}]
    (tmp_path / "server.yml").write_text(yaml.safe_dump([named, plan, planner, rollout]))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"gpu_nodes": {"hosts": {h: dict(local, __sglang_server_group_hosts=[h], __sglang_server_rank0=h,
                                                 **(host_vars or {}).get(h, {}))
                                         for h in hosts}}}
    for name, members in groups.items():
        inventory[name] = {"hosts": {h: {"__sglang_server_group_hosts": members, "__sglang_server_rank0": members[0]}
                                     for h in members},
                           "vars": {"sglang_server_multinode_group": name}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    run = fleet.run_playbook(tmp_path / "server.yml", tmp_path / "hosts.yml", extravars=extravars)
    assert run.rc == 0, run.failure_summary
    seen = []
    for host in hosts:
        batch = run.hosts[host].facts.get("sglang_batch")
        if batch is not None and batch not in seen:
            seen.append(batch)
    return seen


def test_the_server_rolls_the_canary_alone_then_what_the_fleet_s_floor_spares(tmp_path, monkeypatch):
    # fleet_min_in_service 75%: 3 of 5 stay in, 2 may be out; of 8, 6 stay in: never half the fleet at once.
    assert batches(tmp_path, monkeypatch, ["n1", "n2", "n3", "n4", "n5"], {}) == [
        ["n1"], ["n2", "n3"], ["n4", "n5"]]
    eight = ["n%d" % i for i in range(1, 9)]
    assert [len(b) for b in batches(tmp_path, monkeypatch, eight, {})] == [1, 2, 2, 2, 1]
    assert [len(b) for b in batches(tmp_path, monkeypatch, eight, {}, {"fleet_min_in_service": 7})] == [1] * 8


def test_a_server_out_of_a_router_goes_first_and_counts_against_the_floor(tmp_path, monkeypatch):
    """n5 is out of its router now (the plan's check pass would put it back): it rolls first, as the
    canary, costing nothing; once it is back, 3 of 5 must stay in and 2 may go at a time. A floor of all
    five spares no serving host: refused before any restart."""
    out = {"__sglang_server_routers_in": {"results": [{"item": "router", "changed": True}]}}
    hosts = ["n1", "n2", "n3", "n4", "n5"]
    # (batches() lists them by host; n5's wave is the first the play runs: the planner's order, unit-tested)
    assert sorted(batches(tmp_path, monkeypatch, hosts, {}, host_vars={"n5": out})) == [
        ["n1", "n2"], ["n3", "n4"], ["n5"]]
    with pytest.raises(AssertionError, match="keeps 5 of the fleet's 5 units in service, and 5 serve now"):
        batches(tmp_path, monkeypatch, hosts, {}, {"fleet_min_in_service": 5}, host_vars={"n5": out})


def test_only_the_hosts_that_change_roll_and_the_whole_fleet_sets_their_floor(tmp_path, monkeypatch):
    """A host the plan found as it should be is in no batch: a rerun that changes one host of five
    restarts that host alone, and one that changes nothing runs no rollout at all."""
    hosts = ["n1", "n2", "n3", "n4", "n5"]
    assert batches(tmp_path, monkeypatch, hosts, {}, changing=["n2", "n4", "n5"]) == [["n2"], ["n4", "n5"]]
    assert batches(tmp_path, monkeypatch, hosts, {}, changing=["n3"]) == [["n3"]]
    assert batches(tmp_path, monkeypatch, hosts, {}, changing=["nobody"]) == []


def test_a_group_rolls_out_whole_when_one_of_its_ranks_changes(tmp_path, monkeypatch):
    hosts = ["g1", "t1-r0", "t1-r1", "g2"]
    assert batches(tmp_path, monkeypatch, hosts, {"t1": ["t1-r0", "t1-r1"]}, changing=["t1-r1"]) == [
        ["t1-r0", "t1-r1"]]


@pytest.mark.parametrize("serial, expected", [
    (None, [["g1"], ["g2", "t1-r0", "t1-r1", "g3"]]),         # a floor of 1 of 4 units spares 3
    ([2], [["g1"], ["g2"], ["t1-r0", "t1-r1"], ["g3"]]),      # the cap counts hosts: g2 and the group exceed 2
    ([1], [["g1"], ["g2"], ["t1-r0", "t1-r1"], ["g3"]]),      # a group larger than the cap is one wave
], ids=["floor", "two", "one"])
def test_a_multi_node_group_is_never_split_across_batches(tmp_path, monkeypatch, serial, expected):
    hosts = ["g1", "g2", "t1-r0", "t1-r1", "g3"]
    extravars = dict({"fleet_min_in_service": 1}, **({"sglang_server_serial": serial} if serial else {}))
    assert batches(tmp_path, monkeypatch, hosts, {"t1": ["t1-r0", "t1-r1"]}, extravars) == expected


def test_a_group_whose_hosts_are_apart_in_the_inventory_still_restarts_in_one_batch(tmp_path, monkeypatch):
    """As an AWX slice lists them, by name: the ranks (a slice count apart) are never neighbours."""
    hosts = ["t1-r1", "g1", "g2", "t1-r0", "g3"]
    assert batches(tmp_path, monkeypatch, hosts, {"t1": ["t1-r0", "t1-r1"]}) == [
        ["t1-r0", "t1-r1"], ["g1"], ["g2"], ["g3"]]


def test_a_lab_node_keeps_its_address_when_the_plan_adds_the_rollout_group(tmp_path):
    """The lab's servers listen on 127.0.1.N by their place in the inventory: a group the plan adds
    (group_by) reorders groups['all'], and a rolled-out node must not take another node's address."""
    play = [{"hosts": "gpu_nodes", "gather_facts": False, "tasks": plan_tasks("The hosts that roll out join the rollout's group, unit by unit")
             + [{"name": "The address is recorded", "ansible.builtin.set_fact": {"sglang_server_address_before": "{{ lab_node_address }}"}}]},
            {"hosts": "sglang_server_rollout", "gather_facts": False, "tasks": [
                {"name": "The address is recorded", "ansible.builtin.set_fact": {"sglang_server_address_after": "{{ lab_node_address }}"}}]}]
    (tmp_path / "addresses.yml").write_text(yaml.safe_dump(play))
    run = fleet.run_playbook(tmp_path / "addresses.yml", ROOT / "inventory/lab/hosts.yml", limit="gpu_nodes",
                             extravars={"__sglang_server_rollout": "{{ inventory_hostname == 'lab-gpu-2' }}",
                                        "ansible_connection": "local", "ansible_python_interpreter": sys.executable})
    assert run.rc == 0, run.failure_summary
    facts = run.hosts["lab-gpu-2"].facts
    assert (facts["sglang_server_address_before"], facts["sglang_server_address_after"]) == ("127.0.1.2", "127.0.1.2")
