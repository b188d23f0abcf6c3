"""The server's intent (tasks_from: intent), which verify and the bench read: a bad value fails there,
naming it, instead of becoming an expectation no server could meet."""
import sys

import yaml

import fleet
from conftest import ROOT


LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def intent(tmp_path, **extravars):
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "What the server should run is read", "ansible.builtin.include_role": {
            "name": "sglang_server", "tasks_from": "intent"}}]}]
    (tmp_path / "intent.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"node": LOCAL}}}))
    return fleet.run_playbook(tmp_path / "intent.yml", tmp_path / "hosts.yml",
                              extravars={"sglang_server_tp": 8, "fleet_state_dir": str(tmp_path / "state"), **extravars},
                              env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")})


def test_the_intent_names_what_the_inventory_asks_for(tmp_path):
    run = intent(tmp_path, sglang_server_allreduce_fusion="off")
    assert run.rc == 0, run.failure_summary
    expect = run.hosts["node"].facts["sglang_server_intent"]["expect"]
    assert expect == {"tp_size": 8, "speculative_algorithm": "EAGLE3", "enable_flashinfer_allreduce_fusion": False}


def test_a_bad_fusion_setting_fails_the_intent_naming_it(tmp_path):
    run = intent(tmp_path, sglang_server_allreduce_fusion="maybe")
    assert run.rc != 0
    assert "sglang_server_allreduce_fusion" in run.failure_summary and "maybe" in run.failure_summary


def test_verify_asks_a_multi_node_group_s_api_of_its_rank_0_alone(tmp_path):
    """Found by the six-node sliced lab run: verify asked rank 1, which serves no API, and failed it."""
    group = {"sglang_server_multinode_group": "tp_a"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"gpu_nodes": {
        "hosts": {"rank-0": dict(LOCAL, **group), "rank-1": dict(LOCAL, **group)},
        "children": {"tp_a": {"hosts": {"rank-0": {}, "rank-1": {}}}}}}))
    run = fleet.run_playbook(ROOT / "playbooks/verify.yml", tmp_path / "hosts.yml", limit="rank-1",
                             extravars={"sglang_server_tp": 8, "sglang_server_allreduce_fusion": "off",
                                        "fleet_state_dir": str(tmp_path / "state"), "sglang_verify_health_timeout": 3})
    assert run.rc == 0, run.failure_summary
    facts = run.hosts["rank-1"].facts
    assert facts["sglang_server_intent"]["rank0"] == "rank-0"
    assert facts["sglang_verify_status"] == "a rank of a multi-node group: rank-0, its rank 0, serves its API"
