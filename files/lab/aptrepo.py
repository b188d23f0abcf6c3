#!/usr/bin/env python3
"""Lab only: build the local apt mirrors: the signed CUDA one with the packages of
files/lab/cuda/packages.yml, and a small distro one (debian/) with the real Debian packages the roles
install that the lab image, like a cloud image, lacks (DISTRO_PACKAGES, fetched with apt-get download).

Lays it out as NVIDIA's CUDA repository is (a flat repository per distro and arch, e.g.
debian12/x86_64/ with Packages, Release, InRelease and Release.gpg), signed with a throwaway test
key whose public half is lab-archive-key.asc. Rebuilt only when the package list or this file
changes. Needs dpkg-deb, dpkg-scanpackages and gpg.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REPO = ROOT / ".cache/lab-apt"
SUITE = "debian12/x86_64"
SPEC = HERE / "cuda/packages.yml"
DISTRO = "debian"
# python3-debian: what deb822_repository needs on the host; with its dependencies. Then the monitoring
# stage's Prometheus, Alertmanager and node_exporter, with the web assets Prometheus depends on.
DISTRO_PACKAGES = ("python3-debian", "python3-chardet", "python3-pkg-resources",
                   "prometheus", "prometheus-alertmanager", "prometheus-node-exporter",
                   "fonts-glyphicons-halflings", "javascript-common", "libjs-bootstrap", "libjs-bootstrap4",
                   "libjs-d3", "libjs-eonasdan-bootstrap-datetimepicker", "libjs-jquery-hotkeys", "libjs-moment",
                   "libjs-moment-timezone", "libjs-mustache", "libjs-popper.js", "libjs-rickshaw")

NVCC = """#!/bin/sh
# Lab stand-in for CUDA {cuda}'s nvcc: prints what the real one prints for --version.
case "$1" in
  --version|-V) cat <<'TXT'
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on {nvcc_built}
Cuda compilation tools, release {cuda}, {nvcc_version}
Build {nvcc_build}
TXT
  exit 0 ;;
esac
echo "nvcc fatal   : lab nodes have no CUDA compiler" >&2
exit 1
"""

POSTINST = """#!/bin/sh
set -e
# As NVIDIA's cuda-toolkit-{major}-{minor}-config-common: register the alternatives, priority {prio}.
if [ "$1" = configure ]; then
  update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-{cuda} {prio}
  update-alternatives --install /usr/local/cuda-{major} cuda-{major} /usr/local/cuda-{cuda} {prio}
fi
"""

PRERM = """#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
  update-alternatives --remove cuda /usr/local/cuda-{cuda}
  update-alternatives --remove cuda-{major} /usr/local/cuda-{cuda}
fi
"""


def fingerprint() -> str:
    digest = hashlib.sha256(SPEC.read_bytes() + Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def build_deb(pkg: dict, out: Path) -> None:
    major, minor = pkg["cuda"].split(".")
    fields = dict(pkg, major=major, minor=minor, prio=int(major) * 10 + int(minor))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # The package's ./ entry takes this directory's mode: mkdtemp's 0700 would make `dpkg-deb -x
        # pkg.deb /` (a runfile-style install) shut every user but root out of the whole host.
        root.chmod(0o755)
        home = root / f"usr/local/cuda-{pkg['cuda']}"
        (home / "bin").mkdir(parents=True)
        (home / "lib64").mkdir()
        (home / "include").mkdir()
        (home / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "%s"}}\n' % pkg["version"])
        nvcc = home / "bin/nvcc"
        nvcc.write_text(NVCC.format(**fields))
        nvcc.chmod(0o755)
        debian = root / "DEBIAN"
        debian.mkdir()
        (debian / "control").write_text(
            f"Package: {pkg['name']}\nVersion: {pkg['version']}\nArchitecture: amd64\n"
            "Maintainer: sglang-fleet lab <lab@localhost>\nDepends: dpkg\nSection: devel\nPriority: optional\n"
            f"Description: CUDA Toolkit {pkg['cuda']} (sglang-fleet lab stand-in)\n")
        for name, text in (("postinst", POSTINST), ("prerm", PRERM)):
            (debian / name).write_text(text.format(**fields))
            (debian / name).chmod(0o755)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root),
                        str(out / f"{pkg['name']}_{pkg['version']}_amd64.deb")], check=True, stdout=subprocess.DEVNULL)


def download_distro_packages(out: Path) -> None:
    """The real Debian packages, as the controller's apt sources (Debian 12, as the image) serve them."""
    out.mkdir(parents=True)
    cmd = ["apt-get", "download", "-q", *DISTRO_PACKAGES]
    if subprocess.run(cmd, cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(cmd, cwd=out, check=True, stdout=subprocess.DEVNULL)


def write_index(suite: Path, label: str) -> None:
    """Packages, Packages.gz and Release of a flat repository."""
    packages = subprocess.run(["dpkg-scanpackages", "-m", "."], cwd=suite, check=True, capture_output=True,
                              text=True).stdout
    (suite / "Packages").write_text(packages)
    (suite / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    lines = ["Origin: sglang-fleet lab", f"Label: {label}", "Date: Wed, 01 Jan 2025 00:00:00 UTC",
             "Architectures: amd64 all", "Suite: /"]
    for algo, name in (("md5", "MD5Sum"), ("sha256", "SHA256")):
        lines.append(f"{name}:")
        for f in ("Packages", "Packages.gz"):
            data = (suite / f).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {f}")
    (suite / "Release").write_text("\n".join(lines) + "\n")


def key_fingerprint(colons: str) -> str:
    """The one primary key's fingerprint in `gpg --with-colons` output: the fpr: line after its pub: line."""
    lines = [line.split(":") for line in colons.splitlines()]
    found = [fields[9] for before, fields in zip(lines, lines[1:]) if before[0] == "pub" and fields[0] == "fpr"]
    if len(found) != 1:
        raise SystemExit("lab: the archive keyring holds %d keys, not one" % len(found))
    return found[0]


def gpg(home: Path, *args: str) -> None:
    subprocess.run(["gpg", "--batch", "--quiet", "--homedir", str(home), *args], check=True)


def build() -> Path:
    stamp = REPO / ".fingerprint"
    if stamp.exists() and stamp.read_text() == fingerprint():
        return REPO
    shutil.rmtree(REPO, ignore_errors=True)
    suite = REPO / SUITE
    suite.mkdir(parents=True)
    for pkg in yaml.safe_load(SPEC.read_text()):
        build_deb(pkg, suite)
    write_index(suite, "sglang-fleet lab CUDA mirror")
    download_distro_packages(REPO / DISTRO)
    write_index(REPO / DISTRO, "sglang-fleet lab distro mirror")
    home = Path(tempfile.mkdtemp(prefix="lab-gpg-"))
    try:
        os.chmod(home, 0o700)
        gpg(home, "--passphrase", "", "--quick-generate-key", "sglang-fleet lab archive <lab@localhost>",
            "rsa3072", "sign", "never")
        gpg(home, "--armor", "--output", str(REPO / "lab-archive-key.asc"), "--export")
        # The key is new at every build: its fingerprint, as gpg says it, is written beside it for the lab
        # inventory to pin (cuda_toolkit_repo_key_fingerprint), from the build, not from what a node reads.
        listing = subprocess.run(["gpg", "--batch", "--homedir", str(home), "--with-colons", "--fingerprint"],
                                 check=True, capture_output=True, text=True).stdout
        (REPO / "lab-archive-key.fingerprint").write_text(key_fingerprint(listing) + "\n")
        gpg(home, "--armor", "--detach-sign", "--output", str(suite / "Release.gpg"), str(suite / "Release"))
        gpg(home, "--clearsign", "--output", str(suite / "InRelease"), str(suite / "Release"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    stamp.write_text(fingerprint())
    return REPO


if __name__ == "__main__":
    print(build())
