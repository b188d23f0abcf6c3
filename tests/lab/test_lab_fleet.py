"""The bin/lab path: labctl brings up a lab fleet, plays reach it over SSH as ubuntu with become, its
nodes reach each other over their own loopback addresses and nothing else, tools/fleet.py runs a
stage over it to the fleet report, a second run changes nothing, and labctl takes the fleet down.
Needs podman and the lab image.
The whole site.yml over a 2-node lab fleet is the molecule scenario `default`; this test keeps to
the preflight stage so CI does not converge the same fleet twice."""
import subprocess
import sys
import time

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


def in_node(name, *argv):
    return subprocess.run(["podman", "exec", name, *argv], capture_output=True, text=True)


def test_plays_reach_the_nodes_over_ssh_as_ubuntu_and_become_root(fleet):
    run = run_playbook(ROOT / "tests/lab/whoami.yml", fleet)
    assert run.rc == 0, run.hosts
    seen = {name: result.facts["sglang_lab_whoami"] for name, result in run.hosts.items()}
    assert seen == {"labtest-gpu-%d" % i: {"connection": "ssh", "login": "ubuntu", "become": "root",
                                           "address": "127.0.1.%d" % i} for i in (1, 2)}
    # The session came through the node's own sshd, as ubuntu, checked against the lab's known_hosts.
    journal = in_node("labtest-gpu-1", "journalctl", "--no-pager", "-o", "cat", "_COMM=sshd").stdout
    assert "Accepted publickey for ubuntu" in journal
    known = (ROOT / ".cache/lab-ssh/known_hosts").read_text()
    own_key = in_node("labtest-gpu-1", "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
    assert "labtest-gpu-1 ssh-ed25519 %s" % own_key in known.splitlines()
    other_key = in_node("labtest-gpu-2", "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
    assert own_key != other_key  # each node made its own


def test_nodes_reach_each_other_over_their_loopback_addresses_and_nothing_else(fleet):
    server = subprocess.Popen(["podman", "exec", "labtest-gpu-1", "timeout", "60", "python3", "-m", "http.server",
                               "--bind", "127.0.1.1", "18080", "--directory", "/etc/lab-gpu"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            got = in_node("labtest-gpu-2", "curl", "-sf", "--max-time", "2", "http://127.0.1.1:18080/gpus.json")
            if got.returncode == 0:
                break
            time.sleep(0.2)
        assert got.returncode == 0 and '"gpus"' in got.stdout  # node 2 read node 1's file
    finally:
        server.kill()
        in_node("labtest-gpu-1", "pkill", "-f", "http.server --bind 127.0.1.1")
    for name in ("labtest-gpu-1", "labtest-gpu-2"):
        # One interface, the loopback, holding 127.0.0.0/8 and ::1 only: no address to send from
        # outside 127.0.0.0/8, and no route to anywhere else (the kernel answers without sending).
        links = in_node(name, "ip", "-o", "link", "show").stdout.splitlines()
        assert [line.split(":")[1].strip() for line in links] == ["lo"]
        addresses = sorted(line.split()[3] for line in in_node(name, "ip", "-o", "addr", "show").stdout.splitlines())
        assert addresses == ["127.0.0.1/8", "::1/128"]
        route = in_node(name, "ip", "route", "get", "192.0.2.1")  # TEST-NET-1: asks the table, sends nothing
        assert route.returncode != 0 and "unreachable" in route.stderr


def test_the_nodes_pip_does_not_byte_compile_what_it_installs(fleet):
    """The lab's one pip difference from a real host (docs/lab.md): the image's /etc/pip.conf. pip reads a
    `no-` option's value inverted (`no-compile = true` compiles), so this installs a module and looks for
    its bytecode rather than reading the file."""
    got = in_node("labtest-gpu-1", "sh", "-c",
                  "python3 -m venv /tmp/pip-probe && /tmp/pip-probe/bin/pip install -q --no-index "
                  "--find-links /srv/lab-wheelhouse typing_extensions && cd /tmp/pip-probe/lib/python3*/site-packages "
                  "&& ls typing_extensions.py && find . -path './__pycache__/typing_extensions*'")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["typing_extensions.py"]


def test_two_nodes_pass_the_preflight_then_rerun_changes_nothing(fleet):
    first = run_playbook(ROOT / "site.yml", fleet, tags="preflight")
    assert first.rc == 0, report(first)
    assert sorted(first.hosts) == ["labtest-gpu-1", "labtest-gpu-2"]
    second = run_playbook(ROOT / "site.yml", fleet, tags="preflight")
    assert second.rc == 0 and second.changed == 0, report(second)
    text = report(second)
    assert "2 host(s) ok, 0 failed; 0 change(s) in all" in text
    assert "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (cc 12.0)  120    580.95.05" in text


def test_the_installed_collections_site_reruns_the_preflight_with_nothing_to_change(fleet, installed_collection):
    """sglang_fleet.fleet.site from the collection installed with -p, without the repository's roles or
    plugin paths: its stage imports, its roles' modules and filters by short name, over the same fleet."""
    run = run_playbook("sglang_fleet.fleet.site", fleet, tags="preflight", env=installed_collection.env)
    assert run.rc == 0 and run.changed == 0, report(run)
    assert sorted(run.hosts) == ["labtest-gpu-1", "labtest-gpu-2"]
    assert "2 host(s) ok, 0 failed; 0 change(s) in all" in report(run)
    # The preflight's own modules ran as the collection's.
    actions = set(run.hosts["labtest-gpu-1"].actions)
    assert {"sglang_fleet.fleet.nvidia_gpu_info", "sglang_fleet.fleet.path_free_space"} <= actions, actions
    assert int(run.hosts["labtest-gpu-1"].facts["gpu_preflight_gpu_count"]) == 8


MEASURE = "The measurement runs with the install's python, every GPU at once"


def test_a_node_with_a_link_at_x8_fails_acceptance_and_a_rerun_judges_its_record_with_no_burn(fleet):
    """The acceptance stage of site.yml on the lab: labtest-gpu-2's GPU 0 runs its link at x8
    (lab_gpu_acceptance, through the lab's nvidia-smi), labtest-gpu-1 is healthy. The node's own
    python runs the stage's script (no sglang install here; the fingerprint takes the id given)."""
    degrade = run_playbook(ROOT / "files/lab/provision.yml", fleet, limit="labtest-gpu-2",
                           extravars={"lab_gpu_acceptance": "pcie-x8"})
    assert degrade.rc == 0, report(degrade)
    stage = {"gpu_acceptance_python": "/usr/bin/python3", "sglang_install_id": "0.5.9-labtest"}
    try:
        first = run_playbook(ROOT / "site.yml", fleet, tags="preflight,acceptance", extravars=stage)
        assert first.rc != 0
        healthy, degraded = first.hosts["labtest-gpu-1"], first.hosts["labtest-gpu-2"]
        assert not healthy.failures and MEASURE in [task for task, _ in healthy.results]
        (failure,) = degraded.failures
        assert failure["msg"].startswith("labtest-gpu-2 fails GPU acceptance (1): GPU 0 (GPU-"), failure["msg"]
        assert "pcie_width: PCIe link under load x8, below its max x16 (floor: 16). Measured now" in failure["msg"]

        again = run_playbook(ROOT / "site.yml", fleet, tags="preflight,acceptance", extravars=stage)
        for name in ("labtest-gpu-1", "labtest-gpu-2"):
            assert MEASURE not in [task for task, _ in again.hosts[name].results], name  # the record holds
        assert again.changed == 0 and not again.hosts["labtest-gpu-1"].failures, report(again)
        (failure,) = again.hosts["labtest-gpu-2"].failures
        assert "x8, below its max x16 (floor: 16). Measured before, same fingerprint" in failure["msg"]
    finally:
        run_playbook(ROOT / "files/lab/provision.yml", fleet, limit="labtest-gpu-2")


def test_down_removes_the_containers(fleet):
    names = labctl.inventory_hosts(fleet)
    labctl.down(fleet)
    for name in names:
        assert subprocess.run(["podman", "container", "exists", name]).returncode == 1
