"""The device check (systemd_device_access, and sglang_server_probe's part) on a real driver-580 host's
capture: /proc/devices read and resolved once, and the line that names what a unit would deny."""
from conftest import H200, captured_nodes

from ansible.module_utils.systemd_devices import access


def check(allow):
    return access(allow, [], str(H200 / "proc-devices.txt"), captured_nodes())


def test_the_unit_s_list_allows_every_nvidia_node():
    assert check(["char-nvidia* rw"])["denied"] == ["/dev/infiniband/rdma_cm"]  # a misc device: by path only
    result = check(["char-nvidia* rw", "char-infiniband_* rw", "/dev/infiniband/rdma_cm rw"])
    assert (result["denied"], result["problem"]) == ([], "")


def test_the_list_of_before_denies_the_gpus_and_names_what_matched_nothing():
    result = check(["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw", "char-nvidia-nvswitch rw"])
    assert [p for p in result["denied"] if p.startswith("/dev/nvidia")] == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert "char-nvidia-frontend" in " ".join(result["unmatched"])
    assert result["problem"].startswith("DevicePolicy=closed with DeviceAllow=char-nvidia-frontend rw, ")
    assert "would deny /dev/nvidia0, /dev/nvidiactl" in result["problem"] and "195 nvidia" in result["problem"]
