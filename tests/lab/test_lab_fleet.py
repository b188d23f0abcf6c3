"""The bin/lab path: labctl brings up a lab fleet, tools/fleet.py runs a stage over it to the fleet
report, a second run changes nothing, and labctl takes the fleet down. Needs podman and the lab image.
The whole site.yml over a 2-node lab fleet is the molecule scenario `default`; this test keeps to
the preflight stage so CI does not converge the same fleet twice."""
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


def test_two_nodes_pass_the_preflight_then_rerun_changes_nothing(fleet):
    first = run_playbook(ROOT / "site.yml", fleet, tags="preflight")
    assert first.rc == 0, report(first)
    assert sorted(first.hosts) == ["labtest-gpu-1", "labtest-gpu-2"]
    second = run_playbook(ROOT / "site.yml", fleet, tags="preflight")
    assert second.rc == 0 and second.changed == 0, report(second)
    text = report(second)
    assert "2 host(s) ok, 0 failed; 0 change(s) in all" in text
    assert "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (cc 12.0)  120    580.95.05" in text


def test_down_removes_the_containers(fleet):
    names = labctl.inventory_hosts(fleet)
    labctl.down(fleet)
    for name in names:
        assert subprocess.run(["podman", "container", "exists", name]).returncode == 1
