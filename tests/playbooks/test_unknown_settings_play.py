"""A misspelt setting given with -e fails the run in the fleet checks, before any stage changes a thing,
naming the setting meant; the same run with the setting's own name goes on."""
import sys

import pytest
import yaml

import fleet
from conftest import ROOT

TYPO = "did you mean sglang_server_api_key?"


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    return path


def run(tmp_path, playbook, inventory, *extra_args):
    return fleet.run_playbook(playbook, inventory, extra_args=list(extra_args),
                              extravars={"fleet_state_dir": str(tmp_path / "state")},
                              env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})


def test_a_misspelt_extra_variable_fails_the_fleet_checks_naming_the_setting_meant(tmp_path, inventory):
    play = [{"name": "The fleet layer's checks", "hosts": "gpu_nodes", "gather_facts": False, "roles": ["fleet"]}]
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(play))
    refused = run(tmp_path, tmp_path / "fleet.yml", inventory, "-e", "sglang_server_api_kye=x")
    assert refused.rc != 0
    (failure,) = refused.hosts["node"].failures
    assert failure["task"] == "The fleet settings of this host can work together"
    assert failure["msg"] == "node: sglang_server_api_kye is not a setting of any role: " + TYPO
    passed = run(tmp_path, tmp_path / "fleet.yml", inventory, "-e", "sglang_server_api_key=x")
    assert passed.rc == 0, passed.failure_summary


def test_the_real_preflight_stage_refuses_it_before_any_of_its_tasks(tmp_path, inventory):
    result = run(tmp_path, ROOT / "playbooks/preflight.yml", inventory, "-e", "sglang_server_api_kye=x")
    assert result.rc != 0
    failures = result.hosts["node"].failures
    assert failures[0]["task"] == "The fleet settings of this host can work together" and TYPO in failures[0]["msg"]
    assert not [task for task, _ in result.hosts["node"].results if task and "gpu_preflight" in task.lower()]
    assert result.changed == 0
