"""labctl's wheelhouse: what the lab nodes install, the quality gate's eval among it, and an sgl-kernel stand-in
per server mode that only an install can carry, each one a wheel pip takes and the lab server obeys."""
import importlib.util
import sys
import zipfile

import pytest
import yaml
from packaging.utils import parse_wheel_filename
from packaging.version import Version

import labctl


@pytest.fixture
def wheelhouse(tmp_path, monkeypatch):
    """labctl.fill_wheelhouse into a temporary wheelhouse, with pip's downloads recorded, not run."""
    downloads = []

    def pip_download(dest, *requirements, deps=False, options=(), check=True):
        dest.mkdir(parents=True, exist_ok=True)  # as pip download makes it
        downloads.append((requirements, deps))
        return True

    monkeypatch.setattr(labctl, "WHEELHOUSE", tmp_path / "wheelhouse")
    monkeypatch.setattr(labctl, "pip_download", pip_download)
    monkeypatch.setattr(labctl, "fetch_wheel", lambda project, version, dest: dest / f"{project}-{version}.whl")
    monkeypatch.setattr(labctl, "fetch_sdist", lambda project, version, dest: dest / f"{project}-{version}.tar.gz")
    return tmp_path / "wheelhouse", downloads


def test_the_eval_s_packages_are_downloaded_with_their_dependencies_at_the_quality_role_s_pins(wheelhouse):
    folder, downloads = wheelhouse
    pins = yaml.safe_load((labctl.ROOT / "roles/sglang_quality/defaults/main.yml").read_text())
    assert any(p.startswith("sgl-eval==") for p in pins["sglang_quality_packages"])
    labctl.fill_wheelhouse()
    [(requirements, deps)] = downloads
    assert deps and set(pins["sglang_quality_packages"]) <= set(requirements)
    assert (folder / ".requirements").read_text().split("\n") == list(requirements)
    labctl.fill_wheelhouse()  # the same list stamped: nothing downloaded again
    assert len(downloads) == 1


def test_a_wheelhouse_stamped_before_the_eval_was_added_downloads_again(wheelhouse):
    folder, downloads = wheelhouse
    labctl.fill_wheelhouse()
    stamped = (folder / ".requirements").read_text().split("\n")
    (folder / ".requirements").write_text("\n".join(r for r in stamped if not r.startswith("sgl-eval")))
    labctl.fill_wheelhouse()
    assert len(downloads) == 2 and any(r.startswith("sgl-eval==") for r in downloads[1][0])


def test_each_server_mode_build_is_a_wheel_pip_takes_and_the_lab_server_obeys(wheelhouse, lab_server, tmp_path,
                                                                             monkeypatch):
    folder, _ = wheelhouse
    built = [path for path in labctl.fill_wheelhouse() if path.name.startswith("sgl_kernel-")]
    pins = yaml.safe_load((labctl.ROOT / "roles/sglang/defaults/main.yml").read_text())
    tag = yaml.safe_load((labctl.ROOT / "inventory/lab/group_vars/all.yml").read_text())["sglang_cuda_wheel_tag"]
    assert set(labctl.KERNEL_MODES) == {"crash", "degraded", "slow", "low-accept"}
    assert set(labctl.KERNEL_MODES) < set(lab_server.MODES)
    # The molecule upgrade tests' crashing build keeps its name.
    assert folder / f"sgl_kernel-{pins['sglang_sgl_kernel_version']}+{tag}.crash-cp310-abi3-manylinux2014_x86_64.whl" \
        in built
    modes = {}
    for wheel in built:
        name, version, _build, _tags = parse_wheel_filename(wheel.name)  # pip's own reading of the name
        assert (name, version.public) == ("sgl-kernel", pins["sglang_sgl_kernel_version"])
        site = tmp_path / "site" / wheel.name
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        spec = importlib.util.spec_from_file_location("sgl_kernel", site / "sgl_kernel/__init__.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setitem(sys.modules, "sgl_kernel", module)
        modes[version.local] = lab_server.installed_mode("healthy")
    local = lambda label: Version("0+" + label).local  # noqa: E731  (as pip normalises it: low_accept -> low.accept)
    assert modes == {tag: "healthy", **{local(labctl.mode_wheel_tag(tag, mode)): mode for mode in labctl.KERNEL_MODES}}
    assert labctl.mode_wheel_tag(tag, "low-accept") == tag + ".low_accept"
