"""The acceptance stage on this machine (local connection): a host is judged from its record when the
fingerprint holds (no burn), fails naming check, value and floor, and measures again when it changed."""
import copy
import json
import sys

import pytest
import yaml

from conftest import FIXTURES, H200, ROOT
from fleet import run_playbook
from gpu_acceptance import acceptance_fingerprint

CAPTURE = json.loads((H200 / "acceptance/acceptance.json").read_text())
OWN = FIXTURES / "gpu_acceptance"
UUID = CAPTURE["gpus"][0]["uuid"]
MEASURE = "The measurement runs with the install's python, every GPU at once"


def stage(tmp_path, monkeypatch, record=None, check=False, **extra):
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", str(OWN / "two-gpus.json"))
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if record is not None:
        (state / "gpu_acceptance.fact").write_text(json.dumps(record))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"h200": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    run = run_playbook(ROOT / "playbooks/acceptance.yml", inventory, extravars={
        "fleet_state_dir": str(state), "fleet_cuda_release": "13.0", "sglang_install_id": "0.5.9-9559f4d77ef0",
        "gpu_preflight_gpus": [{"uuid": UUID, "name": "NVIDIA H200"}], "gpu_preflight_driver_version": "580.159.04",
        "fleet_nvidia_smi": str(OWN / "fake_nvidia_smi.py"), "gpu_acceptance_python": sys.executable,
        "gpu_acceptance_kernel_log": str(OWN / "kernel-log-xid79.txt"), **extra}, check=check)
    host = run.hosts["h200"]
    ran = [task for task, _ in host.results]
    # The facts the stage sets for the report (tools/fleet.py's report lists only the prefixes it knows).
    verdicts = [res.get("ansible_facts", {}) for task, res in host.results if task == "The verdict is known"]
    host.facts.update(verdicts[0] if verdicts else {})
    written = json.loads((state / "gpu_acceptance.fact").read_text()) if (state / "gpu_acceptance.fact").exists() else None
    return run, host, ran, written


def fingerprint(install="0.5.9-9559f4d77ef0"):
    return acceptance_fingerprint([UUID], "580.159.04", "13.0", install)


def test_a_host_whose_record_holds_passes_with_no_burn(tmp_path, monkeypatch):
    record = {"fingerprint": fingerprint(), "measured_at": 4102444800 - 86400, "measured": CAPTURE}
    run, host, ran, _ = stage(tmp_path, monkeypatch, record, gpu_acceptance_max_age_days=0)
    assert run.rc == 0, run.failure_summary
    assert MEASURE not in ran
    assert host.facts["gpu_acceptance_passed"] is True and host.facts["gpu_acceptance_burned"] is False
    assert host.facts["gpu_acceptance_failures"] == []


def test_a_degraded_record_fails_the_host_naming_check_value_and_floor(tmp_path, monkeypatch):
    degraded = copy.deepcopy(CAPTURE)
    degraded["gpus"][0]["health"]["pcie_width_current"] = 8
    record = {"fingerprint": fingerprint(), "measured_at": 4102444800, "measured": degraded}
    run, host, ran, _ = stage(tmp_path, monkeypatch, record, gpu_acceptance_max_age_days=0)
    assert run.rc != 0 and MEASURE not in ran
    assert "h200 fails GPU acceptance (1): GPU 0 (%s): pcie_width: PCIe link under load x8, below its max x16 " \
           "(floor: 16)" % UUID in run.failure_summary


def test_a_changed_fingerprint_measures_again_and_a_rerun_burns_nothing(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    old = {"fingerprint": fingerprint("0.5.8-000000000000"), "measured_at": 4102444800, "measured": CAPTURE}
    cpu = ["--only", "allreduce", "--backend", "gloo", "--world-size", "2",
           "--allreduce-min-bytes", "4096", "--allreduce-max-bytes", "16384"]
    run, host, ran, written = stage(tmp_path, monkeypatch, old, gpu_acceptance_extra_args=cpu)
    assert MEASURE in ran
    assert written["fingerprint"] == fingerprint() and written["measured"]["allreduce"]["correct"] is True
    # Measured on this machine's CPU: no GPU to judge, so the host fails, and says so.
    assert run.rc != 0 and "measurement: torch sees 0 GPUs, nvidia-smi 2" in run.failure_summary
    assert "PCI 0000:5e:00" not in run.failure_summary and "xid: XID 79 since boot" in run.failure_summary

    again, _, ran_again, rewritten = stage(tmp_path, monkeypatch, gpu_acceptance_extra_args=cpu)
    assert MEASURE not in ran_again and rewritten == written
    assert "same fingerprint %s" % fingerprint() in again.failure_summary


def test_a_check_run_measures_nothing_and_writes_nothing(tmp_path, monkeypatch):
    run, host, ran, written = stage(tmp_path, monkeypatch, check=True)
    assert run.rc == 0, run.failure_summary
    assert written is None and host.facts["gpu_acceptance_passed"] is None
    assert [res.get("skipped") for task, res in host.results if task == MEASURE] in ([], [True])


def test_a_run_without_the_stage_keeps_a_host_its_record_holds_out_out_of_the_routers(tmp_path, monkeypatch):
    """--tags router (or server, verify, bench) after the stage held b out: the stages' own import,
    playbooks/acceptance_record.yml, judges each host's record with no burn; b fails again, naming its
    record, and the routers' worker list (fleet_in_service, as the router role reads it) leaves it out.
    A host never measured has no verdict and stays in."""
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    degraded = copy.deepcopy(CAPTURE)
    degraded["gpus"][0]["health"]["pcie_width_current"] = 8
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {}
    for name, measured in (("a", CAPTURE), ("b", degraded), ("c", None)):
        state = tmp_path / name
        state.mkdir()
        if measured is not None:
            (state / "gpu_acceptance.fact").write_text(json.dumps(
                {"fingerprint": fingerprint(), "measured_at": 1764900000, "measured": measured}))
        hosts[name] = dict(local, fleet_state_dir=str(state))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    playbook = tmp_path / "router.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "Held out", "ansible.builtin.import_playbook": str(ROOT / "playbooks/acceptance_record.yml")},
        {"name": "Workers", "hosts": "localhost", "gather_facts": False, "vars": local, "tasks": [
            {"name": "The routers' workers are known", "ansible.builtin.set_fact": {
                "sglang_workers": "{{ groups['gpu_nodes'] | fleet_in_service(hostvars, groups) }}"}}]}]))
    run = run_playbook(playbook, inventory)
    assert run.rc != 0
    (failure,) = run.hosts["b"].failures
    assert failure["msg"].startswith("b fails GPU acceptance (1): GPU 0 (%s): pcie_width: PCIe link under load x8"
                                     % UUID), failure["msg"]
    assert failure["msg"].endswith(
        "Measured by the acceptance stage at 2025-12-05T02:00:00Z (fingerprint %s), judged from its record by "
        "this run, which has no acceptance stage; --tags acceptance -e gpu_acceptance_refresh=true measures again."
        % fingerprint()), failure["msg"]
    assert not run.hosts["a"].failures and not run.hosts["c"].failures
    assert run.hosts["localhost"].facts["sglang_workers"] == ["a", "c"]
    assert MEASURE not in [task for host in ("a", "b") for task, _ in run.hosts[host].results]
