"""The module's check on a real driver-580 host's capture: /proc/devices read and resolved once."""
from conftest import H200, captured_nodes

import systemd_device_access as module
from ansible.module_utils.systemd_devices import parse_proc_devices


def check(allow):
    return module.check(allow, [], parse_proc_devices((H200 / "proc-devices.txt").read_text()), captured_nodes())


def test_the_unit_s_list_allows_every_nvidia_node():
    assert check(["char-nvidia* rw"])["denied"] == ["/dev/infiniband/rdma_cm"]  # a misc device: by path only
    assert check(["char-nvidia* rw", "char-infiniband_* rw", "/dev/infiniband/rdma_cm rw"])["denied"] == []


def test_the_list_of_before_denies_the_gpus_and_names_what_matched_nothing():
    result = check(["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw", "char-nvidia-nvswitch rw"])
    assert [p for p in result["denied"] if p.startswith("/dev/nvidia")] == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert "char-nvidia-frontend" in " ".join(result["unmatched"])
