"""A setting no role takes (a misspelt one) is refused by the fleet checks before any change, naming the
setting meant, instead of being silently ignored (plugins/filter/fleet_layer.py: unknown_settings)."""
import re

import pytest
import yaml

import fleet_layer
from fleet_layer import MOVED, SET_AT_RUN_TIME, fleet_defaults, fleet_problems, role_settings, unknown_settings
from conftest import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks/main.yml").exists())
PREFIX = re.compile(r"^(%s)_" % "|".join(sorted(ROLES, key=len, reverse=True)))


def test_a_misspelt_setting_is_refused_naming_the_one_meant():
    assert fleet_problems("box", {"box": {"sglang_server_api_kye": "x"}}) == [
        "sglang_server_api_kye is not a setting of any role: did you mean sglang_server_api_key?"]
    # A slip in the role's part of the name, a missing letter, a missing underscore.
    assert unknown_settings(["sglang_sever_api_key", "flash_attn_max_job", "fleet_server_prot", "sglang_server_apikey"]) == [
        "flash_attn_max_job is not a setting of any role: did you mean flash_attn_max_jobs?",
        "fleet_server_prot is not a setting of any role: did you mean fleet_server_port?",
        "sglang_server_apikey is not a setting of any role: did you mean sglang_server_api_key?",
        "sglang_sever_api_key is not a setting of any role: did you mean sglang_server_api_key?"]


def test_a_name_like_no_setting_is_refused_without_a_guess():
    """Settings share long prefixes: by ratio alone, sglang_server_whatnot is "close" to sglang_server_home."""
    assert unknown_settings(["sglang_server_whatnot", "sglang_echo"]) == [
        "sglang_echo is not a setting of any role: no role's meta/argument_specs.yml names it",
        "sglang_server_whatnot is not a setting of any role: no role's meta/argument_specs.yml names it"]


def test_names_that_are_not_a_role_s_are_left_alone():
    names = ["ansible_user", "ansible_become", "my_site_var", "lab_node_address", "inventory_hostname",
             "__sglang_server_unit", "__fleet_problems", "sglang", "fleet", "sglangx_port"]
    assert unknown_settings(names) == []
    assert fleet_problems("box", {"box": dict.fromkeys(names, "x")}) == []


def test_a_role_s_settings_and_the_facts_the_roles_set_pass():
    assert unknown_settings(["sglang_server_api_key", "fleet_server_port", "fleet_monitoring_scrape_interval",
                             "gpu_preflight_min_free_disk_gb", "sglang_install_id", "fleet_run_started"]) == []


def test_a_value_the_fleet_layer_derives_is_refused_as_no_setting():
    """Role vars beat the inventory: a site that sets fleet_cuda_home would see it silently ignored."""
    assert {"fleet_served_model", "fleet_cuda_home", "fleet_current_venv"} <= fleet_layer.fleet_derived()
    assert fleet_problems("box", {"box": {"fleet_cuda_home": "/opt/cuda", "fleet_cuda_release": "13.0"}}) == [
        "fleet_cuda_home is derived by the fleet layer from its settings (roles/fleet/vars/main.yml), not a "
        "setting: set the settings it comes from"]


def test_a_moved_setting_keeps_its_own_message_only():
    assert fleet_problems("box", {"box": {"cuda_toolkit_release": "13.1"}}) == [
        "cuda_toolkit_release is set, but the setting is the fleet layer's now: rename it fleet_cuda_release"]


def test_every_role_s_prefix_is_checked_and_the_fleet_layer_s_settings_are_known():
    assert sorted(role_settings()) == ROLES
    for role in ROLES:
        (problem,) = unknown_settings([role + "_no_such_setting_here"])
        assert problem.startswith(role + "_no_such_setting_here is not a setting of any role")
    assert set(fleet_defaults()) <= role_settings()["fleet"]


def test_every_entry_point_s_options_are_settings_and_the_specs_are_read_once(tmp_path):
    spec = {"argument_specs": {"main": {"options": {"demo_a": {"type": "str"}}},
                               "other": {"options": {"demo_b": {"type": "str"}}}}}
    (tmp_path / "demo/meta").mkdir(parents=True)
    (tmp_path / "demo/meta/argument_specs.yml").write_text(yaml.safe_dump(spec))
    assert role_settings(str(tmp_path)) == {"demo": {"demo_a", "demo_b"}}
    assert unknown_settings(["demo_a", "demo_b", "demo_other", "sglang_server_api_kye"], str(tmp_path)) == [
        "demo_other is not a setting of any role: no role's meta/argument_specs.yml names it"]
    fleet_layer._role_settings = None
    assert role_settings() is role_settings()


def _variables(group):
    """Every variable an inventory file's group (and its children, and their hosts) sets."""
    group = group or {}
    names = set(group.get("vars") or {})
    for host in (group.get("hosts") or {}).values():
        names |= set(host or {})
    for child in (group.get("children") or {}).values():
        names |= _variables(child)
    return names


def _inventory_files():
    files = {}
    for hosts in sorted((ROOT / "inventory").glob("*/hosts.yml")):
        files[hosts] = set().union(*[_variables(g) for g in (yaml.safe_load(hosts.read_text()) or {}).values()])
    for path in sorted([*(ROOT / "inventory").glob("*/group_vars/*.yml"), *(ROOT / "inventory").glob("*/host_vars/*.yml"),
                        *(ROOT / "molecule").glob("*/host_vars/*.yml"), *(ROOT / "molecule").glob("*/group_vars/*.yml")]):
        files[path] = set(yaml.safe_load(path.read_text()) or {})
    for scenario in sorted([ROOT / ".config/molecule/config.yml", *(ROOT / "molecule").glob("*/molecule.yml")]):
        provisioner = yaml.safe_load(scenario.read_text()).get("provisioner") or {}
        inventory = provisioner.get("inventory") or {}
        names = set(provisioner.get("connection_options") or {})
        for kind in ("host_vars", "group_vars"):
            for found in (inventory.get(kind) or {}).values():
                names |= set(found or {})
        files[scenario] = names
    return files


INVENTORY_FILES = _inventory_files()


def test_the_repository_s_inventories_are_all_read():
    names = {str(path.relative_to(ROOT)) for path in INVENTORY_FILES}
    assert {"inventory/lab/group_vars/all.yml", "inventory/example/group_vars/gpu_nodes.yml", "inventory/example/hosts.yml",
            "molecule/default/host_vars/fleet-gpu-1.yml", "molecule/sglang_router/molecule.yml",
            ".config/molecule/config.yml"} <= names
    assert "sglang_server_serial" in INVENTORY_FILES[ROOT / "inventory/example/group_vars/gpu_nodes.yml"]


@pytest.mark.parametrize("path", sorted(INVENTORY_FILES), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_variable_the_repository_s_inventories_set_is_a_setting(path):
    assert unknown_settings(INVENTORY_FILES[path]) == []


def _tasks(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tasks(value)
    elif isinstance(node, list):
        for value in node:
            yield from _tasks(value)


PLAYS_AND_TASKS = sorted([*(ROOT / "roles").glob("*/tasks/**/*.yml"), *(ROOT / "roles").glob("*/handlers/*.yml"),
                          *(ROOT / "playbooks").glob("*.yml"), ROOT / "site.yml"])


def test_the_facts_the_roles_set_are_the_list_of_them():
    """A fact a role or playbook sets (set_fact, register) under a setting's kind of name is in hostvars
    when another host's play, or an entry point run first, set it before the fleet checks."""
    set_here = set()
    for path in PLAYS_AND_TASKS:
        for task in _tasks(yaml.safe_load(path.read_text())):
            facts = task.get("ansible.builtin.set_fact") or task.get("set_fact")
            # The fact cache (ansible.cfg) then holds gathered facts only, all named ansible_*.
            assert not (isinstance(facts, dict) and "cacheable" in facts), path
            set_here |= set(facts) - {"cacheable"} if isinstance(facts, dict) else set()
            set_here |= {task["register"]} if isinstance(task.get("register"), str) else set()
    assert sorted(name for name in set_here if PREFIX.match(name)) == sorted(SET_AT_RUN_TIME)
    # No setting shares a fact's name; no module of ours returns facts (another way into hostvars).
    assert not SET_AT_RUN_TIME & set().union(*role_settings().values())
    assert [p.name for p in (ROOT / "plugins/modules").glob("*.py") if "ansible_facts" in p.read_text()] == []


def test_every_setting_a_role_or_playbook_reads_with_a_fallback_is_declared():
    """A setting read only where it is used (a play's serial, a role's vars) would be refused if a site set it."""
    reads = re.compile(r"(?<![\w.\[])((?:%s)_\w+) \| default\(" % "|".join(sorted(ROLES, key=len, reverse=True)))
    found = set()
    for path in [*PLAYS_AND_TASKS, *(ROOT / "roles").glob("*/vars/*.yml"), *(ROOT / "roles").glob("*/templates/*.j2")]:
        found |= set(reads.findall(path.read_text()))
    assert {"sglang_server_serial", "sglang_bench_serial", "fleet_monitoring_exporters_enabled"} <= found
    assert unknown_settings(found - set(MOVED)) == []


def test_a_play_s_fallback_for_a_setting_is_the_role_s_default():
    """A play keyword (serial, a when) is read before any role's defaults: the play falls back to a copy of
    the role's default, which must stay the same value."""
    defaults = {}
    for path in (ROOT / "roles").glob("*/defaults/main.yml"):
        defaults.update(yaml.safe_load(path.read_text()) or {})
    fallback = re.compile(r"\b(\w+) \| default\(([^()]*)\)")
    found = [(name, yaml.safe_load(value)) for path in (ROOT / "playbooks").glob("*.yml")
             for name, value in fallback.findall(path.read_text()) if name in defaults]
    assert {name for name, _ in found} >= {"sglang_server_serial", "sglang_bench_serial", "fleet_monitoring_exporters_enabled"}
    assert [(name, value) for name, value in found if value != defaults[name]] == []
