"""execution-environment.yml: `ansible-builder create` makes a build context holding the collection built
from this tree and the controller toolchain as requirements.txt pins it. No image is built (its base image
cannot be pulled here); the context is what `ansible-builder build` or podman would build from."""
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

import build_collection
from conftest import ROOT


def pins(path):
    """name (lowercase) -> version, of every name==version line."""
    found = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, "%s: %r is not pinned" % (path, line)
            found[name.lower()] = version
    return found


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """The EE file and its inputs, copied as they are, with a freshly built tarball where it expects one."""
    base = tmp_path_factory.mktemp("ee")
    shutil.copy(ROOT / "execution-environment.yml", base)
    shutil.copytree(ROOT / "collection/ee", base / "collection/ee")
    tree = build_collection.build(base / "build")
    build_collection.tarball(tree, base / ".cache/collection")
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-builder")), "create", "-v", "2",
                          "-f", str(base / "execution-environment.yml"), "-c", str(base / "context")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "No matches" not in run.stdout + run.stderr and "does not exist" not in run.stdout + run.stderr, run.stdout
    return base / "context"


def test_the_context_holds_the_collection_built_from_this_tree(context):
    meta = build_collection.galaxy()
    galaxy = yaml.safe_load((context / "_build/requirements.yml").read_text())
    assert galaxy == {"collections": [{"name": "collections/%(namespace)s-%(name)s-%(version)s.tar.gz" % meta,
                                       "type": "file"}]}
    tarball = context / "_build" / galaxy["collections"][0]["name"]
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("MANIFEST.json"))["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("sglang_fleet", "fleet", meta["version"])
    modules = {"plugins/modules/%s" % p.name for p in (ROOT / "plugins/modules").glob("*.py")}
    assert modules <= names and "playbooks/site.yml" in names and "meta/runtime.yml" in names
    # The galaxy stage installs it from there, and takes community.general from the pinned `ansible` package.
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--no-deps"' in containerfile
    assert "COPY _build /build\nWORKDIR /build\n" in containerfile


def test_the_context_pins_what_bin_setup_pins(context):
    ours = pins(ROOT / "requirements.txt")
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==%s ansible-runner==%s"' % (
        ours["ansible-core"], ours["ansible-runner"]) in containerfile
    python = pins(context / "_build/requirements.txt")
    assert {"ansible", "jsonschema", "matplotlib", "pyyaml", "jinja2"} <= set(python)
    assert {name: version for name, version in python.items() if ours.get(name) != version} == {}
    assert 'ARG PYCMD="/usr/bin/python3.11"' in containerfile  # the Python bin/setup's toolchain is for
    assert "openssh-clients [platform:rpm]" in (context / "_build/bindep.txt").read_text()
