"""The lab's CUDA packages unpack as real ones do: a runfile-style `dpkg-deb -x pkg.deb /` leaves the
host usable for a non-root user (the cuda scenario's prepare step, now run as ubuntu over SSH)."""
import subprocess

import yaml

import aptrepo


def test_every_directory_of_a_lab_cuda_package_is_world_traversable(tmp_path):
    pkg = yaml.safe_load(aptrepo.SPEC.read_text())[0]
    aptrepo.build_deb(pkg, tmp_path)
    (deb,) = tmp_path.glob("*.deb")
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    dirs = {line.split()[-1]: line.split()[0] for line in listing.splitlines() if line.startswith("d")}
    assert dirs["./"] == "drwxr-xr-x"  # mkdtemp's 0700 here made `/` root-only after the extraction
    assert all(mode == "drwxr-xr-x" for mode in dirs.values()), dirs
