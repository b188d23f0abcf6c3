"""Every systemd unit the project writes or starts, as systemd reads it (systemd-analyze security
--offline), exposed no more than it is today: the server and its gpu-init oneshot, the fusion self-test's
transient unit, the router and its healer, the GPU collector, the model's peer copy server (a transient
unit too) and the monitoring drop-ins over Debian 12's own units. A change that loosens a unit's sandbox
(a dropped Protect*=, a wider CapabilityBoundingSet=) raises its exposure and fails here, naming the unit;
a change that tightens one lowers its ceiling here with it, so that it stays tight."""
import json
import re
import shutil
import sys

import jinja2
import jinja2.nativetypes
import pytest
import yaml

import systemd_sandbox  # plugins/filter, on the tests' path
from conftest import FIXTURES, ROOT, exposure
from fleet import run_playbook

DEBIAN = FIXTURES / "upstream/debian-12-units"

# Each unit's exposure as Debian 12's systemd 252 rates it today (0 the most sandboxed, 10 the least).
# The gpu-init oneshot is root on purpose: it runs the setuid nvidia-modprobe that the server's
# NoNewPrivileges= forbids it (roles/sglang_server/README.md). Every other unit's hardening comes from one
# base (plugins/filter/systemd_sandbox.py); the peer copy server's took it from 8.3 to 1.4.
CEILINGS = {
    "sglang.service": 1.8,
    "sglang-gpu-init.service": 9.6,
    "sglang-fusion-selftest.service": 1.8,
    "sglang-router.service": 1.4,
    "sglang-router-healer.service": 1.4,
    "nvidia-smi-textfile.service": 1.1,
    "sglang-fleet-model-peer.service": 1.4,
    "prometheus.service": 1.4,
    "prometheus-alertmanager.service": 1.4,
    "prometheus-node-exporter.service": 2.2,
}


def transient_unit(argv):
    """The unit `systemd-run argv` makes, as a unit file: its --property= settings, user, group, working
    directory and environment under [Service], the command after the options as ExecStart=."""
    service, command = [], []
    options = {"--uid": "User", "--gid": "Group", "--working-directory": "WorkingDirectory",
               "--setenv": "Environment", "--property": None}
    words = list(argv[1:])
    while words:
        word = words.pop(0)
        if word == "--":
            command = words
            break
        if not word.startswith("-"):
            command = [word] + words
            break
        name, _, value = word.partition("=")
        if name in options and not _:
            value = words.pop(0)
        if name == "--property":
            service.append(value)
        elif name in options:
            service.append("%s=%s" % (options[name], value))
    assert command, argv
    return "[Service]\n%s\nExecStart=%s\n" % ("\n".join(service), " ".join(map(_quoted, command)))


def _quoted(word):
    """A word of ExecStart= as systemd reads it back: quoted where it holds blanks or quotes, its % and $
    doubled (systemd's specifiers and variables)."""
    word = word.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", word):
        return '"%s"' % word.replace("\\", "\\\\").replace('"', '\\"')
    return word


def _run_task(tasks_file, name):
    """The argv of a command task of a role's tasks file, by the task's name."""
    tasks = yaml.safe_load(tasks_file.read_text())
    found = [task for task in tasks if task.get("name") == name]
    assert len(found) == 1, (tasks_file, name)
    return found[0]["ansible.builtin.command"]["argv"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """One root holding every unit, as /etc/systemd/system and Debian's /lib/systemd/system."""
    tmp = tmp_path_factory.mktemp("exposure")
    root = tmp / "root"
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {"gpu-1": dict(local, ansible_host="10.0.0.11")}},
        "sglang_routers": {"hosts": {"router-1": local}}}}}))
    env = {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp / "facts")}

    out = tmp / "server"
    out.mkdir()
    run = run_playbook(ROOT / "tests/playbooks/render_unit.yml", tmp / "hosts.yml", limit="gpu_nodes",
                       extravars={"render_dir": str(out)}, env=env)
    assert run.rc == 0, run.failure_summary
    for unit in ("sglang.service", "sglang-gpu-init.service"):
        shutil.copy(out / ("gpu-1." + unit), units / unit)
    selftest = json.loads((out / "gpu-1.selftest-argv.json").read_text())
    (units / "sglang-fusion-selftest.service").write_text(transient_unit(selftest))

    for playbook, limit in (("render_router_units.yml", "sglang_routers"), ("render_monitoring_units.yml", "gpu_nodes")):
        run = run_playbook(ROOT / "tests/playbooks" / playbook, tmp / "hosts.yml", limit=limit,
                           extravars={"render_dir": str(root)}, env=env)
        assert run.rc == 0, run.failure_summary
    lib = root / "lib/systemd/system"
    lib.mkdir(parents=True)
    for unit in ("prometheus", "prometheus-alertmanager", "prometheus-node-exporter"):
        shutil.copy(DEBIAN / f"{unit}.service", lib)

    # The peer copy server's argv: one expression over a role default and the sandbox filters.
    defaults = yaml.safe_load((ROOT / "roles/sglang_model/defaults/main.yml").read_text())
    native = jinja2.nativetypes.NativeEnvironment()
    native.filters.update(systemd_sandbox.FilterModule().filters())
    argv = native.from_string(_run_task(ROOT / "roles/sglang_model/tasks/serve.yml", "The copy server runs")).render(defaults)
    assert isinstance(argv, list) and argv[0] == "systemd-run", argv
    (units / "sglang-fleet-model-peer.service").write_text(transient_unit(argv))
    return root


def test_every_service_the_project_writes_or_starts_has_a_ceiling(root):
    written = {path.name for path in (root / "etc/systemd/system").iterdir() if path.suffix == ".service"}
    dropins = {path.name[:-2] for path in (root / "etc/systemd/system").iterdir() if path.name.endswith(".service.d")}
    assert written | dropins == set(CEILINGS)
    templates = {path.name[:-3] for path in (ROOT / "roles").glob("*/templates/*.service.j2")}
    assert templates <= set(CEILINGS)
    # The transient units: a new systemd-run gets its unit rendered here, and a ceiling.
    command = re.compile(r"^\s*- systemd-run\s*$|['\"]systemd-run['\"]", re.M)  # an argv's first word, not a comment
    runs = {str(path.relative_to(ROOT)) for path in (ROOT / "roles").rglob("*.yml") if command.search(path.read_text())}
    assert runs == {"roles/sglang_server/vars/main.yml", "roles/sglang_model/tasks/serve.yml"}


@pytest.mark.parametrize("unit", sorted(CEILINGS))
def test_no_unit_is_exposed_more_than_it_is_today(root, unit):
    score = exposure(root, unit)
    assert score <= CEILINGS[unit], "%s: exposure %.1f, above its ceiling %.1f" % (unit, score, CEILINGS[unit])


def test_a_transient_unit_is_read_as_systemd_run_makes_it():
    text = transient_unit(["systemd-run", "--wait", "--unit=x", "--uid=svc", "--gid", "svc", "--setenv=A=1",
                           "--property=NoNewPrivileges=yes", "--", "/usr/bin/python3", "-c", "pass"])
    assert text == ("[Service]\nUser=svc\nGroup=svc\nEnvironment=A=1\nNoNewPrivileges=yes\n"
                    "ExecStart=/usr/bin/python3 -c pass\n")
