"""The sglang role's install plan against the real sglang 0.5.9 wheel's Requires-Dist."""
import json
import sys
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import ROOT
from fleet import run_playbook

# Packages that have CUDA-specific builds: each must come as the cu130 build, never PyPI's default.
CUDA_BUILDS = {"torch", "torchvision", "torchaudio", "sgl-kernel"}
# An exact pin of sglang's that no CUDA 13 build satisfies: cuda-python 13 exists, but sglang 0.5.9
# pins ==12.9, so pip takes 12.9 (driver-API bindings; they run on the 580 driver).
CUDA12_PINNED_BY_SGLANG = {"cuda-python": "12.9"}
# A Linux x86-64 host with Ubuntu 24.04's Python.
HOST = dict(default_environment(), sys_platform="linux", platform_machine="x86_64", python_version="3.12",
            python_full_version="3.12.3", implementation_name="cpython", platform_system="Linux")


def plan(tmp_path, monkeypatch, **extravars):
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gpu-node-01": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    run = run_playbook(ROOT / "tests/playbooks/render_install_plan.yml", inventory,
                       extravars={"render_dir": str(tmp_path), **extravars})
    assert run.rc == 0, run.hosts
    raw = json.loads((tmp_path / "plan.json").read_text())
    versions = {Requirement(r).name: Version(str(next(iter(Requirement(r).specifier)).version)) for r in raw["torch"]}
    wheel = PurePosixPath(unquote(urlparse(raw["sgl_kernel_url"]).path)).name
    versions["sgl-kernel"] = Version(wheel.split("-")[1])
    versions["sglang"], versions["flashinfer-python"] = Version(raw["sglang"]), Version(raw["flashinfer-python"])
    return versions, raw


def sglang_requirements(upstream_sglang):
    meta = next(upstream_sglang.glob("sglang-*.dist-info")) / "METADATA"
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in meta.read_text().splitlines()
            if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(dict(HOST, extra=""))]


def canonical(name):
    return name.lower().replace("_", "-")


def test_every_pin_of_sglang_0_5_9_is_met_with_a_cuda_13_build_where_one_exists(tmp_path, monkeypatch,
                                                                             upstream_sglang):
    versions, raw = plan(tmp_path, monkeypatch)
    requirements = {canonical(r.name): r for r in sglang_requirements(upstream_sglang)}
    # What sglang itself needs of the CUDA-built packages is all in the plan, as +cu130 builds.
    assert CUDA_BUILDS <= set(requirements)
    for name in CUDA_BUILDS:
        assert versions[name].local == "cu130", (name, versions[name])
        assert requirements[name].specifier.contains(versions[name], prereleases=True), (name, versions[name])
    assert raw["torch"] == ["torch==2.9.1+cu130", "torchvision==0.24.1+cu130", "torchaudio==2.9.1+cu130"]
    # The pinned sha256 rides as the fragment pip checks (sglang_sgl_kernel_wheel_sha256 is required).
    assert raw["sgl_kernel_url"] == ("https://github.com/sgl-project/whl/releases/download/v0.3.21/"
                                     "sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_x86_64.whl"
                                     "#sha256=4be1313f82808f0fb6df8107e79f6b6cea07a4aa2b20139e0342eafe31eb28bd")
    # Every other exact pin is either in the plan at a version it allows, or left to pip (PyPI has
    # one build of it), or the one CUDA 12 pin sglang forces.
    for name, req in requirements.items():
        if not any(spec.operator == "==" for spec in req.specifier):
            continue
        if name in versions:
            assert req.specifier.contains(versions[name], prereleases=True), (name, str(req.specifier))
        elif name in CUDA12_PINNED_BY_SGLANG:
            assert str(req.specifier) == "==" + CUDA12_PINNED_BY_SGLANG[name]
        else:
            assert name not in CUDA_BUILDS
    # flashinfer's pins are sglang's own.
    assert requirements["flashinfer-python"].specifier.contains(versions["flashinfer-python"])


def test_the_sha256_becomes_a_fragment_pip_checks(tmp_path, monkeypatch):
    _, raw = plan(tmp_path, monkeypatch, sglang_sgl_kernel_wheel_sha256="ab" * 32)
    assert raw["sgl_kernel_url"].endswith(".whl#sha256=" + "ab" * 32)


def test_the_lab_installs_torch_alone_and_a_stand_in_kernel_by_url(tmp_path, monkeypatch):
    lab = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    keys = ("sglang_torch_version", "sglang_cuda_wheel_tag", "sglang_torchvision_version",
            "sglang_torchaudio_version", "sglang_sgl_kernel_wheel_url", "sglang_sgl_kernel_wheel_sha256")
    _, raw = plan(tmp_path, monkeypatch, **{k: lab[k] for k in keys})
    assert raw["torch"] == ["torch==2.13.0+cpu"]
    assert raw["sgl_kernel_url"] == lab["sglang_sgl_kernel_wheel_url"] + "#sha256=" + lab["sglang_sgl_kernel_wheel_sha256"]


def test_the_lab_kernel_wheel_is_rebuilt_byte_for_byte_with_its_pinned_checksum(tmp_path):
    import hashlib
    import labctl
    lab = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    wheel = labctl.build_sgl_kernel_wheel(tmp_path, "0.3.21", lab["sglang_cuda_wheel_tag"])
    assert wheel.name == PurePosixPath(lab["sglang_sgl_kernel_wheel_url"]).name
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == lab["sglang_sgl_kernel_wheel_sha256"]
