"""gpu_preflight in the lab: what a converged node holds, and what a misfit node gets told."""
import json
import os
from pathlib import Path

import pytest

from fleet import run_playbook

SCENARIO = Path(__file__).resolve().parents[1]
ROOT = SCENARIO.parents[1]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = ["podman://preflight-fit"]


def test_local_fact_records_the_hardware(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/gpu_preflight.fact").content_string)
    assert fact["gpu_count"] == 8
    assert fact["cuda_archs"] == "120"
    assert fact["driver_version"] == "580.95.05"
    assert fact["cuda_driver_version"] == "13.0"
    assert fact["kernel_module"] == "open"
    assert {g["compute_capability"] for g in fact["gpus"]} == {"12.0"}
    assert len({g["uuid"] for g in fact["gpus"]}) == 8


def test_check_mode_on_the_converged_node_changes_nothing():
    run = run_playbook(ROOT / "playbooks/preflight.yml", INVENTORY, check=True, diff=True)
    assert run.rc == 0, run.hosts
    assert run.hosts["preflight-fit"].changed == 0


def test_a_rerun_changes_nothing_and_sets_the_facts_for_later_roles():
    run = run_playbook(ROOT / "playbooks/preflight.yml", INVENTORY)
    assert run.rc == 0 and run.hosts["preflight-fit"].changed == 0, run.hosts["preflight-fit"].changed_tasks
    facts = run.hosts["preflight-fit"].facts
    assert facts["gpu_preflight_gpu_count"] == 8
    assert facts["gpu_preflight_cuda_archs"] == "120"


def test_the_h200_node_is_refused_with_what_was_expected_and_found():
    run = run_playbook(SCENARIO / "refuse.yml", INVENTORY)
    result = run.hosts["preflight-h200"]
    assert result.failed == 1 and result.changed == 0
    message = result.failures[0]["msg"]
    assert message.startswith("preflight-h200 does not fit the GPU profile")
    assert "GPU count: expected 8, found 1" in message
    assert "compute capability: expected 12.0 on every GPU, found 9.0 (NVIDIA H200)" in message


def test_the_refused_node_was_not_touched(host):
    misfit = host.get_host("podman://preflight-h200")
    assert not misfit.file("/etc/ansible/facts.d/gpu_preflight.fact").exists


@pytest.mark.parametrize("extravars,expected", [
    ({"fleet_gpus_per_host": "eight"}, "fleet_gpus_per_host"),
    ({"gpu_preflight_require_open_kernel_module": "perhaps"}, "gpu_preflight_require_open_kernel_module"),
])
def test_a_wrong_variable_fails_before_any_change(extravars, expected):
    run = run_playbook(ROOT / "playbooks/preflight.yml", INVENTORY, extravars=extravars)
    result = run.hosts["preflight-fit"]
    assert result.failed == 1 and result.changed == 0
    assert "argument spec" in result.failures[0]["msg"].lower() or "validation" in result.failures[0]["msg"].lower()
    assert expected in json.dumps(result.failures[0])


def test_gpu_pairs_without_p2p_are_reported_and_refused_only_when_required(host):
    """The lab's nvidia-smi prints the driver's P2P matrix with CNS on every pair, as a PCIe host
    whose chipset blocks peer-to-peer does."""
    gpus = "/etc/lab-gpu/gpus.json"
    saved = host.file(gpus).content_string
    config = dict(json.loads(saved), p2p="CNS", link="SYS")
    host.check_output("printf '%%s' '%s' > %s" % (json.dumps(config), gpus))
    try:
        run = run_playbook(ROOT / "playbooks/preflight.yml", INVENTORY, limit="preflight-fit")
        assert run.rc == 0, run.hosts
        p2p = run.hosts["preflight-fit"].facts["gpu_preflight_p2p"]
        assert p2p["all_ok"] is False and len(p2p["pairs"]) == 28  # 8 GPUs
        assert p2p["problems"][0] == "GPU0-GPU1 read: CNS (Chipset not supported)"
        assert {pair["link"] for pair in p2p["pairs"]} == {"SYS"}
        run = run_playbook(ROOT / "playbooks/preflight.yml", INVENTORY, limit="preflight-fit",
                           extravars={"gpu_preflight_require_p2p": True})
        result = run.hosts["preflight-fit"]
        assert run.rc != 0 and result.changed == 0
        assert "peer-to-peer between every GPU pair (FlashInfer allreduce fusion needs it): GPU0-GPU1 read: CNS" \
            in result.failures[0]["msg"]
    finally:
        host.check_output("printf '%%s' '%s' > %s" % (saved.replace("'", ""), gpus))
    run = run_playbook(ROOT / "playbooks/preflight.yml", INVENTORY, limit="preflight-fit")
    assert run.hosts["preflight-fit"].facts["gpu_preflight_p2p"]["all_ok"] is True
