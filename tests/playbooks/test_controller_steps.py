"""Steps that run on the controller never become root there.

An inventory's ansible_become (inventory/example puts it on the GPU group; many sites put it in
group_vars/all, which the implicit localhost reads too) outranks a task's `become: false` keyword:
only a task-level `vars: {ansible_become: false}` keeps sudo off the controller."""
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT

CONTROLLER = {"localhost", "127.0.0.1"}


def tasks_in(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always"):
            yield from tasks_in(item.get(key))


def controller_steps():
    for path in sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml")]):
        for task in tasks_in(yaml.safe_load(path.read_text())):
            if task.get("delegate_to") in CONTROLLER:
                yield f"{path.relative_to(ROOT)}: {task.get('name')}", task.get("vars") or {}
    for path in sorted([ROOT / "site.yml", *ROOT.glob("playbooks/*.yml")]):
        for play in yaml.safe_load(path.read_text()) or []:
            if play.get("hosts") in CONTROLLER:
                yield f"{path.relative_to(ROOT)}: {play.get('name')}", play.get("vars") or {}
            for task in tasks_in(play.get("tasks")):
                if task.get("delegate_to") in CONTROLLER:
                    yield f"{path.relative_to(ROOT)}: {task.get('name')}", task.get("vars") or {}


def test_every_controller_step_turns_become_off_with_a_variable():
    steps = list(controller_steps())
    assert len(steps) >= 3  # the flash-attn cache entry and prebuilt download, the bench report play
    assert [name for name, vars_ in steps if vars_.get("ansible_become") is not False] == []


def test_the_keyword_alone_would_become_on_the_controller(tmp_path):
    """What the rule guards against, shown on this controller: a become_user another than ours."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars/all.yml").write_text("ansible_become: true\nansible_become_user: nobody\n")
    (tmp_path / "hosts.yml").write_text("gpu_nodes:\n  hosts:\n    node-a:\n")
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "keyword", "ansible.builtin.command": "id -un", "delegate_to": "localhost", "become": False,
         "register": "keyword", "changed_when": False, "ignore_errors": True},
        {"name": "variable", "ansible.builtin.command": "id -un", "delegate_to": "localhost",
         "vars": {"ansible_become": False}, "register": "variable", "changed_when": False},
        {"name": "result", "ansible.builtin.debug": {"msg": "keyword={{ keyword.stdout | default('FAILED') }} "
                                                           "variable={{ variable.stdout }}"}}]}]))
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                          str(tmp_path / "play.yml")], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(Path.home())})
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert "keyword=FAILED" in out.stdout or "keyword=nobody" in out.stdout, out.stdout  # it became
    assert f"variable={user}" in out.stdout, out.stdout
