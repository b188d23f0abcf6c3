#!/usr/bin/env python3
"""Lab fleet control: systemd containers under podman that pose as GPU nodes.

    labctl.py image                 build the node image if its recipe changed (cached otherwise)
    labctl.py wheelhouse            fetch what the lab nodes pip install (sglang, flashinfer,
                                    a CPU torch, the flash-attn sdist, sgl-eval)
    labctl.py aptrepo               build the signed CUDA apt mirror the lab nodes install from
    labctl.py up   [-i INVENTORY]   start one container per inventory host in the fleet's pod,
                                    let the lab's SSH key in, then provision the simulated
                                    hardware (files/lab/provision.yml)
    labctl.py up --pod P --hosts A,B --no-provision
                                    the same for named nodes (molecule's create step)
    labctl.py down [-i INVENTORY]   remove those containers and their pod (--all: every lab
                                    container; --pod P --hosts A,B: named ones)
    labctl.py inventory --nodes N [--prefix P]
                                    write a lab inventory of N nodes (P-1..P-N, default lab-gpu)
                                    and print its path

The network: the nodes of one fleet share one network namespace, a podman pod created with no
network at all, so they reach each other over its loopback only (each node owns 127.0.1.N by
convention, inventory/lab/group_vars/all.yml), and nothing they send can leave 127.0.0.0/8.
The connection: the controller reaches a node with plain OpenSSH as `ubuntu`, through a
ProxyCommand that runs `sshd -i` inside the container (`podman exec -i`): a real SSH session
over a pipe, checked against the known_hosts file written here from each node's own host key.
The Hub: each pod also runs files/lab/hub_fixture.py on 127.0.2.1:8080 (its own container), the
model stage's source; its byte counts are in /run/hub-stats.json inside that container.

Lab only: nothing in roles/ or playbooks/ uses this file.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

import aptrepo

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "files/lab/image/recipe.sh"
IMAGE_REPO = "localhost/sglang-fleet-lab"
IMAGE_CURRENT = f"{IMAGE_REPO}:current"
LABEL = "io.sglang-fleet.lab=node"
DEFAULT_INVENTORY = ROOT / "inventory/lab/hosts.yml"
# Mounted read-only into every lab node at /srv/lab-wheelhouse (lab nodes have no network).
WHEELHOUSE = ROOT / ".cache/lab-wheelhouse"
# The lab's SSH client key and known_hosts (inventory/lab/group_vars/all.yml points ssh at them).
SSH_DIR = ROOT / ".cache/lab-ssh"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
# The lab Hub's address in every pod (inventory/lab/group_vars/all.yml: sglang_model_hf_endpoint), and
# its uplink: the site's link to the Hub, shared by every host that fetches from it.
HUB_ADDRESS = "127.0.2.1:8080"
HUB_RATE_MB = 8


def log(msg: str) -> None:
    print(f"\033[1m[lab]\033[0m {msg}", flush=True)


def podman(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], check=check, text=True,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)


def image_tag() -> str:
    return f"{IMAGE_REPO}:{hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:12]}"


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def build_image() -> str:
    tag = image_tag()
    if image_exists(tag):
        log(f"image {tag} is up to date")
    else:
        log(f"building {tag} with debootstrap (a few minutes; the log follows)")
        with tempfile.TemporaryDirectory(prefix="lab-rootfs-", dir=os.environ.get("TMPDIR")) as tmp:
            rootfs = Path(tmp) / "rootfs"
            subprocess.run([str(RECIPE), str(rootfs)], check=True)
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                                   stdout=subprocess.PIPE)
            subprocess.run(["podman", "import", "--change", 'CMD ["/sbin/init"]', "-", tag],
                           stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
            if tar.wait() != 0:
                sys.exit("lab: tar of the image rootfs failed")
    podman("tag", tag, IMAGE_CURRENT)
    return tag


def pip_download(dest: Path, *requirements: str, deps: bool = False, options: tuple = (),
                 check: bool = True) -> bool:
    dest.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                           *([] if deps else ["--no-deps"]), "--only-binary=:all:", *options, "-d", str(dest),
                           *requirements], check=check).returncode == 0


def fetch_wheel(project: str, version: str, dest: Path) -> Path:
    """The project's wheel in dest, downloaded with pip (no dependencies) unless already there."""
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if not found:
        log(f"downloading {project}=={version}")
        pip_download(dest, f"{project}=={version}")
        found = sorted(dest.glob(pattern))
    if not found:
        sys.exit(f"lab: pip gave no wheel for {project}=={version}")
    return found[0]


def fetch_sdist(project: str, version: str, dest: Path) -> Path:
    """The project's source archive in dest, from PyPI's simple API, its sha256 checked.

    pip cannot download flash-attn's sdist without torch: its setup.py imports torch just to
    produce metadata. The archive itself is all the lab nodes need."""
    name = f"{project.replace('-', '_')}-{version}.tar.gz"
    target = dest / name
    if target.exists():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    index = os.environ.get("LAB_PYPI_SIMPLE_URL", "https://pypi.org/simple")
    log(f"downloading {name}")
    request = urllib.request.Request(f"{index}/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = [f for f in json.load(response)["files"] if f["filename"] == name]
    if not files:
        sys.exit(f"lab: {index} lists no {name}")
    with urllib.request.urlopen(files[0]["url"], timeout=300) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != files[0]["hashes"]["sha256"]:
        sys.exit(f"lab: {name} does not match the index's sha256")
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.rename(target)
    return target


def build_sgl_kernel_wheel(dest: Path, version: str, tag: str, server_mode: str = "") -> Path:
    """A stand-in for sglang's CUDA sgl-kernel wheel, packaged as upstream packages it: the file
    name carries +<tag>, the METADATA a plain version (sglang issues #14327, #20953), so pip refuses
    it from an index and the role installs it by direct URL, as on a real host. No kernels inside.
    Byte-for-byte reproducible: its sha256 is pinned in inventory/lab/group_vars/all.yml.
    server_mode makes a build the lab's server fixture obeys (a release that crashes on load, or
    answers worse: KERNEL_MODES)."""
    import base64
    import zipfile
    name = f"sgl_kernel-{version}+{tag}-cp310-abi3-manylinux2014_x86_64.whl"
    info = f"sgl_kernel-{version}.dist-info"
    files = {
        "sgl_kernel/__init__.py": f'"""sglang-fleet lab stand-in for sgl-kernel {version}: no CUDA kernels."""\n'
                                  f'__version__ = "{version}"\n'
                                  + (f'LAB_SERVER_MODE = "{server_mode}"\n' if server_mode else ""),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: sgl-kernel\nVersion: {version}\n"
                            "Summary: sglang-fleet lab stand-in (packaged as upstream's cu130 wheels)\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: sglang-fleet-lab\nRoot-Is-Purelib: false\n"
                         "Tag: cp310-abi3-manylinux2014_x86_64\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    dest.mkdir(parents=True, exist_ok=True)
    partial = dest / (name + ".part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            entry = zipfile.ZipInfo(path, date_time=(2025, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, text)
    partial.rename(dest / name)
    return dest / name


# The server fixture's modes that only an install can carry (files/lab/sglang_lab_server.py): a build of
# sgl-kernel per mode, +<tag>.<mode> (a wheel file name's fields are split at "-": low-accept is spelled
# low_accept there). crash fails the health gate; the others pass it and fail the quality gate.
KERNEL_MODES = ("crash", "degraded", "slow", "low-accept")


def mode_wheel_tag(tag: str, mode: str) -> str:
    """The local version label of the sgl-kernel build that carries a server mode: cpu -> cpu.low_accept."""
    return f"{tag}.{mode.replace('-', '_')}"


def quality_packages() -> list[str]:
    """What the quality gate's eval installs (pip requirement strings), at the sglang_quality role's pins."""
    defaults = yaml.safe_load((ROOT / "roles/sglang_quality/defaults/main.yml").read_text())
    return list(defaults["sglang_quality_packages"])


def lab_torch() -> str:
    """The CPU torch the lab's sglang venvs get (inventory/lab/group_vars/all.yml)."""
    lab = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    return f"torch=={lab['sglang_torch_version']}+{lab['sglang_cuda_wheel_tag']}"


def fill_wheelhouse() -> list[Path]:
    """What the lab nodes install, at the roles' pins: the real sglang and flashinfer-python wheels,
    a CPU torch with its dependencies, flash-attn's source archive and its build requirements, what
    bench_serving imports, the real sglang-router and the quality gate's eval (sgl-eval) with their
    dependencies, and the sgl-kernel stand-in with a build per server mode (KERNEL_MODES).

    The downloads run again whenever the list of requirements differs from the one stamped in the
    wheelhouse (.requirements): a pin moved, or a package added."""
    pins = yaml.safe_load((ROOT / "roles/sglang/defaults/main.yml").read_text())
    flash = yaml.safe_load((ROOT / "roles/flash_attn/defaults/main.yml").read_text())
    router = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
    stamp = WHEELHOUSE / ".requirements"
    lab = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    requirements = [lab_torch(), *flash["flash_attn_build_requirements"], *flash["flash_attn_requirements"],
                    *lab["sglang_bench_extra_packages"], "sglang-router==%s" % router["sglang_router_version"],
                    *quality_packages()]
    if not stamp.exists() or stamp.read_text().split("\n") != requirements:
        log("downloading " + ", ".join(requirements))
        # PyPI has no CPU builds of torch: pip's own configuration first, then PyTorch's CPU index.
        if not pip_download(WHEELHOUSE, *requirements, deps=True, check=False):
            index = os.environ.get("LAB_TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu")
            pip_download(WHEELHOUSE, *requirements, deps=True, options=("--extra-index-url", index))
        stamp.write_text("\n".join(requirements))
    kernel, tag = pins["sglang_sgl_kernel_version"], lab["sglang_cuda_wheel_tag"]
    return [build_sgl_kernel_wheel(WHEELHOUSE, kernel, tag),
            # Releases that fail a gate: crash the health gate (the upgrade tests' rollback), the others
            # the quality gate (the canary's).
            *[build_sgl_kernel_wheel(WHEELHOUSE, kernel, mode_wheel_tag(tag, mode), server_mode=mode)
              for mode in KERNEL_MODES],
            fetch_wheel("sglang", pins["sglang_version"], WHEELHOUSE),
            fetch_wheel("flashinfer-python", pins["sglang_flashinfer_version"], WHEELHOUSE),
            fetch_sdist("flash-attn", flash["flash_attn_version"], WHEELHOUSE)]


def inventory_hosts(inventory: Path) -> list[str]:
    """Every host named in a YAML inventory file, in order, without duplicates."""
    hosts: list[str] = []

    def walk(group: dict) -> None:
        for name in (group.get("hosts") or {}):
            if name not in hosts:
                hosts.append(name)
        for child in (group.get("children") or {}).values():
            walk(child or {})

    for group in (yaml.safe_load(inventory.read_text()) or {}).values():
        walk(group or {})
    return hosts


def write_inventory(nodes: int, prefix: str = "lab-gpu") -> Path:
    """A lab inventory of N nodes that shares inventory/lab's group_vars and host_vars."""
    folder = ROOT / ".lab" / f"{prefix}-fleet-{nodes}"
    folder.mkdir(parents=True, exist_ok=True)
    for vars_dir in ("group_vars", "host_vars"):
        link = folder / vars_dir
        if (ROOT / "inventory/lab" / vars_dir).is_dir() and not link.exists():
            link.symlink_to(ROOT / "inventory/lab" / vars_dir)
    hosts = folder / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {f"{prefix}-{i}": None for i in range(1, nodes + 1)}},
                                     "lab_nodes": {"children": {"gpu_nodes": None}}}))
    return hosts


def pod_name(inventory: Path) -> str:
    """One pod per lab inventory: inventory/lab -> sglang-fleet-lab, .lab/bench-gpu-fleet-4 -> ..."""
    return "sglang-fleet-" + inventory.resolve().parent.name


def ssh_key() -> Path:
    """The lab's client key, made once per checkout (never a key of the user's own)."""
    key = SSH_DIR / "id_ed25519"
    with ssh_dir_lock():
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sglang-fleet-lab", "-f", str(key)],
                           check=True)
    return key


@contextlib.contextmanager
def ssh_dir_lock():
    """Held while the lab's key or known_hosts is written: scenarios start their nodes at the same
    time (bin/test's lanes), and none may lose its entry to another's rewrite, or make a second key."""
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    SSH_DIR.chmod(0o700)
    with open(SSH_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def running_current(name: str, pod: str) -> bool:
    """The container runs in its pod, from the current image (a rebuilt image means a fresh node)."""
    out = podman("inspect", "--format", "{{.State.Running}} {{.Image}} {{.Pod}}", name, check=False)
    if out.returncode != 0:
        return False
    state, image, *in_pod = out.stdout.split()
    current = podman("image", "inspect", "--format", "{{.Id}}", IMAGE_CURRENT).stdout.strip()
    pod_id = podman("pod", "inspect", "--format", "{{.Id}}", pod, check=False).stdout.strip()
    return state == "true" and image == current and in_pod == [pod_id]


def ensure_pod(pod: str) -> None:
    if podman("pod", "exists", pod, check=False).returncode != 0:
        log(f"creating pod {pod} (one loopback for its nodes, no other network)")
        podman("pod", "create", "--name", pod, "--label", LABEL, "--network", "none", "--share", "net")


def authorize(name: str) -> None:
    """Let the lab's key in as ubuntu and record the node's own host key in the lab's known_hosts."""
    public = ssh_key().with_suffix(".pub").read_text()
    subprocess.run(["podman", "exec", "-i", name, "sh", "-c",
                    "install -d -m 0700 -o ubuntu -g ubuntu /home/ubuntu/.ssh && "
                    "cat > /home/ubuntu/.ssh/authorized_keys && "
                    "chown ubuntu:ubuntu /home/ubuntu/.ssh/authorized_keys && "
                    "chmod 0600 /home/ubuntu/.ssh/authorized_keys"], input=public, text=True, check=True)
    kind, key = podman("exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
    record_host_key(name, kind, key)


def record_host_key(name: str, kind: str, key: str) -> None:
    """The node's entry in the lab's known_hosts, replacing an earlier namesake's."""
    with ssh_dir_lock():
        lines = [line for line in (KNOWN_HOSTS.read_text().splitlines() if KNOWN_HOSTS.exists() else [])
                 if line.split(" ", 1)[0] != name]
        partial = KNOWN_HOSTS.with_suffix(".part")
        partial.write_text("\n".join(lines + [f"{name} {kind} {key}"]) + "\n")
        partial.rename(KNOWN_HOSTS)


def close_ssh(name: str) -> None:
    """Ends a ControlPersist master left to a node that is going away (its next namesake has new keys)."""
    subprocess.run(["ssh", "-o", "ControlPath=~/.ansible/cp/%C", "-O", "exit", "-l", "ubuntu", name],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def start_nodes(names: list[str], pod: str) -> None:
    ensure_pod(pod)
    ssh_key()
    for name in names:
        if running_current(name, pod):
            log(f"{name} is running")
            continue
        close_ssh(name)
        podman("rm", "-f", name, check=False)
        log(f"starting {name}")
        podman("run", "-d", "--name", name, "--hostname", name, "--label", LABEL, "--pod", pod,
               # SYS_ADMIN: systemd's sandboxing (ProtectSystem=, PrivateTmp=...) needs namespaces.
               # NET_ADMIN: a router restart's hold of new connections (nftables), in the pod's own
               # network namespace, which holds nothing but the fleet's loopback.
               "--systemd=always", "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN",
               "--volume", f"{WHEELHOUSE}:/srv/lab-wheelhouse:ro",
               "--volume", f"{aptrepo.REPO}:/srv/lab-apt:ro",
               IMAGE_CURRENT, "/sbin/init")
    wait_booted(names)
    for name in names:
        authorize(name)
    start_hub(pod)


def hub_name(pod: str) -> str:
    return f"{pod}-hub"


def start_hub(pod: str) -> None:
    """The fleet's stand-in for the Hugging Face Hub (files/lab/hub_fixture.py) on HUB_ADDRESS in the pod."""
    name = hub_name(pod)
    if running_current(name, pod):
        return
    podman("rm", "-f", name, check=False)
    log(f"starting {name} on http://{HUB_ADDRESS}")
    host, port = HUB_ADDRESS.split(":")
    podman("run", "-d", "--name", name, "--label", LABEL, "--pod", pod,
           "--volume", f"{ROOT / 'files/lab'}:/srv/lab-files:ro", IMAGE_CURRENT,
           "python3", "/srv/lab-files/hub_fixture.py", "--address", host, "--port", port,
           "--rate-mb", str(HUB_RATE_MB), "--stats", "/run/hub-stats.json")


def prepare() -> None:
    """What every lab node runs from or mounts: the image, the wheelhouse, the apt mirror."""
    build_image()
    fill_wheelhouse()
    aptrepo.build()


def up(inventory: Path, provision: bool = True) -> None:
    prepare()
    start_nodes(inventory_hosts(inventory), pod_name(inventory))
    if provision:
        provision_nodes(inventory)


def provision_inputs(inventory: Path) -> str:
    """A digest of all that provision.yml reads: the playbook, the files it copies, the inventory's folder."""
    lab = ROOT / "files/lab"
    files = [lab / "provision.yml", lab / "nvidia-smi.py", lab / "sglang_lab_server.py", lab / "sglang_lab_fusion.py",
             lab / "sglang_lab_acceptance.py", ROOT / "plugins/module_utils/sglang_args.py",
             ROOT / "roles/sglang_quality/files/gsm8k/test.jsonl"]
    named = [(path.relative_to(ROOT), path) for path in files]
    # group_vars and host_vars are links in a generated inventory's folder: followed.
    folder = inventory.resolve().parent
    for here, _, names in sorted(os.walk(folder, followlinks=True)):
        named += [(Path(here, name).relative_to(folder), Path(here, name)) for name in sorted(names)]
    # Each file by its place in the checkout or the inventory's folder, not by where the checkout is:
    # the same lab reached from a second clone (a worktree) is not provisioned again.
    digest = hashlib.sha256()
    for name, path in named:
        digest.update(str(name).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def provision_stamp(inventory: Path) -> Path:
    return ROOT / ".cache/lab-provisioned" / f"{pod_name(inventory)}.json"


def provision_state(inventory: Path) -> dict:
    """What a provisioning would start from: its inputs, and the very containers it would reach."""
    containers = {name: podman("inspect", "--format", "{{.Id}}", name, check=False).stdout.strip()
                  for name in inventory_hosts(inventory)}
    return {"inputs": provision_inputs(inventory), "containers": containers}


def provision_nodes(inventory: Path) -> None:
    """provision.yml over the inventory, unless these containers were provisioned from these inputs already.

    A rerun of bin/lab over a running lab changes nothing there, and a playbook run costs seconds; a
    container started afresh (a new id) or any input changed provisions every node again.
    """
    stamp, state = provision_stamp(inventory), provision_state(inventory)
    if stamp.exists() and json.loads(stamp.read_text()) == state:
        log("the simulated hardware is provisioned already (same containers, same inputs)")
        return
    stamp.unlink(missing_ok=True)
    log("provisioning the simulated hardware")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory),
                    str(ROOT / "files/lab/provision.yml")], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL if os.environ.get("LAB_QUIET") else None)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(state))


def wait_booted(names: list[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            state = podman("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            if time.monotonic() > deadline:
                sys.exit(f"lab: {name} did not boot within {timeout:.0f}s (systemd says {state!r})")
            time.sleep(0.5)


def remove_nodes(names: list[str], pod: str | None) -> None:
    for name in names:
        if podman("container", "exists", name, check=False).returncode == 0:
            log(f"removing {name}")
            close_ssh(name)
            podman("rm", "-f", "-t", "0", name)
    pods = [pod] if pod else podman("pod", "ps", "--filter", f"label={LABEL}", "--format", "{{.Name}}").stdout.split()
    for name in pods:
        left = podman("ps", "-a", "--filter", f"pod={name}", "--format", "{{.Names}} {{.IsInfra}}", check=False)
        if podman("pod", "exists", name, check=False).returncode == 0 and \
                all(line.endswith("true") or line.split()[0] == hub_name(name) for line in left.stdout.splitlines()):
            log(f"removing pod {name}")
            podman("pod", "rm", "-f", name)


def down(inventory: Path | None) -> None:
    if inventory is None:
        listed = podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}} {{.IsInfra}}").stdout
        remove_nodes([line.split()[0] for line in listed.splitlines() if line.endswith("false")], None)
    else:
        remove_nodes(inventory_hosts(inventory), pod_name(inventory))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("image", help="build the lab node image if its recipe changed")
    sub.add_parser("wheelhouse", help="fetch the wheels the lab nodes install")
    sub.add_parser("aptrepo", help="build the lab's signed CUDA apt mirror")
    for name in ("up", "down"):
        p = sub.add_parser(name)
        p.add_argument("-i", "--inventory", type=Path, default=DEFAULT_INVENTORY)
        p.add_argument("--pod", help="with --hosts: the pod of the named nodes")
        p.add_argument("--hosts", help="comma-separated node names, instead of an inventory")
    sub.choices["up"].add_argument("--no-provision", action="store_true",
                                   help="start and authorize only (molecule provisions in its prepare step)")
    sub.choices["down"].add_argument("--all", action="store_true", help="every lab container")
    inv = sub.add_parser("inventory", help="write a lab inventory of N nodes")
    inv.add_argument("--nodes", type=int, required=True)
    inv.add_argument("--prefix", default="lab-gpu")
    args = parser.parse_args(argv)
    if shutil.which("podman") is None:
        sys.exit("lab: podman is not installed; run bin/setup first")
    if args.command == "image":
        print(build_image())
    elif args.command == "aptrepo":
        print(aptrepo.build().relative_to(ROOT))
    elif args.command == "wheelhouse":
        for wheel in fill_wheelhouse():
            print(wheel.relative_to(ROOT))
    elif args.command == "inventory":
        print(write_inventory(args.nodes, args.prefix).relative_to(ROOT))
    elif args.hosts or args.pod:
        if not (args.hosts and args.pod):
            parser.error("--pod and --hosts go together")
        names = args.hosts.split(",")
        if args.command == "up":
            prepare()
            start_nodes(names, args.pod)
        else:
            remove_nodes(names, args.pod)
    elif args.command == "up":
        up(args.inventory, provision=not args.no_provision)
    else:
        down(None if args.all else args.inventory)


if __name__ == "__main__":
    main()
