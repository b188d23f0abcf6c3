"""labctl up provisions a lab node once per container and per set of inputs, not on every rerun."""
import shutil
import subprocess

import pytest

import labctl


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """An inventory folder of its own, fake containers by id, and a record of provision.yml's runs."""
    inventory = tmp_path / "fleet" / "hosts.yml"
    inventory.parent.mkdir()
    inventory.write_text("gpu_nodes:\n  hosts:\n    node-1:\n    node-2:\n")
    (inventory.parent / "group_vars").mkdir()
    (inventory.parent / "group_vars" / "all.yml").write_text("lab_gpu_count: 8\n")
    containers = {"node-1": "id-a", "node-2": "id-b"}
    runs = []

    def podman(*args, check=True, capture=True):
        assert args[:3] == ("inspect", "--format", "{{.Id}}")
        return subprocess.CompletedProcess(args, 0, containers[args[3]] + "\n", "")

    def run(argv, **kwargs):
        runs.append(argv)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(labctl, "podman", podman)
    monkeypatch.setattr(labctl, "provision_stamp", lambda inv: tmp_path / "stamps" / "fleet.json")
    monkeypatch.setattr(labctl.subprocess, "run", run)
    return inventory, containers, runs


def test_a_rerun_over_the_same_containers_and_inputs_does_not_provision_again(lab):
    inventory, _, runs = lab
    labctl.provision_nodes(inventory)
    labctl.provision_nodes(inventory)
    assert len(runs) == 1 and runs[0][-1].endswith("files/lab/provision.yml")


def test_the_same_lab_reached_from_another_clone_is_not_provisioned_again(lab, tmp_path, monkeypatch):
    """The inputs are named by their place in the checkout and the inventory's folder, not by its path."""
    inventory, _, runs = lab
    labctl.provision_nodes(inventory)
    clone = tmp_path / "clone"
    for name in ("files/lab/provision.yml", "files/lab/nvidia-smi.py", "files/lab/sglang_lab_server.py",
                 "files/lab/sglang_lab_fusion.py", "files/lab/sglang_lab_acceptance.py",
                 "plugins/module_utils/sglang_args.py", "roles/sglang_quality/files/gsm8k/test.jsonl"):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_bytes((labctl.ROOT / name).read_bytes())
    shutil.copytree(inventory.parent, clone / "fleet")
    monkeypatch.setattr(labctl, "ROOT", clone)
    labctl.provision_nodes(clone / "fleet" / "hosts.yml")
    assert len(runs) == 1
    (clone / "files/lab/provision.yml").write_text("---\n")  # a changed input still counts
    labctl.provision_nodes(clone / "fleet" / "hosts.yml")
    assert len(runs) == 2


def test_a_container_started_afresh_is_provisioned_again(lab):
    inventory, containers, runs = lab
    labctl.provision_nodes(inventory)
    containers["node-2"] = "id-c"
    labctl.provision_nodes(inventory)
    assert len(runs) == 2


def test_a_changed_host_variable_is_provisioned_again(lab):
    inventory, _, runs = lab
    labctl.provision_nodes(inventory)
    (inventory.parent / "group_vars" / "all.yml").write_text("lab_gpu_count: 4\n")
    labctl.provision_nodes(inventory)
    assert len(runs) == 2


def test_a_failed_provisioning_is_tried_again_on_the_next_run(lab, monkeypatch):
    inventory, _, runs = lab

    def failing(argv, **kwargs):
        runs.append(argv)
        raise subprocess.CalledProcessError(2, argv)

    monkeypatch.setattr(labctl.subprocess, "run", failing)
    with pytest.raises(subprocess.CalledProcessError):
        labctl.provision_nodes(inventory)
    monkeypatch.setattr(labctl.subprocess, "run", lambda argv, **kw: runs.append(argv))
    labctl.provision_nodes(inventory)
    assert len(runs) == 2


def test_a_changed_gsm8k_test_set_is_provisioned_again(lab, tmp_path, monkeypatch):
    """provision.yml copies the quality gate's GSM8K file to every node: a changed one is an input."""
    inventory, _, runs = lab
    labctl.provision_nodes(inventory)
    clone = tmp_path / "clone"
    shutil.copytree(labctl.ROOT / "files/lab", clone / "files/lab")
    shutil.copytree(labctl.ROOT / "plugins/module_utils", clone / "plugins/module_utils")
    shutil.copytree(labctl.ROOT / "roles/sglang_quality/files", clone / "roles/sglang_quality/files")
    monkeypatch.setattr(labctl, "ROOT", clone)
    labctl.provision_nodes(inventory)
    assert len(runs) == 1
    with open(clone / "roles/sglang_quality/files/gsm8k/test.jsonl", "a") as handle:
        handle.write('{"question": "What is 1 + 1?", "answer": "#### 2"}\n')
    labctl.provision_nodes(inventory)
    assert len(runs) == 2
