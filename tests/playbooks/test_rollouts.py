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


def batches(tmp_path, monkeypatch, hosts, groups, extravars=None):
    """The batches playbooks/server.yml's own play header makes of an inventory (its roles swapped
    for a task that records each batch)."""
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    plan, play = yaml.safe_load((ROOT / "playbooks/server.yml").read_text())
    assert play["max_fail_percentage"] == 0
    play.pop("pre_tasks"), play.pop("roles")
    play["tasks"] = [{"name": "The batch is recorded", "ansible.builtin.set_fact": {
        "sglang_batch": "{{ ansible_play_batch }}"}}]
    (tmp_path / "server.yml").write_text(yaml.safe_dump([plan, play]))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"gpu_nodes": {"hosts": {h: dict(local) for h in hosts}}}
    for name, members in groups.items():
        inventory[name] = {"hosts": {h: None for h in members}, "vars": {"sglang_server_multinode_group": name}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    run = fleet.run_playbook(tmp_path / "server.yml", tmp_path / "hosts.yml", extravars=extravars)
    assert run.rc == 0, run.failure_summary
    seen = []
    for host in hosts:
        batch = run.hosts[host].facts["sglang_batch"]
        if batch not in seen:
            seen.append(batch)
    return seen


def test_the_server_rolls_one_host_then_half_the_fleet_and_stops_at_the_first_failure(tmp_path, monkeypatch):
    assert batches(tmp_path, monkeypatch, ["n1", "n2", "n3", "n4", "n5"], {}) == [
        ["n1"], ["n2", "n3"], ["n4", "n5"]]


@pytest.mark.parametrize("serial, expected", [
    (None, [["g1"], ["g2", "t1-r0", "t1-r1"], ["g3"]]),      # the group joins the batch it starts in
    ([2], [["g1", "g2"], ["t1-r0", "t1-r1"], ["g3"]]),
    ([1], [["g1"], ["g2"], ["t1-r0", "t1-r1"], ["g3"]]),     # a group larger than the batch is one batch
], ids=["default", "two", "one"])
def test_a_multi_node_group_is_never_split_across_batches(tmp_path, monkeypatch, serial, expected):
    hosts = ["g1", "g2", "t1-r0", "t1-r1", "g3"]
    extravars = {"sglang_server_serial": serial} if serial else None
    assert batches(tmp_path, monkeypatch, hosts, {"t1": ["t1-r0", "t1-r1"]}, extravars) == expected


def test_a_group_whose_hosts_are_apart_is_refused_before_any_batch(tmp_path, monkeypatch):
    with pytest.raises(AssertionError, match="must stand together"):
        batches(tmp_path, monkeypatch, ["t1-r0", "g1", "t1-r1"], {"t1": ["t1-r0", "t1-r1"]})
