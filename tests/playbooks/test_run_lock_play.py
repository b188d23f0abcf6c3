"""The fleet run lock as site.yml takes and leaves it (playbooks/run_lock.yml, run_unlock.yml): a second
run is refused before any change, naming the first; a killed run's lock is taken over by the next run on
its controller; the slices of one AWX workflow job hold it together."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conftest import ROOT

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def fleet(tmp_path, hold_until=None):
    """A playbook that takes the lock, does its work (waits for `hold_until` to exist, bounded), leaves it."""
    work = {"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "The run's work", "ansible.builtin.wait_for": {"path": str(hold_until), "timeout": 60}}
        if hold_until else {"name": "The run's work", "ansible.builtin.debug": {"msg": "working"}},
        {"name": "What the lock says meanwhile", "ansible.builtin.slurp": {"src": str(tmp_path / "run.lock")},
         "register": "lock_during"},
        {"name": "Kept", "ansible.builtin.set_fact": {"lock_during": "{{ lock_during.content | b64decode }}"}}]}
    playbook = [{"ansible.builtin.import_playbook": str(ROOT / "playbooks/run_lock.yml")}, work,
                {"ansible.builtin.import_playbook": str(ROOT / "playbooks/run_unlock.yml")}]
    path = tmp_path / ("site-%d.yml" % time.monotonic_ns())
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
                 "fleet_run_lock_path": str(tmp_path / "run.lock")},
        "children": {"gpu_nodes": {"hosts": {"gpu-2": {}, "gpu-1": {}}}}}}))
    return [PLAYBOOK, "-i", str(inventory), str(path)]


def start(argv, log, *extra):
    return subprocess.Popen(argv + list(extra), stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))


def until_locked(tmp_path, process, log):
    deadline = time.monotonic() + 60
    while not (tmp_path / "run.lock").exists():
        assert process.poll() is None and time.monotonic() < deadline, Path(log).read_text()[-3000:]
        time.sleep(0.2)
    return json.loads((tmp_path / "run.lock").read_text())


def test_a_second_run_is_refused_before_any_change_naming_the_first_and_runs_once_it_has_ended(tmp_path):
    release = tmp_path / "release"
    first = start(fleet(tmp_path, release), tmp_path / "first.log")
    try:
        lock = until_locked(tmp_path, first, tmp_path / "first.log")
        (holder,) = lock["holders"]
        assert lock["run"] == "%s@%s:%d" % (holder["user"], holder["controller"], first.pid)
        second = subprocess.run(fleet(tmp_path), capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
        assert second.returncode != 0
        assert "another run is changing this fleet: run %s" % lock["run"] in second.stdout, second.stdout[-3000:]
        assert "The run's work" not in second.stdout  # stopped in the first play, before any change
        assert json.loads((tmp_path / "run.lock").read_text()) == lock  # the refused run left it as it was
        release.touch()
        assert first.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert not (tmp_path / "run.lock").exists()
    again = subprocess.run(fleet(tmp_path), capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert again.returncode == 0, again.stdout[-3000:]
    assert not (tmp_path / "run.lock").exists()


def test_a_killed_run_s_lock_is_taken_over_by_the_next_run_on_its_controller_with_a_warning(tmp_path):
    killed = start(fleet(tmp_path, tmp_path / "never"), tmp_path / "killed.log")
    try:
        lock = until_locked(tmp_path, killed, tmp_path / "killed.log")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    assert json.loads((tmp_path / "run.lock").read_text()) == lock  # a SIGKILL leaves it behind
    rerun = subprocess.run(fleet(tmp_path), capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    said = " ".join((rerun.stdout + rerun.stderr).split())  # warnings go to stderr
    assert "took the fleet run lock over from a run that died on this controller: run %s" % lock["run"] in said, said
    assert not (tmp_path / "run.lock").exists()


def test_the_slices_of_one_awx_workflow_job_hold_the_lock_together_and_the_last_frees_it(tmp_path):
    slice_one, slice_two = tmp_path / "one-done", tmp_path / "two-done"
    extra = ("-e", "awx_workflow_job_id=118", "-e", "awx_job_id=%s")
    one = start(fleet(tmp_path, slice_one), tmp_path / "one.log", extra[0], extra[1], extra[2], extra[3] % 119)
    two = start(fleet(tmp_path, slice_two), tmp_path / "two.log", extra[0], extra[1], extra[2], extra[3] % 120)
    try:
        deadline = time.monotonic() + 60
        while len((json.loads((tmp_path / "run.lock").read_text()) if (tmp_path / "run.lock").exists()
                   else {}).get("holders", [])) < 2:
            assert one.poll() is None and two.poll() is None and time.monotonic() < deadline, (
                (tmp_path / "one.log").read_text()[-2000:], (tmp_path / "two.log").read_text()[-2000:])
            time.sleep(0.2)
        lock = json.loads((tmp_path / "run.lock").read_text())
        assert lock["run"] == "awx-workflow-118" and sorted(h["pid"] for h in lock["holders"]) == sorted([one.pid, two.pid])
        slice_one.touch()
        assert one.wait(timeout=120) == 0, (tmp_path / "one.log").read_text()[-3000:]
        left = json.loads((tmp_path / "run.lock").read_text())  # the other slice still holds it
        assert [h["pid"] for h in left["holders"]] == [two.pid]
        other = subprocess.run(fleet(tmp_path), capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
        assert other.returncode != 0 and "another run is changing this fleet: run awx-workflow-118" in other.stdout
        slice_two.touch()
        assert two.wait(timeout=120) == 0, (tmp_path / "two.log").read_text()[-3000:]
    finally:
        for process in (one, two):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert not (tmp_path / "run.lock").exists()
