"""No task file includes itself, directly or through others.

ansible-core 2.19 dies with RecursionError ("Unexpected Exception") between 200 and 250 nested
includes, so a file that includes itself once per round (the old progress watches) kills a run that
lasts long enough, wherever it has got to. A repeat is a loop over one task instead."""
import yaml

from conftest import ROOT

INCLUDES = {"include_tasks", "import_tasks", "ansible.builtin.include_tasks", "ansible.builtin.import_tasks"}
ROLE_INCLUDES = {"include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"}


def tasks_in(items):
    for item in items or []:
        if isinstance(item, dict):
            yield item
            for key in ("block", "rescue", "always"):
                yield from tasks_in(item.get(key))


def task_file(role, name):
    """roles/<role>/tasks/<name>, as Ansible finds it with or without the extension."""
    base = ROOT / "roles" / role / "tasks"
    for candidate in (name, name + ".yml", name + ".yaml"):
        if (base / candidate).is_file():
            return base / candidate
    return base / name


def includes_of(path):
    """(included task file, task name) for each include or import in a role's task file."""
    role = path.parent.parent.name
    for task in tasks_in(yaml.safe_load(path.read_text())):
        for action in INCLUDES & set(task):
            args = task[action]
            name = args.get("file") if isinstance(args, dict) else args
            yield (path.parent / str(name)).resolve() if "{{" not in str(name) else str(name), task.get("name")
        for action in ROLE_INCLUDES & set(task):
            args = task[action]
            name, tasks_from = args.get("name", ""), args.get("tasks_from", "main")
            if "{{" in name + tasks_from:
                yield "%s/%s" % (name, tasks_from), task.get("name")
            else:
                yield task_file(name, tasks_from).resolve(), task.get("name")


TASK_FILES = sorted(p.resolve() for p in ROOT.glob("roles/*/tasks/*.yml"))
GRAPH = {path: list(includes_of(path)) for path in TASK_FILES}


def test_the_scan_reads_every_include():
    edges = [target for targets in GRAPH.values() for target, _ in targets]
    assert len(TASK_FILES) > 20 and len(edges) > 20
    assert task_file("sglang_model", "watch.yml").resolve() in edges  # run.yml's
    assert task_file("sglang_server", "intent").resolve() in edges    # include_role tasks_from, no extension


def test_every_include_names_a_file_the_scan_can_follow():
    unresolved = ["%s: %s: %s" % (path.relative_to(ROOT), name, target) for path, targets in GRAPH.items()
                  for target, name in targets if isinstance(target, str) or not target.is_file()]
    assert unresolved == []


def test_no_task_file_includes_itself():
    direct = ["%s: %s" % (path.relative_to(ROOT), name) for path, targets in GRAPH.items()
              for target, name in targets if target == path]
    assert direct == [], "a task file includes itself; loop over one task instead"


def test_no_task_files_include_each_other_in_a_cycle():
    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for target, _ in GRAPH.get(node, []):
                if target == start:
                    return trail + [target]
                if target not in seen and target in GRAPH:
                    seen.add(target)
                    stack.append((target, trail + [target]))
        return None
    cycles = [" -> ".join(str(p.relative_to(ROOT)) for p in cycle)
              for cycle in map(cycle_from, TASK_FILES) if cycle]
    assert cycles == []
