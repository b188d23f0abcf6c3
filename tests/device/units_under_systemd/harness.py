#!/usr/bin/env python3
"""The server role's units under a real systemd on a real GPU host that has none as PID 1.

    python3 tests/device/units_under_systemd/harness.py --carry .devcarry --out OUT_DIR

Run as root from the repository root on the GPU host (a disposable one: it installs systemd and a
user). CARRY holds debs/ (Debian 12's systemd and libsystemd-shared 252, libapparmor1, libip4tc2,
libkmod2, from `apt-get download`) and wheels/ (ansible-core 2.19 and what it imports, ninja).

1. Finds the host's settings: the Python with torch, the CUDA toolkit with nvcc, nvidia-smi, the
   GPU count, nvidia-modprobe (or none), NCCL_NVLS_ENABLE / TORCH_SYMM_MEM_DISABLE_MULTICAST /
   NVSHMEM_DISABLE_NVLS as the host sets them.
2. Renders the sglang unit and the gpu-init unit from the role (tests/playbooks/render_unit.yml,
   the role's templates, defaults and vars) with those settings, with the carried ansible-core.
3. Creates the service user with the role's home, then runs workload.py outside any unit: as root
   (a few steps, the sandbox and system call probes) and as the service user with runuser, both
   with the unit's own environment.
4. Merges systemd 252 into the merged-/usr tree (never replacing /lib or /bin), boots it as PID 1
   of a new PID and mount namespace with a minimal target, installs the rendered units unchanged
   and a drop-in that replaces the server's ExecStart with workload.py (and sends its output to a
   file: there is no journald). Starts the server unit as rendered; where the gpu-init unit cannot
   run (no nvidia-modprobe), records that, and starts it again with the gpu-init ExecStart replaced
   by a check that the device nodes exist.
5. Runs the fusion self-test as the role does on a host with systemd: a transient unit, by the
   systemd-run command line the role builds (tests/playbooks/render_unit.yml writes it), the server
   unit's own sandbox as --property= words. Once as the role runs it (the role's fusion_selftest.py,
   where the role installs it), and once with the workload after its `--` instead, so every GPU step
   is seen under the self-test's sandbox too.
6. Writes OUT_DIR/units-under-systemd.json (everything, including what the unit's own process
   recorded), the units and drop-ins as systemd read them, and logs.txt. Each phase is saved as it
   ends, so a run cut short still returns what it did.
"""
import argparse
import glob
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
SERVICE = "sglang"  # the fleet layer's default fleet_server_service
UNIT_DIR = Path("/etc/systemd/system")
LIB = Path("/usr/local/lib/sglang-fleet-harness")
LOG_DIR = Path("/var/log/sglang-harness")
TARGET = "units-harness.target"
DEBS = ("systemd_", "libsystemd-shared_", "libapparmor1_", "libip4tc2_", "libkmod2_")
# What the host runs GPU jobs with (no NVLink multicast here); kept in every environment.
HOST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# A device node outside DeviceAllow, readable and writable by anyone (mode 0666, so only the
# device policy can refuse it): fuse's 10:229, harmless to open.
DENIED_NODE = ("/dev/harness-fuse", 10, 229)
ROOT_STEPS = ["cuda_init", "cublas_matmul", "nvidia_smi", "nvidia_smi_on_path", "tcp_loopback"]
# Boot-time units of the Debian package that would change the host (sysctls, users, /tmp cleanup,
# machine id, modules) or need a journald: masked, the product's units need none of them.
MASKED = ["systemd-sysctl.service", "systemd-modules-load.service", "systemd-sysusers.service",
          "systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service", "systemd-tmpfiles-clean.timer",
          "systemd-firstboot.service", "systemd-machine-id-commit.service", "systemd-random-seed.service",
          "systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount", "systemd-journald.service",
          "systemd-journald.socket", "systemd-journald-dev-log.socket", "systemd-journald-audit.socket",
          "systemd-journal-flush.service", "systemd-update-utmp.service", "systemd-repart.service",
          "systemd-pcrphase.service", "systemd-pcrphase-sysinit.service", "kmod-static-nodes.service",
          "sys-fs-fuse-connections.mount", "sys-kernel-config.mount", "sys-kernel-debug.mount",
          "sys-kernel-tracing.mount", "dev-hugepages.mount", "dev-mqueue.mount", "systemd-remount-fs.service",
          "systemd-ask-password-console.path", "systemd-initctl.socket", "cryptsetup.target",
          "integritysetup.target", "veritysetup.target"]


def sh(argv, timeout=120, **kwargs):
    """Run argv; never raises: {argv, rc, out, err} (rc None on a timeout or a missing program)."""
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
        return {"argv": argv, "rc": run.returncode, "out": run.stdout, "err": run.stderr}
    except subprocess.TimeoutExpired as exc:
        return {"argv": argv, "rc": None, "out": str(exc.stdout or ""), "err": "timed out after %s s" % timeout}
    except OSError as exc:
        return {"argv": argv, "rc": None, "out": "", "err": repr(exc)}


def log_tails(paths, tail=40000):
    """The last `tail` characters of each log that exists, under a `==> PATH <==` header."""
    return "\n".join("==> %s <==\n%s" % (path, path.read_text(errors="replace")[-tail:])
                     for path in paths if path.exists())


def brief(result, tail=2000):
    return {"rc": result["rc"], "out": result["out"][-tail:], "err": result["err"][-tail:]}


# ------------------------------------------------------------------------------------------------
# Unit text: what the test (tests/unit/test_units_under_systemd.py) reads the same way.

def unit_lines(text):
    """[(section, key, value)] with continuation lines joined, as systemd reads a unit file."""
    entries, section, pending = [], None, ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        entries.append((section, key.strip(), value.strip()))
    return entries


def unit_values(text, key, section="Service"):
    return [v for s, k, v in unit_lines(text) if s == section and k == key]


def unit_environment(text):
    """The unit's Environment= lines as a dict (systemd's quoting and $$/%% undone)."""
    env = {}
    for value in unit_values(text, "Environment"):
        for word in shlex.split(value):
            name, _, val = word.partition("=")
            env[name] = val.replace("$$", "$").replace("%%", "%")
    return env


def exec_argv(text):
    (line,) = [v for v in unit_values(text, "ExecStart") if v]
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line)]


def expand_filter_groups(listing):
    """`systemd-analyze syscall-filter` output -> {"@group": set(system calls, groups expanded)}."""
    groups, current = {}, None
    for line in listing.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif line.startswith((" ", "\t")) and current is not None:
            item = line.strip()
            if item and not item.startswith("#"):
                current.append(item)
        else:
            current = None

    def expand(name, seen=()):
        calls = set()
        for item in groups.get(name, []):
            calls |= expand(item, seen + (name,)) if item.startswith("@") and item not in seen else {item}
        return calls

    return {name: expand(name) for name in groups}


def allowed_calls(unit_text, groups):
    """The system calls a unit's SystemCallFilter= lines allow (an allow list, then ~ deny lists),
    with @default, which systemd always adds to an allow list."""
    allowed, denied, allow_list = set(), set(), False
    for value in unit_values(unit_text, "SystemCallFilter"):
        negate = value.startswith("~")
        for item in value.lstrip("~").split():
            calls = groups.get(item, set()) if item.startswith("@") else {item}
            if negate:
                denied |= calls
            else:
                allow_list = True
                allowed |= calls
    if not allow_list:
        return None
    return (allowed | groups.get("@default", set())) - denied


# ------------------------------------------------------------------------------------------------
# The host.

def torch_python():
    candidates = [shutil.which("python3"), "/opt/torch/.venv/bin/python3"]
    candidates += sorted(glob.glob("/opt/*/.venv/bin/python3"))
    tried = []
    for py in dict.fromkeys(c for c in candidates if c):
        probe = sh([py, "-c", "import sys, torch; print(sys.version.split()[0], torch.__version__, "
                    "torch.version.cuda)"])
        tried.append({"python": py, **brief(probe, 300)})
        if probe["rc"] == 0:
            return py, probe["out"].split(), tried
    return None, None, tried


def discover(fixture):
    found = {"uname": os.uname().release, "os": "",
             "cgroup_fs": sh(["stat", "-fc", "%T", "/sys/fs/cgroup"])["out"].strip()}
    if os.path.exists("/etc/os-release"):
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                found["os"] = line.split("=", 1)[1].strip().strip('"')
    py, versions, tried = torch_python()
    found.update(python=py, python_tried=tried)
    if versions:
        found.update(python_version=versions[0], torch=versions[1], torch_cuda=versions[2])
    nvcc = shutil.which("nvcc")
    homes = ["/usr/local/cuda-13.0", "/usr/local/cuda-13", "/usr/local/cuda"]
    if nvcc:
        homes.append(str(Path(nvcc).resolve().parent.parent))
    found["cuda_home"] = next((h for h in homes if os.access(h + "/bin/nvcc", os.X_OK)), None)
    if found["cuda_home"]:
        found["nvcc"] = sh([found["cuda_home"] + "/bin/nvcc", "--version"])["out"].strip().splitlines()[-1:]
    found["nvidia_smi"] = shutil.which("nvidia-smi") or "/usr/local/nvidia/bin/nvidia-smi"
    found["nvidia_modprobe"] = shutil.which("nvidia-modprobe")
    gpus = sh([found["nvidia_smi"], "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader"])
    found["gpus"] = [line.strip() for line in gpus["out"].splitlines() if line.strip()]
    found["env"] = {name: os.environ.get(name, default) for name, default in HOST_ENV.items()}
    found["env_from_host"] = sorted(name for name in HOST_ENV if name in os.environ)
    found["libcuda_in_ld_cache"] = "libcuda.so.1" in sh(["ldconfig", "-p"])["out"]
    found["dev_console"] = os.path.exists("/dev/console")
    found["dmesg_readable"] = os.path.exists("/dev/kmsg") and sh(["dmesg"])["rc"] == 0
    found["yama_ptrace_scope"] = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip() \
        if Path("/proc/sys/kernel/yama/ptrace_scope").exists() else None
    selftest = fixture / "selftest-1gpu.json"
    found["fusion_selftest"] = json.loads(selftest.read_text()) if selftest.exists() else None
    return found


def unpack_wheels(carry, dest):
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for wheel in sorted((carry / "wheels").glob("*.whl")):
        if wheel.name.startswith("ninja-"):
            continue
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(dest)
        names.append(wheel.name)
    return names


def render_vars(found):
    """The role's variables this host sets (everything else stays the role's default)."""
    extra = {"sglang_server_gpus_per_node": len(found["gpus"]),
             "sglang_server_python": found["python"],
             "sglang_server_cuda_home": found["cuda_home"],
             "fleet_nvidia_smi": found["nvidia_smi"],
             "sglang_server_env": found["env"]}
    if found["nvidia_modprobe"]:
        extra["sglang_server_nvidia_modprobe"] = found["nvidia_modprobe"]
    # The role's own fusion decision from this host's self-test verdict (one GPU: single-gpu).
    sys.path.insert(0, str(ROOT / "plugins/filter"))
    from sglang_fusion import fusion_decision
    extra["sglang_server_fusion"] = fusion_decision("auto", found["fusion_selftest"], 1.05, True,
                                                    len(found["gpus"]))
    return extra


def render(py, site, extra, host_name, work):
    """The role's units for this host, by the repository's render playbook."""
    out = work / "render"
    out.mkdir(parents=True, exist_ok=True)
    vars_file = work / "render-vars.json"
    vars_file.write_text(json.dumps(dict(extra, render_dir=str(out), ansible_python_interpreter=py)))
    env = dict(os.environ, PYTHONPATH=str(site), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), LC_ALL="C.UTF-8",
               LANG="C.UTF-8", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_HOME=str(work / "ansible-home"))
    run = sh([py, "-m", "ansible", "playbook", "-i", host_name + ",", "-c", "local",
              str(ROOT / "tests/playbooks/render_unit.yml"), "-e", "@" + str(vars_file)],
             timeout=300, env=env, cwd=str(ROOT))
    units = {}
    for name in ("sglang.service", "sglang-gpu-init.service", "selftest-argv.json"):
        path = out / ("%s.%s" % (host_name, name))
        units[name] = path.read_text() if path.exists() else None
    return brief(run, 4000), units


def prepare_host(found, unit, carry, record):
    user = unit_values(unit, "User")[0]
    home = unit_values(unit, "WorkingDirectory")[0]
    prep = record.setdefault("host_prep", {})
    if sh(["id", user])["rc"] != 0:  # as the role creates it: a system user, its home, no shell
        prep["useradd"] = brief(sh(["useradd", "--system", "--home-dir", home, "--create-home",
                                    "--shell", "/usr/sbin/nologin", user]))
    entry = pwd.getpwnam(user)
    os.makedirs(home, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    os.chmod(home, 0o750)
    for sub in (".cache", "harness"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
        os.chown(os.path.join(home, sub), entry.pw_uid, entry.pw_gid)
    LIB.mkdir(parents=True, exist_ok=True)
    # The workload, and what its fusion step imports: the graph timing and the role's self-test.
    for source in (HERE / "workload.py", HERE / "workload_triton.py", ROOT / "tests/device/fusion_graph_timing.py",
                   ROOT / "roles/sglang_server/files/fusion_selftest.py"):
        shutil.copy(source, LIB / source.name)
        os.chmod(LIB / source.name, 0o644)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    # The role's venv holds the ninja wheel (sglang and flashinfer require it); this host's may not.
    venv_bin = Path(found["python"]).parent
    prep["ninja_in_venv"] = (venv_bin / "ninja").exists()
    if not prep["ninja_in_venv"]:
        wheels = sorted((carry / "wheels").glob("ninja-*.whl"))
        prep["ninja_install"] = brief(sh([found["python"], "-m", "pip", "install", "--no-index", "--no-deps",
                                          str(wheels[0])])) if wheels else "no ninja wheel carried"
        if wheels and not (venv_bin / "ninja").exists():  # no pip in that venv: where pip puts it
            with zipfile.ZipFile(wheels[0]) as archive:
                script = next(n for n in archive.namelist() if n.endswith(".data/scripts/ninja"))
                (venv_bin / "ninja").write_bytes(archive.read(script))
            os.chmod(venv_bin / "ninja", 0o755)
        prep["ninja_now"] = (venv_bin / "ninja").exists()
    node, major, minor = DENIED_NODE
    if not os.path.exists(node):
        os.mknod(node, 0o666 | 0o020000, os.makedev(major, minor))
    os.chmod(node, 0o666)
    Path("/tmp/units-harness-marker").write_text("the host's /tmp\n")
    return user, home


def outside_env(unit, user, home_override=None):
    entry = pwd.getpwnam(user)
    env = unit_environment(unit)
    env.update(USER=user, LOGNAME=user, SHELL=entry.pw_shell)
    if home_override:
        env["HOME"] = home_override
    return env


def run_workload(found, label, user, env, out, timeout, steps=None):
    argv = [found["python"], str(LIB / "workload.py"), "--label", label, "--out", out,
            "--nvidia-smi", found["nvidia_smi"], "--budget", str(int(timeout - 10))]
    if steps:
        argv += ["--steps", ",".join(steps), "--no-probes"]
    cmd = ["env", "-i"] + ["%s=%s" % kv for kv in sorted(env.items())] + argv
    if user != "root":
        cmd = ["runuser", "-u", user, "--"] + cmd
    start = time.monotonic()
    run = sh(cmd, timeout=timeout, cwd=env.get("HOME", "/"))
    result = {"command": cmd, "rc": run["rc"], "stderr": run["err"][-3000:],
              "seconds": round(time.monotonic() - start, 1)}
    if os.path.exists(out):
        result["record"] = json.loads(Path(out).read_text())
    return result


# ------------------------------------------------------------------------------------------------
# systemd.

def install_systemd(carry, work):
    stage = work / "systemd-stage"
    stage.mkdir(parents=True, exist_ok=True)
    debs = sorted(p for p in (carry / "debs").glob("*.deb") if p.name.startswith(DEBS))
    steps = {"debs": [p.name for p in debs]}
    for deb in debs:
        steps[deb.name] = sh(["dpkg-deb", "-x", str(deb), str(stage)])["rc"]
    # Debian 12's packages are not merged-/usr; this host is: /lib and /bin are links into /usr.
    for src, dest in (("lib", "/usr/lib"), ("bin", "/usr/bin"), ("usr", "/usr"), ("etc", "/etc")):
        if (stage / src).is_dir():
            steps["cp " + src] = sh(["cp", "-rn", str(stage / src) + "/.", dest])["rc"]
    Path("/etc/ld.so.conf.d/units-harness-systemd.conf").write_text("/usr/lib/x86_64-linux-gnu/systemd\n")
    steps["ldconfig"] = sh(["ldconfig"])["rc"]
    steps["version"] = sh(["/lib/systemd/systemd", "--version"])["out"].splitlines()[:1]
    steps["lib_links"] = {p: os.path.islink(p) for p in ("/lib", "/bin", "/sbin")}
    return steps


def install_role_script(unit):
    """A unit whose ExecStart runs a script of the role's (the gpu-init unit's gpu_init.sh) gets it where
    the role puts it, from roles/sglang_server/files/, root-owned and 0755 as the role's copy task has it."""
    for line in unit_values(unit, "ExecStart"):
        program = line.split()[0] if line.split() else ""
        source = ROOT / "roles/sglang_server/files" / os.path.basename(program)
        if program.startswith("/usr/local/lib/sglang-fleet/") and source.is_file():
            os.makedirs(os.path.dirname(program), exist_ok=True)
            shutil.copyfile(source, program)
            os.chmod(program, 0o755)


def write_minimal_target(who):
    """The target the manager boots to, with nothing in it, and the boot-time units it must not run masked."""
    (UNIT_DIR / TARGET).write_text("[Unit]\nDescription=%s: nothing but the manager\n"
                                   "DefaultDependencies=no\nAllowIsolate=yes\n" % who)
    for name in MASKED:
        link = UNIT_DIR / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to("/dev/null")


def write_units(units, python, nvidia_smi, home, budget):
    write_minimal_target("units harness")
    for name, text in units.items():
        (UNIT_DIR / name).write_text(text)
        install_role_script(text)
    dropins = {}
    server = UNIT_DIR / (SERVICE + ".service.d")
    server.mkdir(exist_ok=True)
    argv = [python, str(LIB / "workload.py"), "--label", "unit", "--out", home + "/harness/unit.json",
            "--nvidia-smi", nvidia_smi, "--budget", str(int(budget))]
    dropins[SERVICE + ".service.d/harness.conf"] = (
        "# The device harness: the workload instead of sglang; nothing else of the unit changes.\n"
        "# No journald on this host: the output goes to a file.\n"
        "[Service]\nExecStart=\nExecStart=%s\nStandardOutput=append:%s/unit.log\nStandardError=append:%s/unit.log\n"
        % (" ".join(shlex.quote(a) for a in argv), LOG_DIR, LOG_DIR))
    init = UNIT_DIR / (SERVICE + "-gpu-init.service.d")
    init.mkdir(exist_ok=True)
    dropins[SERVICE + "-gpu-init.service.d/harness.conf"] = (
        "# The device harness: no journald on this host, the output goes to a file.\n"
        "[Service]\nStandardOutput=append:%s/gpu-init.log\nStandardError=append:%s/gpu-init.log\n" % (LOG_DIR, LOG_DIR))
    for name, text in dropins.items():
        (UNIT_DIR / name).write_text(text)
    return dropins


def nodes_dropin(gpus):
    """gpu-init's ExecStart replaced: this host has no nvidia-modprobe, its nodes exist (issue 22, item 4)."""
    nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm"] + ["/dev/nvidia%d" % i for i in range(gpus)]
    checks = " -a ".join("-c " + n for n in nodes)
    return ("# The device harness: this host has no nvidia-modprobe and its device nodes exist. The role's\n"
            "# ExecStart lines cannot run here (issue 22, item 4); a check that the nodes exist stands in.\n"
            "[Service]\nExecStart=\nExecStart=/usr/bin/test %s\n" % checks)


class Manager:
    def __init__(self, log, log_target):
        self.log = open(log, "w")
        # As PID 1 systemd logs to /dev/console, not to its stderr: to the kernel log where it can be read.
        self.unshare = subprocess.Popen(["unshare", "--fork", "--pid", "--mount", "--mount-proc",
                                         "/lib/systemd/systemd", "--system", "--unit=" + TARGET,
                                         "--log-target=" + log_target, "--log-level=info", "--show-status=no"],
                                        stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = None

    def find(self, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.pid is None and self.unshare.poll() is None:
            for stat in glob.glob("/proc/[0-9]*/stat"):
                try:
                    fields = open(stat).read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.unshare.pid:
                    self.pid = int(stat.split("/")[2])
            time.sleep(0.2)
        return self.pid

    def run(self, *argv, timeout=120):
        return sh(["nsenter", "-t", str(self.pid), "-m", "-p", "--"] + list(argv), timeout=timeout)

    def ctl(self, *args, timeout=120):
        return self.run("systemctl", "--no-pager", *args, timeout=timeout)

    def wait_running(self, seconds=60):
        deadline, state = time.monotonic() + seconds, None
        while time.monotonic() < deadline:
            state = self.ctl("is-system-running")["out"].strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
        return state

    def show(self, unit, props=None):
        args = ["show", unit] + (["-p", ",".join(props)] if props else [])
        out = self.ctl(*args)["out"]
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def stop(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.unshare.wait(30)
        except subprocess.TimeoutExpired:
            self.unshare.kill()
        self.log.close()


PRIVATE_BUS = "unix:path=/run/systemd/private"


def run_transient(manager, argv, timeout):
    """A systemd-run command line inside the booted manager: its exit status and output (--pipe). This
    host has no D-Bus system bus; where systemd-run cannot connect to one, the same command again over
    the manager's own private socket (root only), DBUS_SYSTEM_BUS_ADDRESS set to it."""
    attempts = []
    for bus in (None, PRIVATE_BUS):
        start = time.monotonic()
        run = manager.run(*((["env", "DBUS_SYSTEM_BUS_ADDRESS=" + bus] if bus else []) + list(argv)), timeout=timeout)
        attempts.append({"bus": bus or "default", "command": argv, "rc": run["rc"], "stdout": run["out"][-6000:],
                         "stderr": run["err"][-3000:], "seconds": round(time.monotonic() - start, 1)})
        if "Failed to connect to bus" not in run["err"]:
            break
    return dict(attempts[-1], attempts=attempts)


def transient_runs(manager, selftest_argv, found, home, budget):
    """The fusion self-test as the role runs it, then the workload under the same transient unit's
    options (user, home, environment, sandbox): the runner's part of the role's argv is kept as it is."""
    split = selftest_argv.index("--")
    runner, command = selftest_argv[:split], selftest_argv[split + 1:]
    script = command[1]  # <python> <the role's fusion_selftest.py> ...
    os.makedirs(os.path.dirname(script), exist_ok=True)
    shutil.copyfile(ROOT / "roles/sglang_server/files" / os.path.basename(script), script)
    os.chmod(script, 0o755)
    # The role creates the verdict cache as the service user's before the self-test runs.
    cache = command[command.index("--cache-dir") + 1]
    user = pwd.getpwnam(SERVICE)
    os.makedirs(cache, exist_ok=True)
    os.chown(cache, user.pw_uid, user.pw_gid)
    runs = {"selftest": run_transient(manager, selftest_argv, min(budget / 3, 300))}
    workload = [found["python"], str(LIB / "workload.py"), "--label", "transient", "--out",
                home + "/harness/transient.json", "--nvidia-smi", found["nvidia_smi"],
                "--budget", str(int(budget * 2 / 3 - 20))]
    renamed = [a if not a.startswith("--unit=") else "--unit=sglang-harness-transient" for a in runner]
    runs["workload"] = run_transient(manager, renamed + ["--"] + workload, budget * 2 / 3)
    record = Path(home) / "harness/transient.json"
    runs["workload"]["record"] = json.loads(record.read_text()) if record.exists() else None
    return runs


STATE = ["ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus", "ExecMainPID", "NRestarts",
         "InvocationID"]


def start_and_wait(manager, deadline):
    started = manager.ctl("start", SERVICE + ".service", timeout=180)
    states = []
    while time.monotonic() < deadline:
        state = manager.show(SERVICE + ".service", STATE)
        if not states or state != states[-1]:
            states.append(state)
        if state.get("ActiveState") in ("inactive", "failed") or state.get("SubState") == "auto-restart":
            break
        time.sleep(2)
    return {"start": brief(started), "states": states}


# ------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carry", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--host-name", default="h200-driver580", help="the inventory name, and the fixture dir")
    parser.add_argument("--budget", type=float, default=560, help="seconds for the whole run")
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + args.budget
    carry = args.carry.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="units-harness-"))
    record = {"host_name": args.host_name, "phases": {}}
    files = {}

    def save(phase=None):
        if phase:
            record["phases"][phase] = round(time.monotonic() - started, 1)
        (args.out / "units-under-systemd.json").write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
        for name, text in files.items():
            (args.out / name.replace("/", "-")).write_text(text)

    def left(cap):
        return max(30, min(cap, deadline - time.monotonic() - 30))

    manager = None
    try:
        found = discover(ROOT / "tests/fixtures/hosts" / args.host_name)
        record["host"] = found
        save("discover")
        if not (found["python"] and found["cuda_home"] and found["gpus"]):
            raise SystemExit("no torch python, CUDA toolkit or GPU here: %s" % json.dumps(found)[:2000])

        site = work / "ansible-site"
        record["ansible_wheels"] = unpack_wheels(carry, site)
        sys.path.insert(0, str(site))
        extra = render_vars(found)
        record["render"] = {"inventory_hostname": args.host_name, "playbook": "tests/playbooks/render_unit.yml",
                            "extra_vars": extra}
        record["render"]["run"], units = render(found["python"], site, extra, args.host_name, work)
        files.update({k: v for k, v in units.items() if v is not None})
        save("render")
        if None in units.values():
            raise SystemExit("the role's render failed: %s" % record["render"]["run"])
        selftest_argv = json.loads(units.pop("selftest-argv.json"))
        record["render"]["selftest_argv"] = selftest_argv
        unit = units["sglang.service"]
        python = exec_argv(unit)[0]
        record["render"]["exec_python"] = python

        user, home = prepare_host(found, unit, carry, record)
        record["outside"] = {}
        record["outside"]["root"] = run_workload(found, "root", "root", outside_env(unit, "root", "/root"),
                                                 "/root/units-harness-root.json", left(120), ROOT_STEPS)
        save("outside-root")
        record["outside"][user] = run_workload(found, user, user, outside_env(unit, user),
                                               home + "/harness/outside.json", left(300))
        save("outside-" + user)

        record["systemd_install"] = install_systemd(carry, work)
        # The unit's workload gets what is left, less the time to collect and stop.
        files.update(write_units(units, python, found["nvidia_smi"], home, deadline - time.monotonic() - 90))
        record["masked"] = MASKED
        save("systemd-install")
        manager = Manager(work / "systemd.log", "kmsg" if found["dmesg_readable"] else "console")
        record["systemd"] = {"pid": manager.find(), "state": manager.wait_running(),
                             "unshare_rc": manager.unshare.poll()}
        record["systemd"]["version"] = manager.ctl("--version")["out"].splitlines()[:1]
        save("boot")

        # The units as the role renders them: the server needs its gpu-init unit (Requires=).
        as_rendered = start_and_wait(manager, deadline - 40)
        as_rendered["gpu_init"] = manager.show(SERVICE + "-gpu-init.service", STATE)
        record["as_rendered"] = as_rendered
        save("as-rendered")
        served = as_rendered["states"] and as_rendered["states"][-1].get("ExecMainPID", "0") != "0"
        if not served and as_rendered["gpu_init"].get("Result") != "success":
            name = SERVICE + "-gpu-init.service.d/harness-nodes.conf"
            files[name] = nodes_dropin(len(found["gpus"]))
            (UNIT_DIR / name).write_text(files[name])
            manager.ctl("daemon-reload")
            manager.ctl("reset-failed")
            record["inside"] = start_and_wait(manager, deadline - 40)
        else:
            record["inside"] = as_rendered
        manager.ctl("stop", SERVICE + ".service")
        record["inside"]["gpu_init"] = manager.show(SERVICE + "-gpu-init.service", STATE + ["DropInPaths"])
        unit_json = Path(home) / "harness/unit.json"
        record["inside"]["record"] = json.loads(unit_json.read_text()) if unit_json.exists() else None
        save("inside")

        # What the role looks at to choose where its self-test runs (roles/sglang_server/tasks/fusion.yml).
        record["selftest_host"] = {
            "systemd_booted": manager.run("test", "-d", "/run/systemd/system")["rc"] == 0,
            "systemd_run_rc": manager.run("systemd-run", "--version")["rc"],
            "system_bus": manager.run("test", "-S", "/run/dbus/system_bus_socket")["rc"] == 0}
        record["transient"] = transient_runs(manager, selftest_argv, found, home,
                                             max(60, deadline - time.monotonic() - 60))
        save("transient")

        record["systemd"]["cat"] = manager.ctl("cat", SERVICE + ".service", SERVICE + "-gpu-init.service")["out"]
        record["systemd"]["show"] = {u: manager.show(u) for u in (SERVICE + ".service", SERVICE + "-gpu-init.service")}
        record["systemd"]["security"] = brief(manager.run("systemd-analyze", "security", "--no-pager",
                                                          SERVICE + ".service"), 6000)
        record["systemd"]["failed_units"] = manager.ctl("list-units", "--failed", "--plain", "--no-legend")["out"]
        record["systemd"]["syscall_filter"] = sh(["systemd-analyze", "syscall-filter", "--no-pager"])["out"]
        dmesg = sh(["dmesg"])
        record["audit"] = {"rc": dmesg["rc"], "err": dmesg["err"][-300:],
                           "lines": [x for x in dmesg["out"].splitlines() if "audit" in x and "syscall=" in x][-60:]}
        files["dmesg-systemd.txt"] = "\n".join(x for x in dmesg["out"].splitlines()
                                               if "systemd" in x or "sglang" in x or "audit" in x)[-200000:]
        save("collect")
    except BaseException as exc:  # whatever happened, what was found so far comes back
        record["error"] = repr(exc)[:3000]
        raise
    finally:
        if manager:
            manager.stop()
        files["logs.txt"] = log_tails([work / "systemd.log", LOG_DIR / "unit.log", LOG_DIR / "gpu-init.log"])
        record["seconds"] = round(time.monotonic() - started, 1)
        save("end")
        print(summary(record))


def summary(record):
    """A few lines for the console: the phases, each step outside and inside, the sandbox."""
    lines = ["phases: %s" % record.get("phases"), "error: %s" % record.get("error")]
    runs = {k: (v.get("record") or {}) for k, v in record.get("outside", {}).items()}
    runs["unit"] = (record.get("inside") or {}).get("record") or {}
    runs["transient"] = ((record.get("transient") or {}).get("workload") or {}).get("record") or {}
    names = []
    for run in runs.values():
        names += [n for n in list(run.get("steps", {})) + list(run.get("probes", {})) if n not in names]
    for name in names:
        cells = []
        for label, run in runs.items():
            step = run.get("steps", {}).get(name) or run.get("probes", {}).get(name)
            cells.append("%s=%s" % (label, "-" if step is None else ("ok" if step["ok"] else "FAIL")))
        lines.append("%-32s %s" % (name, " ".join(cells)))
    for label, run in runs.items():
        box = run.get("sandbox") or {}
        lines.append("%s: %s devices=%s writes=%s" % (label, box.get("status", {}).get("Seccomp"),
                                                     box.get("devices"), box.get("writes")))
        lines.append("%s syscalls: %s" % (label, {k: v.get("outcome") for k, v in run.get("syscalls", {}).items()}))
    selftest = (record.get("transient") or {}).get("selftest") or {}
    lines.append("self-test as a transient unit: rc=%s %s" % (selftest.get("rc"), (selftest.get("stdout") or "")[-400:]))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
