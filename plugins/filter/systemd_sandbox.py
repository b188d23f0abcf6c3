# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server unit's sandbox, in one place: the unit renders it, and the fusion self-test runs under it
as a transient unit (systemd-run --property=...), so a hardening line that breaks the fused kernel shows
before the restart, as an `error` verdict that names the directive."""
from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: sglang_server_sandbox
short_description: The server unit's sandbox directives, in the unit's order
description:
  - Every [Service] directive of the server unit that confines its process (resource limits, devices,
    file system, privileges, system calls, address families), as a list of
    C({directive, value, comment, gap}); the unit template renders it, and
    C(sglang_selftest_properties) turns the same list into systemd-run properties.
positional: _input
options:
  _input:
    description: The DeviceAllow= entries (the role's __sglang_server_device_allow).
    type: list
    elements: str
    required: true
  home:
    description: The service's home, its one writable path.
    type: str
    required: true
  limit_nofile:
    description: LimitNOFILE=.
    type: raw
    required: true
  extra:
    description: More hardening lines, C(Directive=value), appended after the unit's own.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: The sandbox as the unit holds it
  ansible.builtin.debug:
    msg: "{{ ['char-nvidia* rw'] | sglang_server_sandbox('/var/lib/sglang', 1048576) }}"
"""

RETURN = r"""
_value:
  description: "[{directive, value, comment (lines, without '# '), gap (a blank line before it)}]"
  type: list
"""

HARDENING = [
    "Hardening, as far as GPU serving allows: the GPUs are the only devices, the system is read-only",
    "but for the service's home, no privilege can be gained. Not used: PrivateDevices (hides the",
    "GPUs), MemoryDenyWriteExecute (Triton and CUDA JIT need W+X pages), PrivateUsers.",
]
SYSCALL_EVIDENCE = [
    "Kills pidfd_getfd (in @debug), decided on the code of what sglang 0.5.9 loads: torch 2.9.1 opens",
    "another process's CUDA tensor from an expandable segment with it (CUDACachingAllocator.cpp,",
    "MemHandleCacheEntry), flashinfer 0.6.3's MoE all-to-all its peers' memory (comm/mnnvl.py); the flag",
    "lint refuses expandable_segments:True and --moe-a2a-backend flashinfer instead. NCCL, sgl-kernel's",
    "all-reduces and the allreduce fusion never call it (plugins/module_utils/sglang_sandbox.py).",
]

# The directives sglang_server_hardening_extra may add: each one that systemd 252 takes as a transient
# property with the unit file's spelling (systemd-run --property=, tested on the lab's systemd 252),
# so the self-test can run under every line the unit holds. Anything else (a typo, a directive of
# another section, one systemd-run cannot set) is refused before any change.
EXTRA_DIRECTIVES = frozenset({
    "CapabilityBoundingSet", "DeviceAllow", "InaccessiblePaths", "IPAddressDeny", "LimitMEMLOCK",
    "LimitNOFILE", "LockPersonality", "MemoryDenyWriteExecute", "NoNewPrivileges", "PrivateIPC",
    "PrivateNetwork", "ProtectClock", "ProtectControlGroups", "ProtectHome", "ProtectHostname",
    "ProtectKernelLogs", "ProtectKernelModules", "ProtectKernelTunables", "ProtectProc", "ProtectSystem",
    "ReadOnlyPaths", "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime",
    "RestrictSUIDSGID", "SystemCallArchitectures", "SystemCallFilter",
})

# A transient unit takes a directive under the unit file's name unless listed here. On systemd 252
# every directive the server unit holds is set as it is spelled in the unit (the lab's systemd 252
# accepted each one with its value as one --property= word, DeviceAllow's "char-nvidia* rw" and
# RestrictAddressFamilies' list included, and the self-test recorded the result: NoNewPrivs 1,
# Seccomp 2, an empty bounding set). None is left out and none is respelled: an entry here would
# say which and why.
TRANSIENT_SPELLING: dict = {}


def _entry(directive, value, comment=(), gap=False):
    return {"directive": directive, "value": str(value), "comment": list(comment), "gap": gap}


def parse_line(line):
    """(directive, value) of one `Directive=value` hardening line, or AnsibleFilterError."""
    directive, sep, value = str(line).partition("=")
    directive = directive.strip()
    if not sep or directive not in EXTRA_DIRECTIVES or "\n" in value:
        raise AnsibleFilterError(
            "sglang_server_hardening_extra: %r is not Directive=value with a directive the self-test's "
            "transient unit can hold too (one of %s)" % (line, ", ".join(sorted(EXTRA_DIRECTIVES))))
    return directive, value.strip()


# --- every unit's sandbox, from one base ---------------------------------------------------------------

# The sandbox every unit the project writes or starts begins from, in the units' order: a service that
# reaches no device, writes nothing but the paths it is given, gains no privilege, sees no other process
# and calls only what a system service calls. Each unit's profile (UNITS) takes from it or adds to it,
# line by line, each change with its reason; tests/playbooks/test_unit_exposure.py scores every unit
# with `systemd-analyze security` against a ceiling. Keys are directives, but for the second
# SystemCallFilter= (the deny list), "SystemCallFilter~".
BASE = (
    ("NoNewPrivileges", "yes"), ("CapabilityBoundingSet", ""), ("AmbientCapabilities", ""),
    ("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
    ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"), ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"), ("ProtectClock", "yes"), ("ProtectHostname", "yes"),
    ("ProtectProc", "invisible"), ("ProcSubset", "pid"), ("RestrictNamespaces", "yes"),
    ("RestrictRealtime", "yes"), ("RestrictSUIDSGID", "yes"), ("LockPersonality", "yes"),
    ("MemoryDenyWriteExecute", "yes"), ("RemoveIPC", "yes"), ("UMask", "0077"),
    ("SystemCallArchitectures", "native"), ("SystemCallFilter", "@system-service"),
    ("SystemCallFilter~", "~@privileged @resources"), ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
)
_BASE_KEYS = [key for key, _ in BASE]

# Each unit's changes to BASE. headline: the comment above its first line. set: {key: value, or None to
# leave the line out}. add: [(after key, directive, value)], lines BASE has not. comment: {key: lines
# above that line}. why: {key or added directive: the reason}, one for every change (a test holds it so),
# rendered in docs/security.md. A unit given devices replaces PrivateDevices=yes with DevicePolicy=closed
# and a DeviceAllow= per device; its writable paths are ReadWritePaths= after ProtectSystem=.
PRIVATE_USERS = ("Debian's unit runs it with PrivateUsers=true, and systemd 252 in a container cannot set up "
                 "that user namespace under a hidepid /proc: the unit never starts (systemd #29656)")
MONITORING_UMASK = ("what it writes stays readable to the prometheus group, which Prometheus, Alertmanager and "
                    "node_exporter share, as the drop-in always had it")
UNITS = {
    "server": {
        "headline": HARDENING,
        "set": {"ProcSubset": "all", "MemoryDenyWriteExecute": None, "UMask": "0027",
                "SystemCallFilter~": "~@privileged", "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK"},
        "comment": {"SystemCallFilter": SYSCALL_EVIDENCE,
                    "SystemCallFilter~": ["Not @resources: NCCL and PyTorch pin threads and memory (sched_setaffinity, mbind)."]},
        "why": {"ProcSubset": "psutil, which sglang loads, reads /proc/meminfo and /proc/stat, outside the pid subset",
                "MemoryDenyWriteExecute": "Triton and the CUDA JIT need W+X pages",
                "UMask": "what it writes stays readable to its own group, as the unit always had it",
                "SystemCallFilter~": "NCCL and PyTorch pin threads and memory (sched_setaffinity, mbind: @resources)",
                "RestrictAddressFamilies": "NCCL lists the network interfaces (getifaddrs), which asks over netlink"},
    },
    "router": {
        "headline": ["Hardening: a network service with no devices, no writable system, no privilege to gain."],
        "set": {}, "why": {},
    },
    "router-healer": {
        "headline": ["Hardening: it talks HTTP to the router and the workers and removes lease files, nothing more."],
        "set": {"RemoveIPC": None},
        "why": {"RemoveIPC": "it runs as the router's user, whose IPC objects RemoveIPC would remove at the end of each pass"},
    },
    "gpu-collector": {
        "headline": ["Hardening: the GPUs' device nodes and nothing else; writes only the textfile and its state."],
        "set": {"ProtectKernelLogs": None, "UMask": None, "RestrictAddressFamilies": "AF_UNIX"},
        "add": [("PrivateTmp", "PrivateNetwork", "yes"), ("SystemCallFilter", "SystemCallFilter", "syslog")],
        "comment": {"SystemCallFilter+syslog": [
            "dmesg reads the kernel log with syslog(2), which @system-service leaves out: without this line the",
            "filter kills it (SIGSYS) on a host with no journal, where kernel.dmesg_restrict answers instead."]},
        # The rest of the base held on a real GPU host, the real nvidia-smi answering under each line and
        # under all of them (tests/fixtures/hosts/h100-device/monitoring/unit, "tightening").
        "why": {"ProtectKernelLogs": "it reads the kernel log for XID errors (dmesg, journalctl -k), which this "
                                     "line denies (/dev/kmsg, syslog(2))",
                "UMask": "the textfile keeps the mode it always had (0644): a site's own exporter may read the "
                         "directory as another user",
                "RestrictAddressFamilies": "it talks to no network: AF_UNIX only",
                "PrivateNetwork": "it talks to no network",
                "SystemCallFilter": "syslog: dmesg reads the kernel log with it where there is no journal; @system-service "
                                    "leaves it out, and on a real GPU host the filter killed dmesg (SIGSYS)"},
    },
    "model-peer": {
        "headline": [],
        "set": {}, "why": {},
    },
    "prometheus": {
        "headline": [],
        "set": {"ProtectProc": None, "ProcSubset": None, "UMask": "0027"},
        "comment": {"RestrictSUIDSGID": ["No ProtectProc= nor ProcSubset=: " + PRIVATE_USERS + "."]},
        "why": {"ProtectProc": PRIVATE_USERS, "ProcSubset": PRIVATE_USERS,
                "UMask": MONITORING_UMASK},
    },
    "alertmanager": {
        "headline": [],
        "set": {"ProcSubset": None, "UMask": "0027"},
        "why": {"ProcSubset": "not yet tried under Debian's unit in the lab (its ProtectProc=invisible was)",
                "UMask": MONITORING_UMASK},
    },
    "node-exporter": {
        "headline": [],
        "set": {"ProtectHome": "read-only", "ProtectClock": None, "ProtectProc": None, "ProcSubset": None,
                "SystemCallFilter~": None, "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK"},
        "add": [("SystemCallFilter", "SystemCallFilter", "adjtimex")],
        "comment": {"SystemCallFilter+adjtimex": [
            "The timex collector reads the kernel clock's state with adjtimex (@clock's); setting the clock would need",
            "CAP_SYS_TIME, which the empty bounding set leaves out."]},
        "why": {"ProtectHome": "the filesystem collector reads the size of the file systems mounted under /home",
                "ProtectClock": "it denies adjtimex, with which the timex collector reads the kernel clock's state",
                "ProtectProc": "its collectors read every process's /proc entries (processes, threads)",
                "ProcSubset": "its collectors read /proc/meminfo, /proc/stat and the rest of /proc",
                "SystemCallFilter~": "its allow list was traced on Debian 12's daemon with no deny list, and a deny list not tried",
                "RestrictAddressFamilies": "the network collectors read the interfaces over netlink",
                "SystemCallFilter": "adjtimex: the timex collector reads the kernel clock's state with it (@clock's)"},
    },
}


def unit_hardening(unit, devices=(), writable=()):
    """The hardening directives of `unit` (a name in UNITS), in its unit's order: BASE with the unit's
    changes, its devices (DevicePolicy=closed and a DeviceAllow= each; none: PrivateDevices=yes) and its
    writable paths. Each entry is {directive, value, comment (lines, without '# '), gap}."""
    if unit not in UNITS:
        raise AnsibleFilterError("fleet_unit_hardening: no unit %r (one of %s)" % (unit, ", ".join(sorted(UNITS))))
    if any(not str(path).startswith("/") for path in writable):
        raise AnsibleFilterError("fleet_unit_hardening: %s: a writable path must be absolute, not %r"
                                 % (unit, [p for p in writable if not str(p).startswith("/")][0]))
    profile = UNITS[unit]
    changes, comments = profile.get("set", {}), profile.get("comment", {})
    added = {}
    for after, directive, value in profile.get("add", ()):
        added.setdefault(after, []).append((directive + "+" + value if directive in _BASE_KEYS else directive,
                                            directive, value))
    if devices:
        entries = [_entry("DevicePolicy", "closed")] + [_entry("DeviceAllow", device) for device in devices]
    else:
        entries = [_entry("PrivateDevices", "yes")]
    for key, value in BASE:
        value = changes.get(key, value)
        if value is not None:
            entries.append(_entry(key.rstrip("~"), value, comments.get(key, ())))
        if key == "ProtectSystem":
            entries += [_entry("ReadWritePaths", path) for path in writable]
        for name, directive, extra in added.get(key, ()):
            entries.append(_entry(directive, extra, comments.get(name, ())))
    entries[0] = dict(entries[0], comment=list(profile.get("headline", ())) + entries[0]["comment"])
    return entries


def unit_directives(entries):
    """The entries as unit-file lines: each comment line as `# ...`, a gap as a blank line."""
    lines = []
    for entry in entries:
        lines += [""] if entry["gap"] else []
        lines += ["# " + line for line in entry["comment"]]
        lines.append("%s=%s" % (entry["directive"], entry["value"]))
    return "\n".join(lines)


def server_sandbox(device_allow, home, limit_nofile, extra=()):
    """The server unit's sandbox directives, in the unit's order (see DOCUMENTATION)."""
    if not home or not str(home).startswith("/"):
        raise AnsibleFilterError("sglang_server_sandbox: the home must be an absolute path, not %r" % (home,))
    entries = [_entry("LimitNOFILE", limit_nofile), _entry("LimitMEMLOCK", "infinity")]
    hardening = unit_hardening("server", list(device_allow), [home])
    entries += [dict(hardening[0], gap=True)] + hardening[1:]
    for number, line in enumerate(extra or ()):
        directive, value = parse_line(line)
        entries.append(_entry(directive, value, ["sglang_server_hardening_extra:"] if number == 0 else ()))
    return entries


def selftest_properties(sandbox, writable=()):
    """systemd-run --property= words for the fusion self-test: every sandbox entry, then the self-test's
    own writable paths (its verdict cache) as ReadWritePaths= of their own, which add to the unit's."""
    words = []
    for entry in sandbox:
        directive = TRANSIENT_SPELLING.get(entry["directive"], entry["directive"])
        words.append("--property=%s=%s" % (directive, entry["value"]))
    words += ["--property=ReadWritePaths=%s" % path for path in writable]
    return words


# --- what a sandbox denial looks like, and which directive it names ---------------------------------

# (what it is, a pattern over the self-test's reason and stderr, the directives it names)
DENIALS = [
    ("killed by SIGSYS: a system call the seccomp filter kills",
     re.compile(r"SIGSYS|status=SYS\b|signal 31\b|exited with -31\b"), ("SystemCallFilter", "SystemCallArchitectures")),
    ("EPERM opening a device node: the unit's device cgroup refuses it",
     re.compile(r"\[Errno 1\] Operation not permitted: '/dev/[^']*'"), ("DevicePolicy", "DeviceAllow")),
    ("EROFS: a write outside the unit's writable paths",
     re.compile(r"\[Errno 30\] Read-only file system(: '[^']*')?"), ("ProtectSystem", "ReadWritePaths")),
    ("EAFNOSUPPORT: a socket of an address family the unit does not allow",
     re.compile(r"\[Errno 97\] Address family not supported by protocol"), ("RestrictAddressFamilies",)),
]


def _named(sandbox, directives, writable):
    """The unit's own lines of those directives, as the unit holds them."""
    lines = ["%s=%s" % (e["directive"], e["value"]) for e in sandbox if e["directive"] in directives]
    if "ReadWritePaths" in directives:
        lines += ["ReadWritePaths=%s" % path for path in writable]
    return lines


def sandbox_denial(text, sandbox, writable=()):
    """{kind, directives, evidence} for the first denial the text shows, or None."""
    for kind, pattern, directives in DENIALS:
        match = pattern.search(text or "")
        if match:
            return {"kind": kind, "directives": _named(sandbox, directives, writable) or list(directives),
                    "evidence": match.group(0)}
    return None


def selftest_sandboxed(systemd_booted, systemd_run_rc, system_bus=True):
    """{sandboxed, why}: whether the self-test can run as a transient unit here. systemd_booted: whether
    /run/systemd/system exists (sd_booted(3): systemd is PID 1); systemd_run_rc: `systemd-run --version`'s
    exit status (anything but 0: missing or broken); system_bus: whether D-Bus's system bus socket
    (/run/dbus/system_bus_socket) exists. systemd-run --wait --pipe follows its unit over that bus: on
    the real GPU host with systemd 252 and no D-Bus it fails with "Failed to connect to bus", and over
    systemd's private socket instead with "Invalid request descriptor"
    (tests/fixtures/hosts/h200-driver580/units-under-systemd)."""
    if not systemd_booted:
        return {"sandboxed": False, "why": "systemd is not PID 1 here (no /run/systemd/system): the self-test ran "
                                           "as the service user outside the server unit's sandbox"}
    if int(systemd_run_rc) != 0:
        return {"sandboxed": False, "why": "systemd-run is missing here (rc %d): the self-test ran as the service "
                                           "user outside the server unit's sandbox" % int(systemd_run_rc)}
    if not system_bus:
        return {"sandboxed": False, "why": "no D-Bus system bus here (/run/dbus/system_bus_socket), which systemd-run "
                                           "--wait needs: the self-test ran as the service user outside the server "
                                           "unit's sandbox"}
    return {"sandboxed": True, "why": "ran as a transient unit under the server unit's sandbox"}


def _last_json(stdout):
    for line in reversed((stdout or "").splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "status" in value:
            return value
    return None


def selftest_verdict(run, sandbox, where, writable=()):
    """The self-test's verdict from its run (a command result: rc, stdout, stderr), with where it ran.

    where: selftest_sandboxed()'s answer, whether it ran as a transient unit under `sandbox`, and why.
    A run that meets the sandbox (a rank killed by SIGSYS, EPERM on a /dev node, EROFS, a refused
    address family) is an `error` naming the directive, never a `fail`: the GPUs were not judged,
    the unit's hardening stopped the test, and the server would meet it at its start. A run that gave
    no verdict at all (the self-test itself died, or systemd-run refused the unit) is an `error` too.
    """
    rc, stdout, stderr = int(run.get("rc", 1)), run.get("stdout", ""), run.get("stderr", "")
    result = _last_json(stdout)
    sandboxed = bool(where["sandboxed"])
    if result is None:
        tail = "\n".join((stderr or "").strip().splitlines()[-12:])
        result = {"status": "error", "cached": False,
                  "reason": "the self-test gave no verdict (exit %d)%s" % (rc, ": " + tail if tail else "")}
    denial = sandbox_denial(result.get("reason", "") + "\n" + (stderr or ""), sandbox, writable) \
        if sandboxed and result.get("status") in ("fail", "error") else None
    if denial:
        result = dict(result, status="error", cached=False, reason=(
            "the server unit's sandbox stopped the self-test, %s (%s): %s; the server would meet it at its "
            "start, fix that line or what the test ran" % (" ".join(denial["directives"]), denial["kind"],
                                                          denial["evidence"])), denial=denial,
            selftest_reason=result.get("reason", ""))
    return dict(result, sandbox={"sandboxed": sandboxed, "why": where.get("why", "")})


class FilterModule:
    def filters(self):
        return {"sglang_server_sandbox": server_sandbox, "sglang_selftest_properties": selftest_properties,
                "fleet_unit_hardening": unit_hardening, "systemd_directives": unit_directives,
                "systemd_run_properties": selftest_properties,
                "sglang_selftest_verdict": selftest_verdict,
                "sglang_selftest_sandboxed": selftest_sandboxed}
