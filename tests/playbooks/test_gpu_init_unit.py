"""The gpu-init unit the server Requires=, rendered from the role and run as systemd runs a oneshot's
ExecStart= lines (in order, the first failure fails the unit), against /dev trees made from a real host's
capture: the H200 host (tests/fixtures/hosts/h200-driver580/) has no nvidia-modprobe, and its nodes exist."""
import os
import shlex
import stat
import subprocess

import jinja2
import pytest
import yaml

from conftest import H200, ROOT, captured_nodes
from test_server_unit import render

# Where the role installs the unit's script, and the file it installs there.
SCRIPT = ROOT / "roles/sglang_server/files/gpu_init.sh"
VARS = yaml.safe_load((ROOT / "roles/sglang_server/vars/main.yml").read_text())
FLEET = yaml.safe_load((ROOT / "roles/fleet/defaults/main.yml").read_text())  # fleet_scripts_dir
INSTALLED_AT = jinja2.Template(VARS["__sglang_server_gpu_init_script"]).render(FLEET)
INSTALLED = {INSTALLED_AT: str(SCRIPT)}


def fake_dev(tmp_path, nodes):
    """A /dev holding `nodes` ((path, type, major, minor), as the host's dev-nodes.txt lists them)."""
    dev = tmp_path / "dev"
    for path, kind, major, minor in nodes:
        target = dev / os.path.relpath(path, "/dev")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mknod(target, (stat.S_IFCHR if kind == "c" else stat.S_IFBLK) | 0o666, os.makedev(major, minor))
        except PermissionError:
            pytest.skip("making device nodes needs CAP_MKNOD")
    return dev


def gpu_init_starts(tmp_path, monkeypatch, **extravars):
    render(tmp_path, monkeypatch, ["gpu-node-01"], **extravars)
    unit = (tmp_path / "gpu-node-01.sglang-gpu-init.service").read_text().splitlines()
    assert "Type=oneshot" in unit and "RemainAfterExit=yes" in unit
    return [shlex.split(line.split("=", 1)[1]) for line in unit if line.startswith("ExecStart=")]


def start(starts, dev):
    """(status, output) of the oneshot: systemd's minimal PATH, the installed script swapped for the
    role's file and pointed at `dev`; 203 is systemd's status for a command it cannot execute."""
    output = []
    for argv in starts:
        assert not argv[0].startswith(("-", "@", "+", "!", ":")), argv  # no failure is ignored
        argv = [INSTALLED.get(argv[0], argv[0])] + argv[1:] + [str(dev)]
        try:
            run = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        except OSError as exc:
            return 203, "%s: %s" % (argv[0], exc)
        output.append(run.stdout + run.stderr)
        if run.returncode != 0:
            return run.returncode, "".join(output)
    return 0, "".join(output)


def test_a_host_without_nvidia_modprobe_whose_nodes_exist_starts(tmp_path, monkeypatch):
    """The H200 host: `command -v nvidia-modprobe` found none (127); /dev/nvidiactl, nvidia-uvm and nvidia0 exist."""
    assert (H200 / "nvidia-modprobe.txt").read_text() == ""
    assert "nvidia-modprobe.txt 127" in (H200 / "exit-codes.txt").read_text().splitlines()
    dev = fake_dev(tmp_path, captured_nodes())
    absent = tmp_path / "usr/bin/nvidia-modprobe"
    starts = gpu_init_starts(tmp_path, monkeypatch, sglang_server_gpus_per_node=1,
                             sglang_server_nvidia_modprobe=str(absent))
    status, output = start(starts, dev)
    assert status == 0, output
    assert output == f"gpu-init: no {absent} on this host; its nodes are there: " \
                     f"{dev}/nvidiactl {dev}/nvidia-uvm {dev}/nvidia0\n"


@pytest.mark.parametrize("gone,gpus,missing", [
    (["/dev/nvidia-uvm"], 1, ["nvidia-uvm"]),          # nvidia-uvm not loaded (nothing made its node)
    ([], 8, ["nvidia%d" % i for i in range(1, 8)]),    # a unit for 8 GPUs on the 1-GPU host
    (["/dev/nvidiactl", "/dev/nvidia0"], 1, ["nvidiactl", "nvidia0"]),
])
def test_missing_nodes_without_nvidia_modprobe_fail_the_unit_naming_them(tmp_path, monkeypatch, gone, gpus, missing):
    dev = fake_dev(tmp_path, [n for n in captured_nodes() if n[0] not in gone])
    absent = tmp_path / "usr/bin/nvidia-modprobe"
    starts = gpu_init_starts(tmp_path, monkeypatch, sglang_server_gpus_per_node=gpus,
                             sglang_server_nvidia_modprobe=str(absent))
    status, output = start(starts, dev)
    assert status == 1
    assert output.startswith(f"gpu-init: no {absent} on this host, and no device node "
                             + " ".join(f"{dev}/{name}" for name in missing) + ": ")


def test_a_regular_file_is_no_device_node(tmp_path, monkeypatch):
    dev = fake_dev(tmp_path, [n for n in captured_nodes() if n[0] != "/dev/nvidia0"])
    (dev / "nvidia0").write_text("")
    starts = gpu_init_starts(tmp_path, monkeypatch, sglang_server_gpus_per_node=1,
                             sglang_server_nvidia_modprobe=str(tmp_path / "absent"))
    status, output = start(starts, dev)
    assert status == 1 and f"no device node {dev}/nvidia0:" in output


def fake_nvidia_modprobe(tmp_path, fail_on=None):
    log = tmp_path / "calls.log"
    tool = tmp_path / "nvidia-modprobe"
    tool.write_text(f'#!/bin/sh\necho "$*" >> {log}\n'
                    + (f'[ "$*" = "{fail_on}" ] && exit 1\n' if fail_on else "") + "exit 0\n")
    tool.chmod(0o755)
    return tool, log


def test_where_nvidia_modprobe_is_installed_it_makes_every_gpu_s_nodes(tmp_path, monkeypatch):
    tool, log = fake_nvidia_modprobe(tmp_path)
    starts = gpu_init_starts(tmp_path, monkeypatch, sglang_server_gpus_per_node=8,
                             sglang_server_nvidia_modprobe=str(tool))
    status, output = start(starts, tmp_path / "empty-dev")
    assert status == 0, output
    assert log.read_text().splitlines() == ["-u -c0"] + ["-c%d" % i for i in range(1, 8)]


def test_a_failing_nvidia_modprobe_fails_the_unit(tmp_path, monkeypatch):
    tool, log = fake_nvidia_modprobe(tmp_path, fail_on="-c2")
    starts = gpu_init_starts(tmp_path, monkeypatch, sglang_server_gpus_per_node=4,
                             sglang_server_nvidia_modprobe=str(tool))
    status, output = start(starts, tmp_path / "dev")
    assert status == 1 and output.endswith(f"gpu-init: {tool} -c2 failed\n")
    assert log.read_text().splitlines() == ["-u -c0", "-c1", "-c2"]


def test_the_role_installs_the_script_the_unit_runs():
    """gpu_init.yml writes the script from its entry in vars/main.yml, the one the footprint's read compares."""
    entry = yaml.safe_load((ROOT / "roles/sglang_server/vars/main.yml").read_text())["__sglang_server_files"][
        "gpu_init_script"]
    assert entry["path"] == "{{ __sglang_server_gpu_init_script }}" and entry["mode"] == "0755"
    assert entry["owner"] == "root" and "'%s'" % SCRIPT.name in entry["content"]
    tasks = yaml.safe_load((ROOT / "roles/sglang_server/tasks/gpu_init.yml").read_text())  # the unit and its script
    (copy,) = [t for t in tasks if "ansible.builtin.copy" in t]
    assert "__sglang_server_files.gpu_init_script" in copy["loop"]
    assert copy["ansible.builtin.copy"]["content"] == "{{ item.content }}"
    assert copy["ansible.builtin.copy"]["mode"] == "{{ item.mode }}"
    assert subprocess.run(["sh", "-n", str(SCRIPT)]).returncode == 0


@pytest.mark.parametrize("found,runs", [
    ("/usr/local/nvidia/bin/nvidia-modprobe", "/usr/local/nvidia/bin/nvidia-modprobe"),
    ("", "/usr/bin/nvidia-modprobe"),  # none found: the packaged path, run only if it appears
])
def test_the_unit_runs_the_nvidia_modprobe_the_preflight_found(tmp_path, monkeypatch, found, runs):
    starts = gpu_init_starts(tmp_path, monkeypatch, gpu_preflight_nvidia_modprobe_path=found,
                             fleet_gpus_per_host=2)
    assert starts == [[INSTALLED_AT, runs, "2"]]
