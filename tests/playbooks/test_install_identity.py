"""The install id through the sglang role's own vars, on a copy of the repository's patch files: a
comment there is no new install, and a host serving the install an earlier release built (its id
from the patch files' bytes) keeps serving it, found through sglang_venvs as the role reads it."""
import json
import shutil
import sys

from conftest import ROOT
from fleet import run_playbook

# The patch set exactly as the role's vars wrote it before it counted what the code does (its files'
# bytes), so the earlier id sglang_patch_set_earlier computes is checked against the real thing.
EARLIER_PATCH_SET = r"""
  code: >-
    {{ query('ansible.builtin.file', role_path ~ '/../../plugins/modules/sglang_patch_probe.py',
             *(query('ansible.builtin.fileglob', role_path ~ '/../../plugins/module_utils/sglang_patch_*.py') | sort))
       | join('\n') | regex_replace('ansible_collections\.\w+\.\w+\.plugins\.module_utils\.', 'ansible.module_utils.')
       | hash('sha256') }}
  defaults: "{{ lookup('ansible.builtin.file', role_path ~ '/../sglang_patches/defaults/main.yml') | hash('sha256') }}"
  internals: "{{ lookup('ansible.builtin.file', role_path ~ '/../sglang_patches/vars/main.yml') | hash('sha256') }}"
  settings: >-
    {{ dict(__sglang_patch_settings | zip(query('ansible.builtin.vars',
       *(__sglang_patch_settings | map('regex_replace', '^', 'sglang_patches_')), default='(role default)'))) }}
"""

PLAYBOOK = """
- name: The install ids, and the install the role picks, as the sglang role's vars compute them
  hosts: localhost
  gather_facts: false
  vars:
    role_path: "{{ tree }}/roles/sglang"
    earlier_patch_set:%s
  vars_files: ["{{ tree }}/roles/fleet/vars/main.yml", "{{ tree }}/roles/sglang/defaults/main.yml",
               "{{ tree }}/roles/sglang/vars/main.yml"]
  tasks:
    - name: The installs are read
      sglang_venvs:
        root: "{{ root }}"
      register: __sglang_venvs

    - name: The interpreter is the production one
      ansible.builtin.set_fact:
        __sglang_interpreter: {python: cpython-312, platform: linux-x86_64}

    - name: The ids are written
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: >-
          {{ {'wanted': __sglang_install_inputs | sglang_install_id,
              'earlier': __sglang_install_inputs_earlier | sglang_install_id,
              'released': __sglang_install_inputs | combine({'patch_set': earlier_patch_set}) | sglang_install_id,
              'pick': __sglang_venvs.installs | sglang_install_pick(__sglang_install_inputs | sglang_install_id,
                                                                   __sglang_install_inputs_earlier | sglang_install_id)}
             | to_json }}
""" % EARLIER_PATCH_SET.replace("\n", "\n    ")


def ids(tmp_path, tree, root):
    playbook = tmp_path / "ids.yml"
    playbook.write_text(PLAYBOOK)
    out = tmp_path / "ids.json"
    run = run_playbook(playbook, "localhost,", extravars={
        "tree": str(tree), "root": str(root), "out": str(out), "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable},
        env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})
    assert run.rc == 0, run.failure_summary
    return json.loads(out.read_text())


def serving(root, name, recorded):
    """An install as the role leaves it: its venv, its marker, current naming it."""
    venv = root / "venvs" / name
    venv.mkdir(parents=True, exist_ok=True)
    (venv / ".sglang-fleet-install.json").write_text(json.dumps({"id": recorded, "inputs": {}}))
    if not (root / "current").is_symlink():
        (root / "current").symlink_to("venvs/" + name)


def test_a_host_serving_an_earlier_releases_install_keeps_it_through_the_change_and_through_comments(tmp_path):
    tree = tmp_path / "tree"
    for part in ("roles/fleet", "roles/sglang", "roles/sglang_patches", "plugins/modules", "plugins/module_utils"):
        shutil.copytree(ROOT / part, tree / part)
    root = tmp_path / "opt-sglang"

    first = ids(tmp_path, tree, root)
    assert first["earlier"] == first["released"] != first["wanted"]  # the id the earlier release gave
    assert first["pick"] == {"id": first["wanted"], "adopt": False}  # nothing there: built

    # The host serves the install the earlier release built for these same files and settings.
    serving(root, first["released"], first["released"])
    adopting = ids(tmp_path, tree, root)
    assert adopting["pick"] == {"id": first["released"], "adopt": True}

    # read.yml has its marker record today's id; then a comment lands in a patch module.
    serving(root, first["released"], first["wanted"])
    multimem = tree / "plugins/module_utils/sglang_patch_sm120_symm_mem_multimem.py"
    multimem.write_text(multimem.read_text() + "\n# PCIe parts: see the README\n")
    commented = ids(tmp_path, tree, root)
    assert commented["wanted"] == first["wanted"] and commented["earlier"] != first["earlier"]
    assert commented["pick"] == {"id": first["released"], "adopt": False}  # still the one in service

    # A change to what a block writes is a new install, built beside the one in service.
    multimem.write_text(multimem.read_text().replace("so no world size takes", "so no size takes"))
    changed = ids(tmp_path, tree, root)
    assert changed["wanted"] != first["wanted"]
    assert changed["pick"] == {"id": changed["wanted"], "adopt": False}
