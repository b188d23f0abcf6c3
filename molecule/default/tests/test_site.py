"""site.yml over the lab fleet, read through ansible-runner's per-host results."""
import os
from pathlib import Path

from fleet import report, run_playbook

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
HOSTS = ["fleet-gpu-1", "fleet-gpu-2"]
testinfra_hosts = ["podman://" + h for h in HOSTS]


def test_a_rerun_changes_nothing_and_reports_every_host():
    run = run_playbook(ROOT / "site.yml", INVENTORY)
    assert run.rc == 0, run.failure_summary
    assert sorted(run.hosts) == HOSTS + ["localhost"]  # the controller plans the server rollout
    assert (run.hosts["localhost"].changed, run.hosts["localhost"].failed) == (0, 0)
    for name in HOSTS:
        assert (run.hosts[name].changed, run.hosts[name].failed) == (0, 0), run.hosts[name].changed_tasks
        assert run.hosts[name].facts["gpu_preflight_cuda_archs"] == "120"
    text = report(run)
    assert "2 host(s) ok, 0 failed; 0 change(s) in all" in text
    assert "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (cc 12.0)" in text


def test_check_diff_on_the_converged_fleet_reports_no_change():
    run = run_playbook(ROOT / "site.yml", INVENTORY, check=True, diff=True)
    assert run.rc == 0, run.failure_summary
    assert run.changed == 0


def test_each_tag_runs_alone():
    run = run_playbook(ROOT / "site.yml", INVENTORY, tags="preflight")
    assert run.rc == 0 and sorted(run.hosts) == HOSTS


def test_every_node_holds_its_preflight_fact(host):
    assert host.file("/etc/ansible/facts.d/gpu_preflight.fact").mode == 0o644
