"""site.yml over the lab fleet, read through ansible-runner's per-host results."""
import os
from pathlib import Path

from fleet import report, run_awx_workflow, run_playbook

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


def test_the_awx_workflow_runs_each_job_s_stages_alone_its_rollout_in_slices_and_changes_nothing(tmp_path):
    """docs/awx-workflow.yml as AWX runs it; the rollout's slices are one host each here."""
    jobs = dict(run_awx_workflow(ROOT / "docs/awx-workflow.yml", INVENTORY, tmp_path,
                                 {"fleet_gpu_nodes": {name: "" for name in HOSTS}, "lab_hosts": HOSTS}))
    assert list(jobs) == ["prepare", "rollout", "finish"]
    for name, runs in jobs.items():
        for run in runs:
            assert run.rc == 0, (name, run.failure_summary)
            assert run.changed == 0, (name, {h: r.changed_tasks for h, r in run.hosts.items()})
    assert [len(runs) for runs in jobs.values()] == [1, 2, 1]
    assert [sorted(set(run.hosts) - {"localhost"}) for run in jobs["rollout"]] == [[HOSTS[0]], [HOSTS[1]]]
    # Each job ran its own stages: the preflight's fact, the flash-attn stage's, the verify stage's.
    facts = {name: {k for run in runs for r in run.hosts.values() for k in r.facts} for name, runs in jobs.items()}
    assert "gpu_preflight_cuda_archs" in facts["prepare"] and "flash_attn_action" not in facts["prepare"]
    assert "flash_attn_action" in facts["rollout"] and "gpu_preflight_cuda_archs" not in facts["rollout"]
    assert not any(k.startswith(("gpu_preflight_", "flash_attn_")) for k in facts["finish"])
    assert any(k.startswith("sglang_verify") for k in facts["finish"]), facts["finish"]


def test_every_node_holds_its_preflight_fact(host):
    assert host.file("/etc/ansible/facts.d/gpu_preflight.fact").mode == 0o644
