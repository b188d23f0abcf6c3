"""The installed collection on its own (installed_collection in conftest.py: built, `ansible-galaxy collection
build`, installed with -p, run under an ansible.cfg without the repository's roles and plugin paths): its
playbooks by name, its modules with their module_utils, and its roles rendering what the repository's do.
The run of sglang_fleet.fleet.site over a lab fleet is in tests/lab/test_lab_fleet.py."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import build_collection
from conftest import ROOT
from fleet import run_playbook

BIN = Path(sys.executable).parent
STAGES = sorted(p.stem for p in (ROOT / "playbooks").glob("*.yml"))


def ansible(collection, *argv, cwd=None):
    env = {**os.environ, **collection.env, "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, env=env,
                          cwd=cwd or collection.path)


def local_inventory(tmp_path, routers=True):
    """One GPU node (and a router) on this machine."""
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    groups = {"gpu_nodes": {"hosts": {"gpu-1": local}}}
    if routers:
        groups["sglang_routers"] = {"hosts": {"router-1": local}}
    inventory.write_text(yaml.safe_dump({"all": {"children": groups}}))
    return inventory


def test_the_installed_collection_is_the_one_galaxy_yml_names(installed_collection):
    manifest = json.loads((installed_collection.root / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("sglang_fleet", "fleet", "1.0.0")
    assert manifest["dependencies"] == {"community.general": ">=8.0.0"}
    listed = ansible(installed_collection, "ansible-galaxy", "collection", "list", "sglang_fleet.fleet",
                     "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {str(installed_collection.path / "ansible_collections"): {
        "sglang_fleet.fleet": {"version": "1.0.0"}}}


def test_site_runs_every_stage_of_the_collection_and_each_stage_runs_by_name(installed_collection, tmp_path):
    inventory = local_inventory(tmp_path)
    site = ansible(installed_collection, "ansible-playbook", "-i", str(inventory), "sglang_fleet.fleet.site",
                   "--list-tasks")
    assert site.returncode == 0, site.stdout + site.stderr
    # Every role's tasks come from the installed collection, in site.yml's order.
    roles = []
    for line in site.stdout.splitlines():
        if " : " in line and line.strip().startswith("sglang_fleet.fleet."):
            role = line.strip().split(" : ")[0]
            if role not in roles:
                roles.append(role)
    # The fleet layer first: every stage's role depends on it.
    assert roles == ["sglang_fleet.fleet." + r for r in (
        "fleet", "gpu_preflight", "cuda_toolkit", "sglang", "flash_attn", "sglang_patches", "sglang_model",
        "gpu_acceptance", "sglang_server", "sglang_router", "sglang_verify", "sglang_bench", "fleet_monitoring")]
    for stage in STAGES:
        run = ansible(installed_collection, "ansible-playbook", "-i", str(inventory), "sglang_fleet.fleet." + stage,
                      "--syntax-check")
        assert run.returncode == 0, (stage, run.stdout + run.stderr)


def test_a_module_finds_its_module_utils_in_the_collection(installed_collection, tmp_path):
    """cuda_toolkit_info parses nvcc through module_utils/nvcc.py, imported the collection's way."""
    nvcc = tmp_path / "cuda-12.8/bin/nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    run = ansible(installed_collection, "ansible", "localhost", "-i", "localhost,", "-c", "local",
                  "-e", "ansible_python_interpreter=" + sys.executable, "-m", "sglang_fleet.fleet.cuda_toolkit_info",
                  "-a", "prefix=%s" % tmp_path, "-o")
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.split(" => ", 1)[1])
    assert [(t["version"], t["nvcc_release"], t["nvcc_version"]) for t in result["toolkits"]] == [
        ("12.8", "12.8", "12.8.93")]


def rendered_unit(tmp_path, roles, env):
    """tests/playbooks/render_unit.yml over one host, with its ../../roles pointing at `roles`."""
    here = tmp_path / "a/b"
    here.mkdir(parents=True)
    shutil.copy(ROOT / "tests/playbooks/render_unit.yml", here)
    (tmp_path / "roles").symlink_to(roles)
    out = tmp_path / "out"
    out.mkdir()
    run = run_playbook(here / "render_unit.yml", local_inventory(tmp_path, routers=False),
                       extravars={"render_dir": str(out)},
                       env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"), **env})
    assert run.rc == 0, run.failure_summary
    return {p.name: p.read_text() for p in out.iterdir()}


def test_the_collections_roles_render_the_server_unit_the_repositorys_do(installed_collection, tmp_path):
    """Templates and role vars through the collection's filters (systemd_quote, http_url, sglang_install_id)."""
    mine = rendered_unit(tmp_path / "repo", ROOT / "roles", {})
    theirs = rendered_unit(tmp_path / "collection", installed_collection.root / "roles", installed_collection.env)
    assert sorted(theirs) == ["gpu-1.paths.json", "gpu-1.selftest-argv.json", "gpu-1.sglang-gpu-init.service",
                              "gpu-1.sglang.service"]
    assert theirs == mine
    assert "ExecStart=" in theirs["gpu-1.sglang.service"]


PATCH_SET = """
- name: The sglang role's patch set, as its vars compute it
  hosts: localhost
  gather_facts: false
  vars:
    role_path: "{{ sglang_role }}"
  vars_files: ["{{ sglang_role }}/../fleet/vars/main.yml", "{{ sglang_role }}/vars/main.yml"]
  tasks:
    - name: Say it
      ansible.builtin.debug:
        var: __sglang_patch_set.code
"""


def test_the_patch_set_the_collection_hashes_is_the_repositorys(installed_collection, tmp_path):
    """The build rewrites the patches' imports; the install a repository run made must stay current."""
    playbook = tmp_path / "patch_set.yml"
    playbook.write_text(PATCH_SET)
    codes = {}
    for where, role, env in (("repo", ROOT / "roles/sglang", {}),
                             ("collection", installed_collection.root / "roles/sglang", installed_collection.env)):
        run = run_playbook(playbook, "localhost,", extravars={"sglang_role": str(role)},
                           env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"), **env})
        assert run.rc == 0, run.failure_summary
        codes[where] = run.hosts["localhost"].results[0][1]["__sglang_patch_set.code"]
    assert len(codes["repo"]) == 64 and codes["collection"] == codes["repo"]
    probe = (installed_collection.root / "plugins/modules/sglang_patch_probe.py").read_text()
    assert probe != (ROOT / "plugins/modules/sglang_patch_probe.py").read_text()  # the hash did see a rewritten file


def test_ansible_test_sanity_passes_on_the_built_collection_offline(tmp_path):
    """validate-modules, ansible-doc, import, compile, yamllint... in the environments bin/setup made
    (tools/collection_sanity.py prime); they install nothing, and pip reaches no index."""
    import collection_sanity
    tree = build_collection.build(tmp_path)
    run = collection_sanity.ansible_test(tree)
    hint = "\n(bin/setup makes the environments: tools/collection_sanity.py prime)"
    assert run.returncode == 0, run.stdout + run.stderr + hint
    ran = [line.split('"')[1] for line in run.stdout.splitlines() if line.startswith('Running sanity test "')]
    assert sorted(ran) == sorted(collection_sanity.TESTS)
    assert "Installing requirements" not in run.stdout + run.stderr  # bin/setup made them


def test_validate_modules_fails_a_module_whose_docs_leave_out_an_option(tmp_path):
    import collection_sanity
    tree = build_collection.build(tmp_path)
    module = tree / "plugins/modules/path_free_space.py"
    text = module.read_text()
    start = text.index("  present:\n")
    module.write_text(text[:start] + text[text.index("\nattributes:", start) + 1:])
    run = collection_sanity.ansible_test(tree, "--test", "validate-modules", "plugins/modules/path_free_space.py",
                                         tests=())
    assert run.returncode != 0
    assert "plugins/modules/path_free_space.py:0:0: undocumented-parameter: Argument 'present' is listed in the " \
           "argument_spec, but not documented in the module documentation" in run.stdout + run.stderr
