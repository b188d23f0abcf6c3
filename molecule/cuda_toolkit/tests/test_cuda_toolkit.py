"""cuda_toolkit in the lab: 12.8 -> 13.0 from a signed apt mirror, pinned, verified."""
import json
import os
from pathlib import Path

from fleet import run_playbook

SCENARIO = Path(__file__).resolve().parents[1]
ROOT = SCENARIO.parents[1]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = ["podman://cuda-gpu-1"]


def test_nvcc_reports_13_0_through_the_pinned_link(host):
    out = host.check_output("/usr/local/cuda/bin/nvcc --version")
    assert "Cuda compilation tools, release 13.0, V13.0.88" in out
    query = host.check_output("update-alternatives --query cuda")
    assert "Status: manual" in query and "Value: /usr/local/cuda-13.0" in query


def test_the_repository_is_deb822_with_signed_by(host):
    sources = host.file("/etc/apt/sources.list.d/cuda.sources").content_string
    assert "URIs: file:///srv/lab-apt/debian12/x86_64/" in sources
    assert "Signed-By:" in sources


def test_cuda_keyrings_source_was_taken_over_and_apt_reads_every_source(host):
    assert not host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
    kept = host.file("/var/backups/cuda-debian12-x86_64.list")
    assert "signed-by=/usr/share/keyrings/cuda-archive-keyring.asc" in kept.content_string
    out = host.run("apt-get update")
    assert out.rc == 0 and "Conflicting values" not in out.stderr, out.stderr
    # What the take-over avoided: both sources of the URI, each with its own key, and apt reads none.
    host.check_output("cp /var/backups/cuda-debian12-x86_64.list /etc/apt/sources.list.d/")
    try:
        both = host.run("apt-get update")
        assert both.rc != 0 and "Conflicting values set for option Signed-By" in both.stderr, both.stderr
    finally:
        host.check_output("rm /etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    # deb822_repository's library came from the distro mirror: the image, like a cloud image, lacks it.
    assert host.package("python3-debian").is_installed


def test_profile_and_linker_see_bin_and_lib64(host):
    profile = host.file("/etc/profile.d/cuda.sh").content_string
    assert "export CUDA_HOME=/usr/local/cuda-13.0" in profile
    assert host.check_output("bash -lc 'command -v nvcc'") == "/usr/local/cuda-13.0/bin/nvcc"
    assert host.file("/etc/ld.so.conf.d/cuda.conf").content_string == "/usr/local/cuda-13.0/lib64\n"


def test_12_8_is_kept_and_the_fact_records_both(host):
    assert host.package("cuda-toolkit-12-8").is_installed
    fact = json.loads(host.file("/etc/ansible/facts.d/cuda_toolkit.fact").content_string)
    assert fact["version"] == "13.0.88"
    assert [t["version"] for t in fact["installed"]] == ["12.8", "13.0"]
    assert {t["source"] for t in fact["installed"]} == {"package"}


def test_check_mode_on_the_converged_node_reports_nothing():
    run = run_playbook(ROOT / "playbooks/cuda.yml", INVENTORY, check=True, diff=True)
    assert run.rc == 0 and run.hosts["cuda-gpu-1"].changed == 0, run.hosts["cuda-gpu-1"].changed_tasks


def test_a_drifted_node_is_found_by_the_first_read_and_repaired(host):
    """A converged node skips the stage's work only while one read shows it as asked: a profile script
    edited by hand and the alternative put back in auto mode are found, planned under --check without
    a write, then repaired."""
    host.check_output("echo 'export CUDA_HOME=/usr/local/cuda-12.8' > /etc/profile.d/cuda.sh")
    host.check_output("update-alternatives --auto cuda")
    check = run_playbook(ROOT / "playbooks/cuda.yml", INVENTORY, check=True, diff=True)
    assert check.rc == 0 and check.hosts["cuda-gpu-1"].changed > 0, check.hosts["cuda-gpu-1"].failures
    assert host.file("/etc/profile.d/cuda.sh").content_string == "export CUDA_HOME=/usr/local/cuda-12.8\n"
    run = run_playbook(ROOT / "playbooks/cuda.yml", INVENTORY)
    assert run.rc == 0 and run.hosts["cuda-gpu-1"].changed > 0, run.hosts["cuda-gpu-1"].failures
    assert "export CUDA_HOME=/usr/local/cuda-13.0" in host.file("/etc/profile.d/cuda.sh").content_string
    assert "Status: manual" in host.check_output("update-alternatives --query cuda")
    again = run_playbook(ROOT / "playbooks/cuda.yml", INVENTORY)
    assert again.rc == 0 and again.hosts["cuda-gpu-1"].changed == 0, again.hosts["cuda-gpu-1"].changed_tasks


def test_a_newer_13_x_does_not_take_the_link(host):
    host.run_expect([0], "apt-get install -y cuda-toolkit-13-1")
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-13.0"
    host.run_expect([0], "apt-get purge -y cuda-toolkit-13-1")


def test_check_mode_on_a_fresh_12_8_node_reports_changes_and_writes_nothing(host):
    fresh = host.get_host("podman://cuda-fresh")
    run = run_playbook(SCENARIO / "other_nodes.yml", INVENTORY, check=True, diff=True, limit="cuda-fresh")
    result = run.hosts["cuda-fresh"]
    assert run.rc == 0 and result.failed == 0, result.failures
    assert result.changed > 0
    assert not fresh.file("/etc/apt/sources.list.d/cuda.sources").exists
    assert not fresh.file("/usr/local/cuda-13.0").exists
    assert fresh.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.8"


def test_a_runfile_13_0_is_detected_and_not_reinstalled(host):
    node = host.get_host("podman://cuda-runfile")
    run = run_playbook(SCENARIO / "other_nodes.yml", INVENTORY, limit="cuda-runfile")
    assert run.rc == 0, run.hosts["cuda-runfile"].failures
    assert not node.package("cuda-toolkit-13-0").is_installed
    assert not node.file("/etc/apt/sources.list.d/cuda.sources").exists
    fact = json.loads(node.file("/etc/ansible/facts.d/cuda_toolkit.fact").content_string)
    assert {t["version"]: t["source"] for t in fact["installed"]} == {"12.8": "package", "13.0": "runfile"}
    assert "Status: manual" in node.check_output("update-alternatives --query cuda")


def test_removal_variant_purges_12_8_then_settles(host):
    extravars = {"cuda_toolkit_remove_versions": ["12.8"]}
    run = run_playbook(ROOT / "playbooks/cuda.yml", INVENTORY, extravars=extravars)
    assert run.rc == 0 and run.hosts["cuda-gpu-1"].changed > 0, run.hosts["cuda-gpu-1"].failures
    assert not host.package("cuda-toolkit-12-8").is_installed
    assert not host.file("/usr/local/cuda-12.8").exists
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-13.0"
    again = run_playbook(ROOT / "playbooks/cuda.yml", INVENTORY, extravars=extravars)
    assert again.rc == 0 and again.hosts["cuda-gpu-1"].changed == 0
