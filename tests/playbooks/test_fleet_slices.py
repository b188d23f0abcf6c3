"""AWX job slicing: each slice runs over an inventory of its slice's hosts only, its groups holding only
their members there. With fleet_gpu_nodes naming the whole fleet, a slice that splits a multi-node group
is refused by every stage before any change, naming the group; a slice that keeps it whole goes on."""
import sys

import pytest
import yaml

import fleet
from fleet import awx_slices
from conftest import ROOT

# Six GPU hosts, one two-node group (the lab's 6-node slicing fleet, in miniature and local).
FLEET = {"g1": "", "g2": "", "g3": "tp_a", "g4": "tp_a", "g5": "", "g6": ""}


def sliced_inventory(path, hosts, whole=FLEET, groups_of=FLEET):
    """A slice's inventory as AWX writes it: the slice's hosts (each in its group of `groups_of`), each
    group only with its members in the slice, and the inventory's variables (group_vars/all) kept."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    groups = {"gpu_nodes": {"hosts": {h: dict(local, sglang_server_multinode_group=groups_of.get(h, "")) for h in hosts}}}
    for group in sorted({groups_of[h] for h in hosts if groups_of.get(h)}):
        groups[group] = {"hosts": {h: {} for h in hosts if groups_of.get(h) == group}}
    inventory_vars = {"fleet_gpu_nodes": whole} if whole else {}
    path.write_text(yaml.safe_dump({"all": {"vars": inventory_vars, "children": groups}}))
    return path


def run(tmp_path, playbook, hosts, whole=FLEET):
    inventory = sliced_inventory(tmp_path / ("slice-%s.yml" % "-".join(hosts)), hosts, whole)
    return fleet.run_playbook(playbook, inventory, extravars={"fleet_state_dir": str(tmp_path / "state")},
                              env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})


@pytest.fixture
def fleet_check(tmp_path):
    """The fleet role alone, which every stage's role depends on and runs first."""
    play = [{"name": "The fleet layer's checks", "hosts": "gpu_nodes", "gather_facts": False,
             "roles": [{"role": "fleet"}]}]
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(play))
    return tmp_path / "fleet.yml"


def test_awx_slicing_in_three_splits_the_group_and_in_two_keeps_it():
    assert awx_slices(FLEET, 3) == [["g1", "g4"], ["g2", "g5"], ["g3", "g6"]]
    assert awx_slices(FLEET, 2) == [["g1", "g3", "g5"], ["g2", "g4", "g6"]]


def test_slices_that_keep_the_group_whole_pass(tmp_path, fleet_check):
    for hosts in (["g1", "g2"], ["g3", "g4"], ["g5", "g6"]):
        result = run(tmp_path, fleet_check, hosts)
        assert result.rc == 0, result.failure_summary


def test_a_slice_that_splits_the_group_is_refused_naming_it(tmp_path, fleet_check):
    split, clean = [], []
    for hosts in awx_slices(FLEET, 3):
        result = run(tmp_path, fleet_check, hosts)
        (split if result.rc else clean).append((hosts, result))
    assert [hosts for hosts, _ in split] == [["g1", "g4"], ["g3", "g6"]]
    assert [hosts for hosts, _ in clean] == [["g2", "g5"]]
    hosts, result = split[0]
    assert [h for h, r in result.hosts.items() if r.failures] == ["g4"]
    assert result.hosts["g4"].failures[0]["msg"].startswith(
        "multi-node group tp_a is split across slices: this run holds g4, but not g3")


def test_the_real_preflight_stage_refuses_the_split_before_any_of_its_tasks(tmp_path):
    result = run(tmp_path, ROOT / "playbooks/preflight.yml", ["g3", "g6"])
    assert result.rc != 0
    failures = result.hosts["g3"].failures
    assert failures[0]["task"] == "This run holds every rank of this host's multi-node group", failures
    assert "multi-node group tp_a is split across slices" in failures[0]["msg"] and "not g4" in failures[0]["msg"]
    assert not [task for task, _ in result.hosts["g3"].results if task and "gpu_preflight" in task.lower()]
    assert result.changed == 0


def test_a_host_missing_from_the_whole_fleet_or_disagreeing_with_it_is_named(tmp_path, fleet_check):
    missing = run(tmp_path, fleet_check, ["g1", "g7"])
    assert "g7 is not in fleet_gpu_nodes" in missing.failure_summary
    disagrees = run(tmp_path, fleet_check, ["g3", "g4"], whole=dict(FLEET, g4=""))
    assert "g4: its sglang_server_multinode_group is 'tp_a', but fleet_gpu_nodes says ''" in \
        disagrees.failure_summary.replace('"', "'")


def test_without_the_whole_fleet_named_a_run_is_its_inventory(tmp_path, fleet_check):
    result = run(tmp_path, fleet_check, ["g3", "g6"], whole={})
    assert result.rc == 0, result.failure_summary


@pytest.mark.parametrize("playbook, task, what", [
    ("playbooks/router.yml", "This run holds the whole fleet, whose every worker the router registers",
     "the router registers every worker of the fleet"),
    ("playbooks/monitoring.yml", "This run holds the whole fleet, which Prometheus scrapes",
     "Prometheus scrapes every GPU host of the fleet"),
    ("playbooks/server.yml", "This run holds the whole fleet, whose floor the rollout keeps",
     "the rollout counts its floor over every server of the fleet and takes each out of its routers"),
])
def test_the_stages_that_serve_the_whole_fleet_refuse_a_slice_naming_the_hosts_it_lacks(tmp_path, playbook, task, what):
    # A slice of the router and the monitoring host (no GPU host, whose exporters would run here), or of
    # two GPU hosts, whose servers the server stage would restart.
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    gpus = ["g1", "g2"] if "server" in playbook else []
    inventory = tmp_path / "slice.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"fleet_gpu_nodes": FLEET}, "children": {
        "gpu_nodes": {"hosts": {h: dict(local) for h in gpus}},
        "sglang_routers": {"hosts": {"r1": dict(local)}},
        "monitoring": {"hosts": {"m1": dict(local)}}}}}))
    result = fleet.run_playbook(ROOT / playbook, inventory, extravars={"fleet_state_dir": str(tmp_path / "state"),
                                                                       "sglang_install_id": ""},
                                env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})
    assert result.rc != 0 and result.changed == 0
    lacks = [h for h in sorted(FLEET) if h not in gpus]
    for host in gpus or ["r1" if "router" in playbook else "m1"]:
        (failure,) = result.hosts[host].failures
        assert failure["task"] == task
        assert failure["msg"] == ("%s: %s: this run is a slice of the fleet, without %s, so it would leave them out: "
                                  "run this stage in a job that is not sliced (the AWX workflow's finish job)"
                                  % (host, what, ", ".join(lacks)))


def test_the_checks_run_in_the_first_stage_that_reaches_a_host_only(tmp_path):
    """Every stage's role depends on the fleet role: over a run of stages, each host is checked once, in
    the first play that reaches it (a host only a later play reaches is checked there), and the run's
    start stays the one that first play set."""
    plays = [{"name": "Stage %d" % n, "hosts": hosts, "gather_facts": False, "roles": [{"role": "fleet"}]}
             for n, hosts in ((1, "g1"), (2, "g1,g2"), (3, "g1,g2"))]
    (tmp_path / "stages.yml").write_text(yaml.safe_dump(plays))
    result = run(tmp_path, tmp_path / "stages.yml", ["g1", "g2"], whole={"g1": "", "g2": ""})
    assert result.rc == 0, result.failure_summary
    for host in ("g1", "g2"):
        checked = [task for task, _ in result.hosts[host].results
                   if task == "The fleet settings of this host can work together"]
        assert len(checked) == 1, (host, result.hosts[host].results)
        started = {res["ansible_facts"]["fleet_run_started"] for task, res in result.hosts[host].results
                   if "fleet_run_started" in (res.get("ansible_facts") or {})}
        assert len(started) == 1
