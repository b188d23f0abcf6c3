"""No task file includes itself, directly or through others.

ansible-core 2.19 dies with a RecursionError past about 200 nested includes ("Exceeded maximum object
depth"): a watch that included itself once per round ended a long model copy mid-way. The watches are
loops now (tests/playbooks/test_watch_loops.py runs one past 300 rounds); this holds every role's task
files to it, so no other wait can grow an include chain with its rounds."""
from __future__ import annotations

from pathlib import Path

import yaml

from conftest import ROOT

INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")
ROLE_INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")


def _file(name: str) -> str:
    return name if name.endswith((".yml", ".yaml")) else name + ".yml"


def includes(path: Path) -> set[Path]:
    """The task files that `path` includes or imports, by literal name (a templated name is left out)."""
    found = set()

    def walk(tasks):
        for task in tasks or ():
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
            for key in INCLUDES:
                target = task.get(key)
                target = target.get("file") if isinstance(target, dict) else target
                if target and "{{" not in target:
                    found.add((path.parent / _file(target)).resolve())
            for key in ROLE_INCLUDES:
                spec = task.get(key)
                if isinstance(spec, dict) and "{{" not in str(spec):
                    found.add((ROOT / "roles" / spec["name"] / "tasks" / _file(spec.get("tasks_from", "main"))).resolve())

    walk(yaml.safe_load(path.read_text()))
    return found


def task_files() -> list[Path]:
    return sorted(path.resolve() for path in (ROOT / "roles").glob("*/tasks/*.yml"))


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Every include chain that comes back to where it started (one per cycle's first file)."""
    found, done = [], set()

    def visit(node, chain):
        if node in chain:
            found.append(chain[chain.index(node):] + [node])
            return
        if node in done:
            return
        for target in sorted(graph.get(node, ())):
            visit(target, chain + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return found


def test_every_included_file_exists():
    for path in task_files():
        for target in includes(path):
            assert target.is_file(), "%s includes %s, which does not exist" % (path.relative_to(ROOT), target)


def test_no_task_file_includes_itself_directly_or_through_others():
    graph = {path: includes(path) for path in task_files()}
    assert sum(len(targets) for targets in graph.values()) > 50  # the reader finds the roles' includes
    found = cycles(graph)
    assert not found, "\n".join(" -> ".join(str(p.relative_to(ROOT)) for p in chain) for chain in found)


def test_a_watch_that_includes_itself_per_round_is_found(tmp_path):
    """The shape the watches had: a file that includes itself until the job ends."""
    watch = tmp_path / "watch.yml"
    watch.write_text(yaml.safe_dump([{"name": "One round", "ansible.builtin.command": "true"},
                                     {"name": "The next round", "ansible.builtin.include_tasks": "watch.yml",
                                      "when": "not done"}]))
    loop = tmp_path / "main.yml"
    loop.write_text(yaml.safe_dump([{"block": [{"ansible.builtin.include_tasks": {"file": "other.yml"}}]}]))
    other = tmp_path / "other.yml"
    other.write_text(yaml.safe_dump([{"ansible.builtin.import_tasks": "main.yml"}]))
    graph = {path.resolve(): includes(path) for path in (watch, loop, other)}
    found = {tuple(p.name for p in chain) for chain in cycles(graph)}
    assert found == {("watch.yml", "watch.yml"), ("main.yml", "other.yml", "main.yml")}
