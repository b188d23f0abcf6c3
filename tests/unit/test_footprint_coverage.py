"""Every task that a footprint read lets a host skip puts there only what that read compares.

A role's host_footprint read (plugins/modules/host_footprint.py) decides whether the task files it
guards run at all: a host that holds the whole footprint skips them. A task added to one of those files
that writes something the footprint does not name would never run again on a host that held the rest:
its file, directory, link, user, package or unit silently missing. This reads each role's tasks, finds
every footprint read and the task files included only where it found something off, and checks each
task there that writes to the host against the entries of that footprint (roles/<role>/vars/main.yml).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2 import nodes

from conftest import ROOT

# What each module writes, the footprint list that reads it, and the argument naming it. A systemd task
# writes a unit's state only with one of STATE_ARGS: one without is a read.
WRITERS = {
    "file": ("files", ("path", "dest", "name")),
    "copy": ("files", ("dest",)),
    "template": ("files", ("dest",)),
    "lineinfile": ("files", ("path", "dest")),
    "blockinfile": ("files", ("path", "dest")),
    "replace": ("files", ("path",)),
    "get_url": ("files", ("dest",)),
    "unarchive": ("files", ("dest",)),
    "user": ("users", ("name",)),
    "group": ("groups", ("name",)),  # no footprint reads groups: any such task is uncovered
    "systemd_service": ("units", ("name",)),
    "systemd": ("units", ("name",)),
    "apt": ("packages", ("name", "pkg")),
    "package": ("packages", ("name",)),
    "pip": ("venv_packages", ("name",)),
}
STATE_ARGS = ("state", "enabled", "masked")
INCLUDES = ("include_tasks", "import_tasks")
TASK_KEYS = ("block", "rescue", "always")
UNIT_SUFFIX = re.compile(r"\.(service|timer|socket|path|target|mount)$")

ENV = jinja2.Environment()


def _module(task: dict) -> tuple[str, object] | None:
    """The module a task calls (short name) and its arguments."""
    for key, value in task.items():
        short = key.rsplit(".", 1)[-1]
        if short in WRITERS or short in INCLUDES or short == "host_footprint":
            return short, value
    return None


def _tasks(path: Path):
    """Every task of a tasks file, blocks opened."""
    def walk(items):
        for task in items or []:
            if any(key in task for key in TASK_KEYS):
                for key in TASK_KEYS:
                    yield from walk(task.get(key))
            else:
                yield task
    yield from walk(yaml.safe_load(path.read_text()))


def _expression(text: str) -> nodes.Node | None:
    """The one Jinja expression a value is ("{{ x }}", blanks around it allowed), else None."""
    match = re.fullmatch(r"\s*\{\{(.*)\}\}\s*", str(text), re.S)
    if not match or "{{" in match.group(1):
        return None
    return ENV.parse("{{ %s }}" % match.group(1)).body[0].nodes[0]


def _dotted(node: nodes.Node) -> str | None:
    """a.b.c for a name and its attributes (a['b'] alike), else None."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        base = _dotted(node.node)
        return base and "%s.%s" % (base, node.attr)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
        base = _dotted(node.node)
        return base and "%s.%s" % (base, node.arg.value)
    return None


def _template(node: nodes.Node) -> str:
    """A path or name as a comparable template: "{{ x }}" for an expression."""
    if isinstance(node, nodes.Const):
        return str(node.value)
    if isinstance(node, nodes.Concat):
        return "".join(_template(part) for part in node.nodes)
    dotted = _dotted(node)
    return "{{ %s }}" % dotted if dotted else "{{ ? }}"


def _same(text: str) -> str:
    """A template with its blanks inside {{ }} made one way."""
    return re.sub(r"\{\{\s*(.*?)\s*\}\}", lambda m: "{{ %s }}" % re.sub(r"\s+", "", m.group(1)), str(text).strip())


@dataclass
class Footprint:
    """What one footprint read compares, per list: the entries it names (dotted names, a dict's every
    key), the paths or names they hold (templates), and the packages by name."""
    entries: dict
    names: dict


class Role:
    def __init__(self, root: Path):
        self.root = root
        self.vars = {}
        for part in ("defaults", "vars"):
            path = root / part / "main.yml"
            if path.exists():
                self.vars.update(yaml.safe_load(path.read_text()) or {})
        fleet = root.parent / "fleet" / "vars" / "main.yml"
        if fleet.exists():
            for name, value in (yaml.safe_load(fleet.read_text()) or {}).items():
                self.vars.setdefault(name, value)

    def value(self, dotted: str):
        """The YAML value a dotted name stands for in the role's vars, or None."""
        parts = dotted.split(".")
        found = self.vars.get(parts[0])
        for part in parts[1:]:
            if isinstance(found, str):
                node = _expression(found)
                found = self.value(_dotted(node)) if node is not None and _dotted(node) else None
            if not isinstance(found, dict):
                return None
            found = found.get(part)
        return found

    def footprint(self, args: dict) -> Footprint:
        entries = {kind: set() for kind in WRITERS.values() for kind in [kind[0]]}
        names = {kind: set() for kind in entries}
        for kind in entries:
            if kind in args:
                self._collect(args[kind], kind, entries[kind], names[kind])
        return Footprint(entries, names)

    def _collect(self, value, kind, entries, names):
        """The entries of a footprint list given as YAML or as Jinja, following vars."""
        if isinstance(value, list):
            for item in value:
                self._collect(item, kind, entries, names)
        elif isinstance(value, dict):
            key = "path" if kind == "files" else "name"
            if key in value:
                names.add(_same(value[key]))
        elif isinstance(value, str):
            node = _expression(value)
            if node is None:
                names.add(_same(value))
            else:
                self._node(node, kind, entries, names)

    def _entry(self, dotted, kind, entries, names):
        """A named entry: itself, and the path or name it holds (a list of entries: each one)."""
        entries.add(dotted)
        found = self.value(dotted)
        if found is not None and not (isinstance(found, dict) and ("path" in found or "name" in found)):
            if isinstance(found, str) and _expression(found) is not None and _dotted(_expression(found)):
                self._entry(_dotted(_expression(found)), kind, entries, names)
                return
            if isinstance(found, str) and _expression(found) is not None:
                self._node(_expression(found), kind, entries, names)
                return
            if isinstance(found, (list, str)):
                self._collect(found, kind, entries, names)
                return
        if isinstance(found, dict):
            key = "path" if kind == "files" else "name"
            if key in found:
                names.add(_same(found[key]))

    def _node(self, node, kind, entries, names):
        if isinstance(node, (nodes.List, nodes.Tuple)):
            for item in node.items:
                self._node(item, kind, entries, names)
        elif isinstance(node, nodes.Add):
            self._node(node.left, kind, entries, names)
            self._node(node.right, kind, entries, names)
        elif isinstance(node, nodes.CondExpr):
            self._node(node.expr1, kind, entries, names)
            if node.expr2 is not None:
                self._node(node.expr2, kind, entries, names)
        elif isinstance(node, nodes.Filter) and node.name == "list" and node.node is not None:
            self._node(node.node, kind, entries, names)
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr == "values":
            # a dict's values(): every key's entry
            base = _dotted(node.node.node)
            found = self.value(base) if base else None
            for key in (found or {}) if isinstance(found, dict) else ():
                self._entry("%s.%s" % (base, key), kind, entries, names)
        elif isinstance(node, nodes.Dict):
            key = "path" if kind == "files" else "name"
            for pair in node.items:
                if isinstance(pair.key, nodes.Const) and pair.key.value == key:
                    names.add(_same(_template(pair.value)))
        elif isinstance(node, nodes.Const):
            names.add(_same(node.value))
        elif _dotted(node):
            self._entry(_dotted(node), kind, entries, names)
        elif isinstance(node, nodes.TemplateData):
            names.add(_same(node.data))


def _targets(task: dict, args: dict, argnames) -> list[tuple[str | None, str]]:
    """What a writing task names: (entry, template) for each thing it writes. The entry is the dotted
    name the value is an attribute of (x for "{{ x.path }}", each loop item for "{{ item.path }}")."""
    value = next((args[name] for name in argnames if name in args), None)
    if value is None:
        return [(None, "")]
    values = value if isinstance(value, list) else [value]
    found = []
    for one in values:
        node = _expression(one) if isinstance(one, str) else None
        dotted = _dotted(node) if node is not None else None
        if dotted and dotted.split(".")[0] == "item" and "loop" in task:
            loop = _expression(task["loop"]) if isinstance(task["loop"], str) else None
            items = _loop_items(loop) if loop is not None else None
            if isinstance(task["loop"], list):
                items = [(None, _same(item)) for item in task["loop"]]
            found += items or [(None, _same(one))]
        elif dotted and "." in dotted:
            found.append((dotted.rsplit(".", 1)[0], _same(one)))
        else:
            found.append((dotted, _same(one)))
    return found


def _loop_items(node) -> list[tuple[str | None, str]]:
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return [item for part in node.items for item in _loop_items(part)]
    if isinstance(node, nodes.Add):
        return _loop_items(node.left) + _loop_items(node.right)
    dotted = _dotted(node)
    return [(dotted, "{{ %s }}" % dotted)] if dotted else [(None, "{{ ? }}")]


def _unit(name: str) -> str:
    return name if UNIT_SUFFIX.search(name) else name + ".service"


def _package(name: str) -> str:
    return re.split(r"[=<>!~\[ ]", str(name).strip(), maxsplit=1)[0]


def covered(role: Role, kind: str, footprint: Footprint, task: dict, args, argnames) -> list[str]:
    """What of a writing task its footprint does not read, as phrases; [] when all of it is read."""
    if kind == "groups":
        return ["a group (no footprint reads groups)"]
    if kind == "units" and not any(key in args for key in STATE_ARGS):
        return []
    if kind in ("packages", "venv_packages"):
        value = next((args[name] for name in argnames if name in args), "")
        node = _expression(value) if isinstance(value, str) else None
        dotted = _dotted(node) if node is not None else None
        held = role.value(dotted) if dotted else None
        if held is not None:
            value = held  # a list the role's vars hold, as the pip task's name
        wanted = {_package(v) for v in (value if isinstance(value, list) else [value])}
        have = {_package(n) for n in footprint.names[kind]}
        for dotted in footprint.entries[kind]:
            found = role.value(dotted)
            for item in found if isinstance(found, list) else [found]:
                if isinstance(item, dict) and "name" in item:
                    have.add(_package(item["name"]))
        return ["package %s" % name for name in sorted(wanted - have)]
    missing = []
    for entry, template in _targets(task, args, argnames):
        if entry and (entry in footprint.entries[kind]
                      or any(entry.startswith(e + ".") for e in footprint.entries[kind])):
            continue
        names = footprint.names[kind]
        if kind == "units":
            if _unit(template) in {_unit(n) for n in names}:
                continue
        elif template and template in names:
            continue
        missing.append("unit %s" % _unit(template) if kind == "units"
                       else "%s %s" % ({"files": "path", "users": "user"}[kind], entry or template))
    return missing


def guarded(role_root: Path):
    """Each footprint read of a role: (its tasks file, its arguments, the files it guards, each with the
    files they include in turn)."""
    reads = []
    for path in sorted((role_root / "tasks").glob("*.yml")):
        tasks = list(_tasks(path))
        for task in tasks:
            found = _module(task)
            if not found or found[0] != "host_footprint" or "register" not in task:
                continue
            skip = re.compile(r"\bnot\s+%s\.settled\b" % re.escape(task["register"]))
            files = []
            for other in tasks:
                include = _module(other)
                when = other.get("when", "")
                when = " and ".join(map(str, when)) if isinstance(when, list) else str(when)
                if include and include[0] in INCLUDES and skip.search(when):
                    files += _included(role_root, include[1])
            reads.append((path, found[1], files))
    return reads


def _included(role_root: Path, name, seen=None) -> list[Path]:
    seen = seen if seen is not None else set()
    path = role_root / "tasks" / (name if isinstance(name, str) else name["file"])
    if path in seen:
        return []
    seen.add(path)
    files = [path]
    for task in _tasks(path):
        found = _module(task)
        if found and found[0] in INCLUDES:
            files += _included(role_root, found[1], seen)
    return files


def uncovered(role_root: Path) -> list[str]:
    """Each writing task a footprint read lets a host skip whose write that read does not compare."""
    role = Role(role_root)
    problems = []
    for read_path, args, files in guarded(role_root):
        footprint = role.footprint(args)
        for path in files:
            for task in _tasks(path):
                found = _module(task)
                if not found or found[0] not in WRITERS:
                    continue
                kind, argnames = WRITERS[found[0]]
                module_args = found[1] if isinstance(found[1], dict) else {}
                for what in covered(role, kind, footprint, task, module_args, argnames):
                    problems.append("%s: task %r writes %s, which the footprint read in %s does not compare"
                                    % (path.relative_to(role_root.parent.parent), task.get("name"), what,
                                       read_path.relative_to(role_root.parent.parent)))
    return problems


ROLES_WITH_FOOTPRINTS = sorted(role.name for role in (ROOT / "roles").iterdir() if guarded(role))


def test_the_roles_that_skip_work_on_a_footprint_are_found():
    assert ROLES_WITH_FOOTPRINTS == ["sglang_router", "sglang_server"]
    guards = {path.name for role in ROLES_WITH_FOOTPRINTS for _, _, files in guarded(ROOT / "roles" / role)
              for path in files}
    assert {"converge.yml", "healer.yml", "config.yml", "gpu_init.yml", "unit.yml"} <= guards


@pytest.mark.parametrize("role", ROLES_WITH_FOOTPRINTS)
def test_every_write_a_footprint_lets_a_host_skip_is_in_that_footprint(role):
    problems = uncovered(ROOT / "roles" / role)
    assert problems == [], "\n".join(problems)


def _role(tmp_path, converge: str) -> Path:
    """A role whose footprint names the files of one dict and a user, guarding converge.yml."""
    root = tmp_path / "roles" / "demo"
    (root / "tasks").mkdir(parents=True)
    (root / "vars").mkdir()
    (root / "vars/main.yml").write_text(
        "__demo_files:\n"
        "  conf: {path: /etc/demo.conf, mode: '0644', owner: root, group: root, content: x}\n"
        "  dir: {path: /var/lib/demo, state: directory, mode: '0755', owner: root, group: root}\n"
        "__demo_user: {name: demo}\n"
        "__demo_requirements: [\"demo-extra==1.0\"]\n"
        "__demo_footprint:\n"
        "  files: \"{{ __demo_files.values() | list }}\"\n"
        "  users: [\"{{ __demo_user }}\"]\n"
        "  units: [\"demo.service\"]\n")
    (root / "tasks/main.yml").write_text(
        "- name: Read\n  host_footprint:\n    files: \"{{ __demo_footprint.files }}\"\n"
        "    users: \"{{ __demo_footprint.users }}\"\n    units: \"{{ __demo_footprint.units }}\"\n"
        "  register: __demo_found\n"
        "- name: Converge\n  ansible.builtin.include_tasks: converge.yml\n  when: not __demo_found.settled\n")
    (root / "tasks/converge.yml").write_text(converge)
    return root


COVERED = """
- name: The conf
  ansible.builtin.copy: {dest: "{{ __demo_files.conf.path }}", content: x}
- name: The dirs
  ansible.builtin.file: {path: "{{ item.path }}", state: directory}
  loop: "{{ [__demo_files.dir] }}"
- name: The user
  ansible.builtin.user: {name: "{{ __demo_user.name }}"}
- name: The unit runs
  ansible.builtin.systemd_service: {name: demo, state: started}
- name: The unit's state is read
  ansible.builtin.systemd_service: {name: other}
"""


def test_a_role_whose_guarded_writes_are_all_in_its_footprint_passes(tmp_path):
    assert uncovered(_role(tmp_path, COVERED)) == []


@pytest.mark.parametrize("task, what", [
    ("ansible.builtin.template: {src: x.j2, dest: /etc/demo.extra}", "path /etc/demo.extra"),
    ("ansible.builtin.copy: {dest: \"{{ __demo_other.path }}\", content: x}", "path __demo_other"),
    ("ansible.builtin.file: {path: \"{{ item.path }}\", state: directory}\n  loop: \"{{ [__demo_files.dir, __demo_cache] }}\"",
     "path __demo_cache"),
    ("ansible.builtin.group: {name: demo}", "a group (no footprint reads groups)"),
    ("ansible.builtin.user: {name: other}", "user other"),
    ("ansible.builtin.systemd_service: {name: demo-extra.timer, enabled: true}", "unit demo-extra.timer"),
    ("ansible.builtin.apt: {name: python3-venv}", "package python3-venv"),
    ("ansible.builtin.pip: {name: \"{{ __demo_requirements }}\", virtualenv: /opt/demo}", "package demo-extra"),
])
def test_a_guarded_write_the_footprint_does_not_read_is_named_with_its_task_and_file(tmp_path, task, what):
    root = _role(tmp_path, COVERED + "- name: The new one\n  " + task + "\n")
    assert uncovered(root) == ["roles/demo/tasks/converge.yml: task 'The new one' writes %s, which the footprint "
                               "read in roles/demo/tasks/main.yml does not compare" % what]
