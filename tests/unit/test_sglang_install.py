"""The install id and the pins check (plugins/filter/sglang_install.py), against the roles' own pins."""
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from conftest import ROOT
from sglang_install import sglang_install_id, sglang_install_mismatches

INPUTS = {"sglang": "0.5.9", "packages": {"torch": "2.9.1+cu130", "sgl-kernel": {"url": "https://x/k.whl", "sha256": ""}},
          "no_deps": False, "python": "cpython-312", "platform": "linux-x86_64",
          "patch_set": {"code": "ab" * 32, "settings": {"state": "(role default)"}}}


def test_the_same_inputs_give_the_same_id_whatever_their_order():
    reordered = dict(reversed(list(INPUTS.items())))
    assert sglang_install_id(INPUTS) == sglang_install_id(reordered)
    assert sglang_install_id(INPUTS).startswith("0.5.9-") and len(sglang_install_id(INPUTS)) == len("0.5.9-") + 12


@pytest.mark.parametrize("change", [
    {"python": "cpython-311"},
    {"packages": {**INPUTS["packages"], "torch": "2.9.1+cu128"}},
    {"packages": {**INPUTS["packages"], "sgl-kernel": {"url": "https://x/k.whl", "sha256": "00" * 32}}},
    {"patch_set": {**INPUTS["patch_set"], "settings": {"state": "absent"}}},
    {"no_deps": True},
])
def test_any_change_in_what_defines_the_install_is_a_new_id(change):
    assert sglang_install_id({**INPUTS, **change}) != sglang_install_id(INPUTS)


def test_an_id_needs_the_sglang_version():
    with pytest.raises(AnsibleFilterError, match="names the sglang version"):
        sglang_install_id({"python": "cpython-312"})


REPORT = {"python": "cpython-312", "packages": {
    "sglang": {"version": "0.5.9", "url": "", "sha256": ""},
    "torch": {"version": "2.9.1+cu130", "url": "", "sha256": ""},
    "torchaudio": None,
    "sgl-kernel": {"version": "0.3.21", "url": "https://x/k.whl", "sha256": "cd" * 32}}}


def test_a_venv_that_holds_its_pins_matches():
    expected = {"python": "cpython-312", "packages": {"sglang": "0.5.9", "torch": "2.9.1+cu130", "torchaudio": "",
                                                      "sgl-kernel": {"url": "https://x/k.whl", "sha256": "cd" * 32}}}
    assert sglang_install_mismatches(REPORT, expected) == []


def test_each_difference_is_named():
    expected = {"python": "cpython-311", "packages": {"sglang": "0.5.10", "torchaudio": "2.9.1+cu130",
                                                      "sgl-kernel": {"url": "https://x/k2.whl", "sha256": ""}}}
    assert sglang_install_mismatches(REPORT, expected) == [
        "python is cpython-312, not cpython-311", "sgl-kernel came from https://x/k.whl, not https://x/k2.whl",
        "sglang is 0.5.9, not 0.5.10", "torchaudio is not installed"]


def test_the_patch_settings_in_the_id_are_every_setting_of_the_patch_role_that_changes_the_files():
    """A new switch in sglang_patches must reach the install id, or changing it would edit the venv in service."""
    defaults = yaml.safe_load((ROOT / "roles/sglang_patches/defaults/main.yml").read_text())
    settings = yaml.safe_load((ROOT / "roles/sglang/vars/main.yml").read_text())["__sglang_patch_settings"]
    operational = {"site_packages", "python", "backup", "local_facts"}  # where and how, not what is written
    assert {"sglang_patches_" + s for s in settings} == set(defaults) - {"sglang_patches_" + o for o in operational}


# tests/device/installs_real_host.yml on the H200 host (Ubuntu 24.04, its own torch 2.11 venv).
REAL = __import__("json").loads((ROOT / "tests/fixtures/hosts/h200-driver580/installs/installs.json").read_text())


def production_pins():
    pins = yaml.safe_load((ROOT / "roles/sglang/defaults/main.yml").read_text())
    label = "+" + pins["sglang_cuda_wheel_tag"]
    return {"python": "cpython-312", "packages": {
        "sglang": pins["sglang_version"], "flashinfer-python": pins["sglang_flashinfer_version"],
        "torch": pins["sglang_torch_version"] + label, "torchvision": pins["sglang_torchvision_version"] + label,
        "torchaudio": pins["sglang_torchaudio_version"] + label}}


def test_on_a_real_host_the_probe_reads_the_interpreter_that_names_the_wheel_tags():
    assert (REAL["system_python"]["python"], REAL["system_python"]["platform"]) == ("cpython-312", "linux-x86_64")
    assert REAL["system_python"]["packages"]["torch"]["version"] == "2.11.0"


def test_on_a_real_host_a_venv_that_is_not_the_pinned_stack_is_not_taken_over_as_an_install():
    """The host's own torch (2.11.0 from PyPI, no +cu130 label) is not the pinned cu130 build: a
    venv holding it would be kept as "legacy" and the pinned install built beside it."""
    problems = sglang_install_mismatches(REAL["system_python"], production_pins())
    assert "torch is 2.11.0, not 2.9.1+cu130" in problems and "sglang is not installed" in problems
    assert REAL["legacy_mismatches"] and REAL["adopted"] is True
    assert REAL["switched"] == ["legacy", ""]
    # Through the current link the adopted venv's python runs, its site-packages under that link.
    assert REAL["through_current"]["site_packages"].endswith("/current/lib/python3.12/site-packages")
    assert REAL["venv_with_pip"]["rc"] == 0
