"""The preflight says which nvidia-modprobe a host has, run on this machine against the H200 host's capture.

The capture (tests/fixtures/hosts/h200-driver580/) answers for nvidia-smi; nvidia-modprobe is looked for where
the test puts it, or nowhere, as `command -v nvidia-modprobe` found nothing on that host."""
import sys

import yaml

from conftest import FIXTURES, H200, ROOT
from fleet import run_playbook

SMI = FIXTURES / "nvidia-smi"


def fake_nvidia_smi(path):
    """nvidia-smi as the H200 host answered it."""
    path.write_text(f"""#!/bin/sh
case "$1 $2 $3" in
  --query-gpu=*) exec /bin/cat {SMI / "h200-query-noheader-nounits.csv"} ;;
  "topo -p2p r") exec /bin/cat {H200 / "nvidia-smi-topo-p2p-r.txt"} ;;
  "topo -p2p w") exec /bin/cat {H200 / "nvidia-smi-topo-p2p-w.txt"} ;;
  "topo -m ") exec /bin/cat {H200 / "nvidia-smi-topo-m.txt"} ;;
  *) exec /bin/cat {SMI / "h200-table.txt"} ;;
esac
""")
    path.chmod(0o755)
    return path


def preflight(tmp_path, monkeypatch, nvidia_modprobe):
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"h200": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    run = run_playbook(ROOT / "playbooks/preflight.yml", inventory, extravars={
        "fleet_nvidia_smi": str(fake_nvidia_smi(tmp_path / "nvidia-smi")),
        "gpu_preflight_driver_version_file": str(H200 / "proc-driver-nvidia-version.txt"),
        "gpu_preflight_nvidia_modprobe": str(nvidia_modprobe),
        "fleet_gpus_per_host": 1, "gpu_preflight_expected_compute_capability": "9.0",
        "gpu_preflight_supported_os": [], "gpu_preflight_min_free_disk_gb": 0, "gpu_preflight_local_facts": False})
    assert run.rc == 0, run.failure_summary
    host = run.hosts["h200"]
    (said,) = [res["msg"] for task, res in host.results if task == "Which nvidia-modprobe the host has is reported"]
    return host.facts, said


def test_a_host_without_nvidia_modprobe_is_told_so_and_not_refused(tmp_path, monkeypatch):
    assert "nvidia-modprobe.txt 127" in (H200 / "exit-codes.txt").read_text().splitlines()
    absent = tmp_path / "bin/nvidia-modprobe"
    facts, said = preflight(tmp_path, monkeypatch, absent)
    assert facts["gpu_preflight_nvidia_modprobe_path"] == "" and facts["gpu_preflight_gpu_count"] == 1
    assert said.startswith(f"h200: nvidia-modprobe: none (looked for {absent})")
    assert "/dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidiaN" in said


def test_the_nvidia_modprobe_found_is_named(tmp_path, monkeypatch):
    found = tmp_path / "nvidia-modprobe"
    found.write_text("#!/bin/sh\nexit 0\n")
    found.chmod(0o755)
    facts, said = preflight(tmp_path, monkeypatch, found)
    assert facts["gpu_preflight_nvidia_modprobe_path"] == str(found)
    assert said == f"h200: nvidia-modprobe {found}"
