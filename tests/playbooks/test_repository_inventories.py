"""The repository's inventories pass the fleet checks as Ansible reads them (templated hostvars, groups),
open-listener refusal included: the lab binds its namespaces' 127.0.1.x addresses, the example its
ansible_host, with a key it asks the site to vault."""
import pytest
import yaml

import fleet
from conftest import ROOT


def check(tmp_path, inventory, **extravars):
    play = [{"name": "The repository's inventory passes the fleet checks", "hosts": "all", "gather_facts": False,
             "tasks": [{"name": "The fleet checks find nothing", "ansible.builtin.assert": {
                 "that": "__problems | length == 0", "fail_msg": "{{ __problems | join('; ') }}", "quiet": True},
                 "vars": {"__problems": "{{ inventory_hostname | fleet_problems(hostvars) }}"}}]}]
    (tmp_path / "check.yml").write_text(yaml.safe_dump(play))
    return fleet.run_playbook(tmp_path / "check.yml", ROOT / inventory, extravars=extravars,
                              env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})


@pytest.mark.parametrize("inventory, extravars", [
    ("inventory/lab", {}),
    ("inventory/example", {"vault_sglang_server_api_key": "a-vaulted-key"}),
])
def test_the_repository_s_inventory_passes(tmp_path, inventory, extravars):
    result = check(tmp_path, inventory, **extravars)
    assert result.rc == 0, result.failure_summary
    assert len(result.hosts) >= 3


def test_the_example_without_its_vaulted_key_stops_and_open_it_is_refused(tmp_path):
    result = check(tmp_path, "inventory/example")
    assert result.rc != 0
    assert "vault_sglang_server_api_key" in result.failure_summary
    result = check(tmp_path, "inventory/example", vault_sglang_server_api_key="")
    failures = result.hosts["gpu-node-01"].failures
    assert "the server listens on gpu-node-01.example.com:30000 (fleet_server_host) with no sglang_server_api_key" \
        in failures[0]["msg"]
    assert not result.hosts["gateway-01"].failures   # its router listens on loopback
