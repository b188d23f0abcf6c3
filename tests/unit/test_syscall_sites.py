"""tools/syscall_sites.py: the killed set from systemd's groups, and call sites found in real machine code."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import syscall_sites as tool
from conftest import FIXTURES, ROOT

GROUPS = """@default
    # System calls always permitted
    getpid
@debug
    pidfd_getfd
    ptrace
@process
    pidfd_open
    @default
@privileged
    @chown
    bpf
@chown
    chown
@system-service
    @process
    @chown
    ioctl
"""


def test_the_killed_set_is_system_service_less_privileged_of_every_known_call():
    numbers = tool.unistd_numbers("#define __NR_getpid 39\n#define __NR_ioctl 16\n#define __NR_ptrace 101\n"
                                  "#define __NR_chown 92\n#define __NR_bpf 321\n#define __NR_pidfd_open 434\n"
                                  "#define __NR_pidfd_getfd 438\n")
    assert numbers[462] == "mseal"  # newer than the headers: added, and unknown to the groups
    killed = tool.killed(tool.filter_groups(GROUPS), numbers)
    assert set(killed.values()) == {"ptrace", "chown", "bpf", "pidfd_getfd"} | set(tool.NEWER.values())


def test_the_fixture_is_what_systemd_252_kills():
    """Made with `tools/syscall_sites.py killed` on Debian 12 (systemd 252); remade where one is here."""
    fixture = json.loads((FIXTURES / "syscall-filter/killed-systemd-252-x86_64.json").read_text())
    version = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True).stdout \
        if shutil.which("systemd-analyze") else ""
    if not version.startswith("systemd 252 ") or not os.path.exists(tool.UNISTD):
        pytest.skip("needs systemd 252's systemd-analyze and the kernel headers")
    made = subprocess.run([sys.executable, str(ROOT / "tools/syscall_sites.py"), "killed"],
                          capture_output=True, text=True, check=True).stdout
    assert json.loads(made) == fixture


C_SOURCE = r"""
#include <sys/syscall.h>
#include <unistd.h>
long take_fd(long pidfd, long fd) { return syscall(438, pidfd, fd, 0); }
long open_pidfd(long pid) { return syscall(434, pid, 0); }
long raw_ptrace(void) {
    long r;
    __asm__ volatile ("mov $101, %%eax\n\tsyscall" : "=a"(r) :: "rcx", "r11", "memory");
    return r;
}
"""


def test_call_sites_are_found_in_a_compiled_library(tmp_path):
    if not shutil.which("cc") or not shutil.which("objdump") or not shutil.which("readelf"):
        pytest.skip("needs a C compiler and binutils")
    (tmp_path / "lib.c").write_text(C_SOURCE)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "lib.so"), str(tmp_path / "lib.c")],
                   check=True)
    killed = tmp_path / "killed.json"
    killed.write_text(json.dumps({"438": "pidfd_getfd", "101": "ptrace"}))
    out = subprocess.run([sys.executable, str(ROOT / "tools/syscall_sites.py"), "scan", str(killed), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["lib.so", "    pidfd_getfd(438) in take_fd", "    ptrace(101) in raw_ptrace"]
