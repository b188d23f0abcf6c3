"""`ansible-playbook site.yml --tags patches -e sglang_site_packages=DIR` over the real upstream
sources, on this machine (local connection), read through ansible-runner's per-host results."""
import ast
import hashlib
import sys

import pytest
import yaml

from conftest import ROOT
from fleet import run_playbook

TARGETS = ["sglang/srt/models/kimi_k25.py",
           "sglang/srt/distributed/device_communicators/all_reduce_utils.py",
           "sglang/srt/distributed/device_communicators/torch_symm_mem.py",
           "sglang/srt/layers/communicator.py",
           "flashinfer/jit/comm.py",
           "sglang/srt/server_args.py",
           "sglang/srt/models/deepseek_v2.py",
           "sglang/srt/entrypoints/http_server.py"]


@pytest.fixture
def inventory(tmp_path, monkeypatch):
    # A fact cache of its own: the run must not lean on facts another run left behind.
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    return path


def patch(inventory, site, check=False, **extra):
    extravars = {"sglang_site_packages": str(site), "sglang_patches_local_facts": False,
                 "sglang_patches_python": sys.executable, **extra}
    run = run_playbook(ROOT / "site.yml", inventory, tags="patches", check=check, diff=check, extravars=extravars)
    return run, run.hosts["localhost"]


def tree_digest(site):
    """Every file under site and its hash: proves what was (not) touched."""
    return {str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(site.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def methods_of(path, cls):
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return [n.name for n in node.body if isinstance(n, ast.FunctionDef)]


def test_patch_verify_rerun_check_and_revert(inventory, site_packages):
    site = site_packages()
    pristine = tree_digest(site)

    run, host = patch(inventory, site, check=True)
    assert run.rc == 0 and host.changed == 1 and tree_digest(site) == pristine  # check mode writes nothing

    run, host = patch(inventory, site)
    assert run.rc == 0, host.failures
    assert host.facts["sglang_patches_report"]["sglang_version"] == "0.5.9"
    assert {p["status"] for p in host.facts["sglang_patches_report"]["patches"]} == {"applied"}
    after = tree_digest(site)
    changed = {f for f in after if after[f] != pristine.get(f)}
    backups = {f for f in changed if f.endswith("~")}
    assert changed - backups == set(TARGETS)                  # nothing else touched...
    assert len(backups) == len(TARGETS)                       # ...but a backup of each target

    kimi = site / TARGETS[0]
    methods = methods_of(kimi, "KimiK25ForConditionalGeneration")
    for name in ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"):
        assert methods.count(name) == 1
    assert kimi.read_text().rstrip().endswith("EntryClass = [KimiK25ForConditionalGeneration]")
    for target in TARGETS:
        compile((site / target).read_text(), target, "exec")
    assert "12: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB}," in (site / TARGETS[1]).read_text()
    assert "supported_major_versions=[9, 10, 12]" in (site / TARGETS[4]).read_text()
    assert "hidden_states = tensor_model_parallel_all_reduce(hidden_states)" in (site / TARGETS[6]).read_text()
    assert "server_info = _sglang_fleet_without_keys(server_info)" in (site / TARGETS[7]).read_text()

    run, host = patch(inventory, site)
    assert run.rc == 0 and host.changed == 0                  # idempotent
    run, host = patch(inventory, site, check=True)
    assert run.rc == 0 and host.changed == 0                  # and check mode agrees

    run, host = patch(inventory, site, sglang_patches_state="absent")
    assert run.rc == 0 and host.changed == 1
    reverted = tree_digest(site)
    assert {f: reverted[f] for f in pristine} == pristine    # byte-identical to upstream


def test_switching_a_patch_off_reverts_it(inventory, site_packages):
    site = site_packages()
    original = (site / TARGETS[0]).read_bytes()
    assert patch(inventory, site)[0].rc == 0
    run, host = patch(inventory, site, sglang_patches_kimi_k25_eagle3=False)
    assert run.rc == 0 and host.changed == 1
    assert (site / TARGETS[0]).read_bytes() == original


def test_a_release_with_the_delegation_keeps_its_own(inventory, site_packages):
    site = site_packages("0.5.10")
    kimi = site / TARGETS[0]
    before = kimi.read_bytes()
    run, host = patch(inventory, site)
    assert run.rc == 0, host.failures
    statuses = {p["name"]: p["status"] for p in host.facts["sglang_patches_report"]["patches"]}
    assert statuses["kimi_k25_eagle3"] == "upstream"
    assert kimi.read_bytes() == before
    assert methods_of(kimi, "KimiK25ForConditionalGeneration").count("get_embed_and_head") == 1


def test_drift_fails_cleanly_and_writes_nothing(inventory, site_packages):
    site = site_packages()
    comm = site / TARGETS[3]
    comm.write_text(comm.read_text().replace("_is_sm100_supported = _is_cuda and is_sm100_supported()",
                                             "_is_sm100_supported = is_sm100_supported() and _is_cuda"))
    pristine = tree_digest(site)
    run, host = patch(inventory, site)
    assert run.rc != 0 and host.failed == 1 and host.changed == 0
    message = host.failures[0]["msg"]
    assert message.startswith("sglang 0.5.9, flashinfer 0.6.3: nothing was written: sm120_allreduce_fusion_gate: "
                              "anchor /^_is_sm100_supported = _is_cuda and is_sm100_supported\\(\\)$/ matches 0 lines")
    assert str(comm) in message
    assert tree_digest(site) == pristine


def test_a_release_without_kimi(inventory, site_packages):
    site = site_packages()
    (site / TARGETS[0]).unlink()
    run, host = patch(inventory, site)
    assert run.rc != 0 and "KimiK25 is not in sglang 0.5.9" in host.failures[0]["msg"]
    run, host = patch(inventory, site, sglang_patches_kimi_k25_eagle3=False)
    assert run.rc == 0 and host.changed == 1


@pytest.mark.parametrize("extra,expected", [
    ({"sglang_patches_state": "reverted"}, "sglang_patches_state"),
    ({"sglang_patches_multimem_world_sizes": "eight"}, "sglang_patches_multimem_world_sizes"),
])
def test_bad_variables_fail_before_any_change(inventory, site_packages, extra, expected):
    site = site_packages()
    pristine = tree_digest(site)
    run, host = patch(inventory, site, **extra)
    assert run.rc != 0 and host.changed == 0 and expected in host.failures[0]["msg"]
    assert tree_digest(site) == pristine


def test_missing_site_packages_is_named(inventory, tmp_path):
    run, host = patch(inventory, tmp_path / "nowhere")
    assert run.rc != 0
    assert host.failures[0]["msg"] == ("no sglang package under %s: is it the site-packages of the sglang venv?"
                                       % (tmp_path / "nowhere"))
