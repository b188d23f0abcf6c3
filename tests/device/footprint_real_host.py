#!/usr/bin/env python3
"""host_footprint on a real host (Ubuntu 24.04, its dpkg and Python 3.12), and under a real systemd 252.

    python3 tests/device/footprint_real_host.py --carry .devcarry --out OUT_DIR

Run as root from the repository root on a disposable GPU host. CARRY is the units harness's
(tests/device/units_under_systemd/harness.py): debs/ with Debian 12's systemd 252 and the libraries it
needs, wheels/ with ansible-core 2.19 and resolvelib.

1. Captures the host's own dpkg-query answer for an installed, a maybe-installed and a missing package.
2. Runs the module (plugins/modules/host_footprint.py, through AnsibleModule as Ansible runs it) outside
   any systemd: the host has none as PID 1, and the module must say so, not fail.
3. Builds what a stage would leave: a directory, a file with its mode, a key file known by its sha256, a
   real venv with resolvelib installed by that venv's own pip from the carried wheel; boots systemd 252
   as PID 1 of a new PID and mount namespace, with one unit enabled and running and one enabled and
   stopped.
4. Inside that namespace runs the module twice: over what is as asked (it must say settled), and over
   the same with every kind of difference (a changed file, a changed key, a wrong mode, a missing user,
   a missing package, another version in the venv, a stopped unit, a missing unit), and captures
   systemctl's own answer for the three units.
5. Writes OUT_DIR/footprint.json and the raw captures (dpkg-query.txt, systemctl-show.txt).
"""
import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/device/units_under_systemd"))
import harness  # noqa: E402  (the units harness: its sh, systemd install and manager)

run = harness.sh

UNITS = ["fp-running.service", "fp-stopped.service", "fp-missing.service"]
PACKAGES = ["dpkg", "python3-venv", "no-such-package-sglang"]
TREE = Path("/etc/sglang-footprint-probe")
VENV = Path("/opt/sglang-footprint-probe/venv")
KEY = "real-host-footprint-key-91b3\n"


def module_run(args, site, nsenter=()):
    """The real module, as Ansible runs it on a host: its JSON args through AnsibleModule, its JSON out."""
    code = ("import sys, json\n"
            "sys.path.insert(0, %r)\n"
            "import ansible.module_utils\n"
            "ansible.module_utils.__path__.append(%r)\n"
            "from ansible.module_utils.testing import patch_module_args\n"
            "import importlib.util\n"
            "spec = importlib.util.spec_from_file_location('host_footprint', %r)\n"
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
            "with patch_module_args(json.loads(sys.argv[1])):\n"
            "    mod.main()\n" % (str(site), str(ROOT / "plugins/module_utils"),
                                  str(ROOT / "plugins/modules/host_footprint.py")))
    done = run(list(nsenter) + [sys.executable, "-c", code, json.dumps(args)])
    try:
        return json.loads(done["out"])
    except ValueError:
        return {"module_failed": done}


def lay_out(carry):
    """What a stage would leave on the host, built the way the stage builds it."""
    TREE.mkdir(parents=True, exist_ok=True)
    TREE.chmod(0o755)
    (TREE / "unit.conf").write_text("[Service]\nType=exec\n")
    (TREE / "unit.conf").chmod(0o644)
    (TREE / "probe.key").write_text(KEY)
    (TREE / "probe.key").chmod(0o640)
    steps = {"venv": run([sys.executable, "-m", "venv", str(VENV)])}
    wheel = sorted((carry / "wheels").glob("resolvelib-*.whl"))[0]
    steps["pip"] = run([str(VENV / "bin/python"), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)])
    steps["resolvelib_version"] = wheel.name.split("-")[1]
    return steps


def footprints(version):
    wanted = {
        "files": [{"path": str(TREE), "state": "directory", "mode": "0755"},
                  {"path": str(TREE / "unit.conf"), "content": "[Service]\nType=exec\n", "mode": "0644"},
                  {"path": str(TREE / "probe.key"), "sha256": hashlib.sha256(KEY.encode()).hexdigest(),
                   "mode": "0640"},
                  {"path": str(TREE / "old.key"), "state": "absent"}],
        "users": [{"name": "root", "home": "/root"}],
        "packages": ["dpkg"],
        "venv_packages": [{"venv": str(VENV), "name": "resolvelib", "version": version}],
        "units": ["fp-running.service"],
    }
    off = {
        "files": [{"path": str(TREE), "state": "directory", "mode": "0700"},
                  {"path": str(TREE / "unit.conf"), "content": "[Service]\nType=simple\n", "mode": "0644"},
                  {"path": str(TREE / "probe.key"), "sha256": hashlib.sha256(b"another-key\n").hexdigest(),
                   "mode": "0640"}],
        "users": [{"name": "no-such-user-sglang"}],
        "packages": ["dpkg", "no-such-package-sglang"],
        "venv_packages": [{"venv": str(VENV), "name": "resolvelib", "version": "0.0.1"}],
        "units": UNITS,
    }
    return wanted, off


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carry", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    record = {"os_release": Path("/etc/os-release").read_text(), "python": sys.version}
    work = Path(tempfile.mkdtemp(prefix="footprint-"))
    site = work / "site"
    record["ansible_wheels"] = harness.unpack_wheels(args.carry.resolve(), site)

    dpkg = run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", "--"] + PACKAGES)
    (args.out / "dpkg-query.txt").write_text(dpkg["out"])
    record["dpkg_query"] = {"rc": dpkg["rc"], "err": dpkg["err"], "packages": PACKAGES}

    record["layout"] = lay_out(args.carry.resolve())
    wanted, off = footprints(record["layout"]["resolvelib_version"])
    record["without_systemd"] = module_run({"units": ["fp-running.service"]}, site)

    record["systemd_install"] = harness.install_systemd(args.carry.resolve(), work)
    harness.write_minimal_target("footprint probe")
    for name in ("fp-running.service", "fp-stopped.service"):
        (harness.UNIT_DIR / name).write_text("[Service]\nExecStart=/bin/sleep 600\n"
                                             "[Install]\nWantedBy=multi-user.target\n")
    manager = harness.Manager(work / "systemd.log", "console")
    try:
        record["systemd_pid"] = manager.find()
        record["system_state"] = manager.wait_running()
        record["enable"] = manager.ctl("enable", "fp-running.service", "fp-stopped.service")
        record["start"] = manager.ctl("start", "fp-running.service")
        time.sleep(1)
        nsenter = ["nsenter", "-t", str(manager.pid), "-m", "-p", "--"]
        show = manager.ctl("show", "--property=Id,ActiveState,UnitFileState", "--", *UNITS)
        (args.out / "systemctl-show.txt").write_text(show["out"])
        record["systemctl_version"] = manager.ctl("--version")["out"].splitlines()[:1]
        record["as_asked"] = {"args": wanted, "result": module_run(wanted, site, nsenter)}
        record["off"] = {"args": off, "result": module_run(off, site, nsenter)}
    finally:
        manager.stop()
    (args.out / "footprint.json").write_text(json.dumps(record, indent=2, default=str))
    print(json.dumps({k: record[k] for k in ("without_systemd", "system_state")}, default=str))
    print(json.dumps(record["as_asked"]["result"]), json.dumps(record["off"]["result"]), sep="\n")


if __name__ == "__main__":
    main()
