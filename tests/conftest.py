import json
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# A real driver-580 host (H200, Ubuntu 24.04): /proc/devices and its NVIDIA/RDMA device nodes.
H200 = FIXTURES / "hosts/h200-driver580"
for sub in ("plugins/modules", "plugins/filter", "files/lab", "tools"):
    sys.path.insert(0, str(ROOT / sub))


def _register_module_utils():
    """Modules import ours as ansible.module_utils.<name>, as they do on a managed host."""
    import ansible.module_utils
    ansible.module_utils.__path__.append(str(ROOT / "plugins/module_utils"))


_register_module_utils()


import re
import shutil
import subprocess
import zipfile

import pytest

def settings_today(captured: dict) -> dict:
    """A capture's extra vars under today's names: a setting a role had when a real host was captured and
    the fleet layer holds now is replayed under its new name (the fleet checks' own table of moves, which
    refuses the old one), its value the host's, unchanged."""
    from fleet_layer import MOVED
    return {MOVED.get(name, name): value for name, value in captured.items()}


UPSTREAM = ROOT / ".cache/upstream"
PINNED = {"sglang": "0.5.9", "flashinfer-python": "0.6.3"}


def _extracted(project, version):
    """The real upstream wheel, extracted once per session under .cache/upstream."""
    import labctl
    target = UPSTREAM / f"{project}-{version}"
    if not (target / ".complete").exists():
        wheel = labctl.fetch_wheel(project, version, UPSTREAM)
        shutil.rmtree(target, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        (target / ".complete").touch()
    return target


def load_collector():
    """The GPU textfile collector (files/monitoring/nvidia_smi_textfile.py), a fresh module per call: a
    script, not on any import path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("nvidia_smi_textfile", ROOT / "files/monitoring/nvidia_smi_textfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def labels_dict_keys(path, marker):
    """The keys of the `labels = {...}` literal holding `marker`, as sglang's source builds it."""
    import ast
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                isinstance(t, ast.Name) and t.id == "labels" for t in node.targets):
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
            if marker in keys:
                return keys
    raise AssertionError(f"no labels dict with {marker} in {path}")


def exposure(root, unit):
    """systemd-analyze security's overall exposure of a unit under root, as systemd 252 scores it offline."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian's systemd package)")
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--root", str(root), unit],
                          capture_output=True, text=True)
    found = re.search(r"Overall exposure level for \S+: ([\d.]+)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


@pytest.fixture
def site_packages(tmp_path):
    """make(sglang_version=...) -> a fresh site-packages holding real sglang and flashinfer sources."""
    def make(sglang_version=PINNED["sglang"]):
        dest = tmp_path / f"site-packages-{sglang_version}"
        for project, version in (("sglang", sglang_version), ("flashinfer-python", PINNED["flashinfer-python"])):
            shutil.copytree(_extracted(project, version), dest, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".complete"))
        return dest
    return make


@pytest.fixture(scope="module")
def lab_server():
    """The lab's sglang server fixture (files/lab/sglang_lab_server.py), loaded as a module: a script, not
    on any import path; it imports the flag lint the way the lab node installs it."""
    import importlib
    import importlib.util
    sys.modules.setdefault("sglang_fleet_lab_args", importlib.import_module("ansible.module_utils.sglang_args"))
    spec = importlib.util.spec_from_file_location("sglang_lab_server", ROOT / "files/lab/sglang_lab_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def upstream_sglang():
    """The real sglang wheel at the pinned version, extracted (read only)."""
    return _extracted("sglang", PINNED["sglang"])


def captured_nodes():
    """The H200 host's device nodes from `stat` (dev-nodes.txt: path, type, major:minor, mode, owner)."""
    nodes = []
    for line in (H200 / "dev-nodes.txt").read_text().splitlines():
        path, rest = line.split(" ", 1)
        major, minor = rest.split()[-3].split(":")
        nodes.append((path, "c" if "character" in rest else "b", int(major), int(minor)))
    return nodes


def inserted(entry, block):
    """The target file with `block` (lines ending in a newline) put where blockinfile puts it."""
    from sglang_patch_probe import find_anchor
    lines = open(entry["path"]).read().splitlines(True)
    anchor = entry["insertafter"] or entry["insertbefore"]
    at = find_anchor("".join(lines), anchor)[0] - (0 if entry["insertafter"] else 1)
    return "".join(lines[:at]) + block + "".join(lines[at:])


class InstalledCollection:
    """The collection as a user gets it: tools/build_collection.py, `ansible-galaxy collection build`,
    `ansible-galaxy collection install -p` into a temporary path. env runs ansible from it alone: an
    ansible.cfg that is the repository's less its roles, library, module_utils and filter paths."""

    def __init__(self, base):
        import configparser
        import subprocess
        import build_collection
        self.meta = build_collection.galaxy()
        self.fqcn = "%(namespace)s.%(name)s" % self.meta
        self.built = build_collection.build(base / "build")
        self.tarball = build_collection.tarball(self.built, base / "dist")
        self.path = base / "installed"
        subprocess.run([str(Path(sys.executable).with_name("ansible-galaxy")), "collection", "install", "--no-deps",
                        "-p", str(self.path), str(self.tarball)], check=True, capture_output=True, text=True)
        self.root = self.path / "ansible_collections" / self.meta["namespace"] / self.meta["name"]
        config = configparser.ConfigParser(interpolation=None)
        config.read(ROOT / "ansible.cfg")
        for key in ("roles_path", "library", "module_utils", "filter_plugins"):
            config.remove_option("defaults", key)
        config.set("defaults", "collections_path", str(self.path))
        config.set("defaults", "fact_caching_connection", str(base / "facts"))
        self.config = base / "ansible.cfg"
        with open(self.config, "w") as out:
            config.write(out)
        # Over anything the caller's environment points at the repository: an empty folder.
        empty = base / "empty"
        empty.mkdir()
        self.env = {"ANSIBLE_CONFIG": str(self.config), "ANSIBLE_COLLECTIONS_PATH": str(self.path),
                    **{key: str(empty) for key in ("ANSIBLE_ROLES_PATH", "ANSIBLE_LIBRARY", "ANSIBLE_MODULE_UTILS",
                                                   "ANSIBLE_FILTER_PLUGINS")}}


@pytest.fixture(scope="session")
def installed_collection(tmp_path_factory):
    return InstalledCollection(tmp_path_factory.mktemp("collection"))


class JsonHandler(BaseHTTPRequestHandler):
    """A fake HTTP server's handler for the tests: quiet, and replies with a JSON body."""

    def log_message(self, *args):
        pass

    def reply(self, code, payload):
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
