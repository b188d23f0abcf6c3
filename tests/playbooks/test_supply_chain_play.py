"""What the fleet installs from outside is pinned, and refused before any change when it is not: an empty
sgl-kernel sha256 or a prebuilt flash-attn wheel without one fails the fleet checks naming the setting; a
cached flash-attn wheel whose bytes changed since its key.json recorded them fails before it reaches a host."""
import hashlib
import json
import sys

import pytest
import yaml

import fleet
from conftest import ROOT

FLEET_PLAY = [{"name": "The fleet layer's checks", "hosts": "gpu_nodes", "gather_facts": False, "roles": ["fleet"]}]


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    return path


def run(tmp_path, playbook, inventory, *extra_args, **kwargs):
    return fleet.run_playbook(playbook, inventory, extra_args=list(extra_args),
                              extravars={"fleet_state_dir": str(tmp_path / "state")},
                              env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")}, **kwargs)


@pytest.mark.parametrize("extra,says", [
    (["-e", "sglang_sgl_kernel_wheel_sha256="], "node: sglang_sgl_kernel_wheel_sha256 is empty"),
    (["-e", "flash_attn_prebuilt_wheel=https://wheels.example/flash_attn-2.8.3-cp312-linux_x86_64.whl"],
     "node: flash_attn_prebuilt_wheel_sha256 is empty"),
    (["-e", "cuda_toolkit_repo_key_fingerprint=3bf863cc"], "node: cuda_toolkit_repo_key_fingerprint is '3bf863cc'"),
])
def test_an_unpinned_download_fails_the_fleet_checks_naming_the_setting(tmp_path, inventory, extra, says):
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(FLEET_PLAY))
    refused = run(tmp_path, tmp_path / "fleet.yml", inventory, *extra)
    assert refused.rc != 0 and refused.changed == 0
    (failure,) = refused.hosts["node"].failures
    assert failure["task"] == "The fleet settings of this host can work together"
    assert failure["msg"].startswith(says), failure["msg"]
    assert run(tmp_path, tmp_path / "fleet.yml", inventory).rc == 0


def install_play(tmp_path, cache):
    return [{"name": "flash-attn's install step", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "The install step runs", "ansible.builtin.include_role": {"name": "flash_attn", "tasks_from": "install"},
         "vars": {"flash_attn_cache_dir": str(cache), "flash_attn_work_dir": str(tmp_path / "work"),
                  "flash_attn_venv_dir": str(tmp_path / "venv"), "fleet_current_venv": str(tmp_path / "venv"),
                  "fleet_cuda_home": "/usr/local/cuda",
                  "__flash_attn_plan": {"id": "k1", "needs": True}, "__flash_attn_builder": "node",
                  "__flash_attn_slice": {"sliced": False}}}]}]


def test_a_cached_wheel_whose_bytes_changed_fails_before_it_reaches_the_host(tmp_path, inventory):
    cache = tmp_path / "cache"
    (cache / "k1").mkdir(parents=True)
    wheel = cache / "k1" / "flash_attn-2.8.3+build.k1-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"the wheel the build made")
    recorded = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (cache / "k1" / "key.json").write_text(json.dumps({"id": "k1", "wheel": wheel.name, "sha256": recorded}))
    (tmp_path / "install.yml").write_text(yaml.safe_dump(install_play(tmp_path, cache)))

    # As recorded: checked, and the install goes on (announced under --check).
    passed = run(tmp_path, tmp_path / "install.yml", inventory, check=True)
    assert passed.rc == 0, passed.failure_summary

    wheel.write_bytes(b"the wheel someone put there")
    refused = run(tmp_path, tmp_path / "install.yml", inventory)
    assert refused.rc != 0 and refused.changed == 0
    (failure,) = refused.hosts["node"].failures
    assert failure["task"] == "The wheel's bytes are the ones recorded"
    assert failure["msg"] == "%s has sha256 %s, but %s records %s: its bytes changed since they were recorded; " \
        "it is not installed" % (wheel, hashlib.sha256(wheel.read_bytes()).hexdigest(), cache / "k1" / "key.json",
                                 recorded)
    assert not (tmp_path / "work").exists()


KEYS = ROOT / "tests/fixtures/apt-keys"


@pytest.mark.parametrize("given", ["path", "block"])
def test_a_cuda_apt_key_with_another_fingerprint_fails_before_apt_trusts_it(tmp_path, inventory, given):
    key = KEYS / "archive-key.asc"
    mine = next(line.split(":")[9] for line in (KEYS / "archive-key.colons").read_text().splitlines()
                if line.startswith("fpr:"))
    keyring = tmp_path / "keyrings/cuda.asc"
    play = [{"name": "The CUDA key step", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "The key step runs", "ansible.builtin.include_role": {"name": "cuda_toolkit", "tasks_from": "key"}}]}]
    (tmp_path / "key.yml").write_text(yaml.safe_dump(play))
    source = str(key) if given == "path" else key.read_text()
    settings = ["-e", json.dumps({"cuda_toolkit_repo_key": source, "__cuda_toolkit_keyring": str(keyring)})]
    refused = run(tmp_path, tmp_path / "key.yml", inventory, *settings)
    assert refused.rc != 0 and refused.changed == 0 and not keyring.parent.exists()
    (failure,) = refused.hosts["node"].failures
    assert failure["task"] == "The repository's key has the pinned fingerprint"
    assert ("has fingerprint %s, but cuda_toolkit_repo_key_fingerprint pins EB693B3035CD5710E231E123A4B469963BF863CC"
            % mine) in failure["msg"]
    trusted = run(tmp_path, tmp_path / "key.yml", inventory, *settings, "-e", "cuda_toolkit_repo_key_fingerprint=" + mine)
    assert trusted.rc == 0, trusted.failure_summary
    assert keyring.read_text() == key.read_text()
