"""The profile check: a host that fits passes; each mismatch is named with expected and found."""
import pytest

from gpu_profile import FilterModule, gpu_profile_mismatches

PROFILE = {"gpu_count": 8, "compute_capability": "12.0", "min_driver_version": "580",
           "require_open_kernel_module": True, "supported_os": ["Ubuntu 22.04", "Ubuntu 24.04", "Debian 12"],
           "min_free_disk_gb": 700, "disk_path": "/models"}


def host(count=8, cap="12.0", name="NVIDIA RTX PRO 6000 Blackwell Server Edition", **over):
    found = {"gpus": [{"name": name, "compute_capability": cap} for _ in range(count)], "gpu_count": count,
             "driver_version": "580.95.05", "kernel_module": "open", "os": "Ubuntu 24.04", "free_disk_gb": 1800.0}
    found.update(over)
    return found


def test_fitting_host_has_no_mismatch():
    assert gpu_profile_mismatches(host(), PROFILE) == []


def test_the_real_h200_host_is_refused_for_count_and_capability():
    problems = gpu_profile_mismatches(host(1, "9.0", "NVIDIA H200", driver_version="580.159.04"), PROFILE)
    assert problems == ["GPU count: expected 8, found 1",
                        "compute capability: expected 12.0 on every GPU, found 9.0 (NVIDIA H200)"]


@pytest.mark.parametrize("over,expected", [
    ({"driver_version": "575.57.08"}, "driver: expected 580 or newer, found 575.57.08"),
    ({"kernel_module": "proprietary"}, "kernel module: expected the NVIDIA open kernel modules, found proprietary"),
    ({"os": "Ubuntu 20.04"}, "operating system: expected one of Ubuntu 22.04, Ubuntu 24.04, Debian 12, found Ubuntu 20.04"),
    ({"free_disk_gb": 120.5}, "free disk for /models: expected at least 700 GB (free + models in place), found 120.5 GB"),
])
def test_each_mismatch_is_named(over, expected):
    assert gpu_profile_mismatches(host(**over), PROFILE) == [expected]


def test_driver_versions_compare_numerically():
    assert gpu_profile_mismatches(host(driver_version="1000.1"), PROFILE) == []
    assert gpu_profile_mismatches(host(driver_version="580.9"), dict(PROFILE, min_driver_version="580.10"))


@pytest.mark.parametrize("os_name,fits", [("Debian 12.7", True), ("Debian 12", True), ("Debian 120", False),
                                          ("Ubuntu 24.04", True), ("Ubuntu 24.10", False)])
def test_os_versions(os_name, fits):
    assert (gpu_profile_mismatches(host(os=os_name), PROFILE) == []) is fits


def test_zero_disk_requirement_skips_the_disk_check():
    assert gpu_profile_mismatches(host(free_disk_gb=0), dict(PROFILE, min_free_disk_gb=0)) == []


def test_filter_is_registered():
    assert FilterModule().filters()["gpu_profile_mismatches"] is gpu_profile_mismatches


def test_missing_p2p_is_reported_unless_the_profile_requires_it():
    found = dict(host(), p2p_problems=["GPU0-GPU1 read: CNS (Chipset not supported)"])
    assert gpu_profile_mismatches(found, PROFILE) == []
    assert gpu_profile_mismatches(found, dict(PROFILE, require_p2p=True)) == [
        "peer-to-peer between every GPU pair (FlashInfer allreduce fusion needs it): "
        "GPU0-GPU1 read: CNS (Chipset not supported)"]
    assert gpu_profile_mismatches(dict(host(), p2p_problems=[]), dict(PROFILE, require_p2p=True)) == []
