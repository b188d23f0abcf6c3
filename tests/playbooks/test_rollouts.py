"""Steps that take a host out of service pass one host (or batch) at a time, and a failure stops them."""
import yaml

from conftest import ROOT


def test_the_driver_reboot_rolls_one_host_at_a_time_and_a_failure_stops_the_play():
    tasks = yaml.safe_load((ROOT / "roles/cuda_toolkit/tasks/driver.yml").read_text())
    reboot = next(t for t in tasks if "ansible.builtin.reboot" in t)
    assert reboot["throttle"] == 1
    play = yaml.safe_load((ROOT / "playbooks/cuda.yml").read_text())[0]
    assert play["max_fail_percentage"] == 0


def test_the_server_rolls_in_batches_and_stops_at_the_first_failure():
    play = yaml.safe_load((ROOT / "playbooks/server.yml").read_text())[0]
    assert play["serial"] == "{{ sglang_server_serial | default([1, '50%']) }}"
    assert play["max_fail_percentage"] == 0
