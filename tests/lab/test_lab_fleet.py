"""The main job end to end, as `bin/lab` runs it: labctl brings up a lab fleet, site.yml runs
over it to a fleet report, and a second run changes nothing. Needs podman and the lab image."""
import subprocess
import sys

import pytest

import labctl
from fleet import report, run_playbook
from conftest import ROOT


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    # Fresh containers get a fact cache of their own, not one a previous fleet of the same names left.
    mp = pytest.MonkeyPatch()
    mp.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path_factory.mktemp("facts")))
    inventory = labctl.write_inventory(2, prefix="labtest-gpu")
    subprocess.run([sys.executable, str(ROOT / "files/lab/labctl.py"), "up", "-i", str(inventory)],
                   check=True, env={"LAB_QUIET": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    yield inventory
    labctl.down(inventory)
    mp.undo()


def test_two_nodes_converge_then_rerun_changes_nothing(fleet):
    first = run_playbook(ROOT / "site.yml", fleet)
    assert first.rc == 0, report(first)
    assert sorted(first.hosts) == ["labtest-gpu-1", "labtest-gpu-2"]
    second = run_playbook(ROOT / "site.yml", fleet)
    assert second.rc == 0 and second.changed == 0, report(second)
    assert "2 host(s) ok, 0 failed; 0 change(s) in all" in report(second)


def test_down_removes_the_containers(fleet):
    names = labctl.inventory_hosts(fleet)
    labctl.down(fleet)
    for name in names:
        assert subprocess.run(["podman", "container", "exists", name]).returncode == 1
