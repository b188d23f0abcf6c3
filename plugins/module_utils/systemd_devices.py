# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which device nodes a unit's DeviceAllow= lets through, resolved as systemd resolves them.

systemd (src/core/bpf-devices.c) turns `char-NAME` into the majors of every line of the
"Character devices:" section of /proc/devices whose name matches NAME as an fnmatch(3) pattern,
`/dev/PATH` into that node's own major:minor (skipped when the node does not exist), and always
lets the static set through (/dev/null, /dev/zero, ... and the pts group). Stdlib only.
"""
from __future__ import annotations

import fnmatch
import os
import re
import stat

STATIC_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx")


def parse_proc_devices(text):
    """{'c': [(major, name), ...], 'b': [...]} from the text of /proc/devices."""
    groups, kind = {"c": [], "b": []}, None
    for line in text.splitlines():
        if line.strip() == "Character devices:":
            kind = "c"
        elif line.strip() == "Block devices:":
            kind = "b"
        elif not line.strip():
            kind = None
        elif kind:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) > 0:
                groups[kind].append((int(parts[0]), parts[1].strip()))
    return groups


def parse_ls_l(text):
    """[(path, 'c' or 'b', major, minor)] from `ls -l` of device nodes (directory headers followed)."""
    nodes, directory = [], "/dev"
    for line in text.splitlines():
        if line.endswith(":") and line.startswith("/"):
            directory = line[:-1]
            continue
        m = re.match(r"^([cb])[-rwxsStT.+]{9}\S*\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s+\S+\s+\S+\s+\S+\s+(.+)$", line)
        if m:
            name = m.group(4)
            path = name if name.startswith("/") else os.path.join(directory, name)
            nodes.append((path, m.group(1), int(m.group(2)), int(m.group(3))))
    return sorted(set(nodes))


def parse_allow(spec):
    """(device, permissions) of one DeviceAllow= value; permissions default to rwm."""
    parts = spec.split()
    return parts[0], (parts[1] if len(parts) > 1 else "rwm")


def resolve(allow, proc_devices, nodes):
    """The (type, major, minor-or-None) rules DeviceAllow= gives, and what matched nothing.

    allow: DeviceAllow= values; proc_devices: parse_proc_devices(); nodes: the host's nodes, used
    for /dev/ paths as systemd stats them."""
    by_path = {path: (kind, major, minor) for path, kind, major, minor in nodes}
    rules, unmatched = [], []
    for spec in allow:
        device, perms = parse_allow(spec)
        if "r" not in perms or "w" not in perms:
            unmatched.append("%s (needs rw, has %s)" % (device, perms))
            continue
        if device.startswith("/dev/"):
            if device in by_path:
                kind, major, minor = by_path[device]
                rules.append((kind, major, minor))
            continue  # systemd skips a node that does not exist
        for prefix, kind in (("char-", "c"), ("block-", "b")):
            if device.startswith(prefix):
                pattern = device[len(prefix):]
                if pattern == "*":
                    rules.append((kind, None, None))
                elif pattern.isdigit():
                    rules.append((kind, int(pattern), None))
                else:
                    majors = [major for major, name in proc_devices[kind] if fnmatch.fnmatchcase(name, pattern)]
                    rules.extend((kind, major, None) for major in majors)
                    if not majors:
                        unmatched.append(device)
                break
        else:
            unmatched.append(device)
    return rules, unmatched


def denied(allow, proc_devices_text, nodes):
    """The nodes (paths) that a DevicePolicy=closed unit with these DeviceAllow= values denies."""
    rules, _ = resolve(allow, parse_proc_devices(proc_devices_text), nodes)
    return denied_by(rules, nodes)


def denied_by(rules, nodes):
    """The nodes (paths) that resolved rules (resolve()'s first value) do not allow."""
    def allowed(kind, major, minor):
        return any(k == kind and (ma is None or ma == major) and (mi is None or mi == minor) for k, ma, mi in rules)

    return [path for path, kind, major, minor in nodes
            if path not in STATIC_NODES and not allowed(kind, major, minor)]


def host_nodes(patterns):
    """The device nodes of this host that match the glob patterns: [(path, type, major, minor)]."""
    import glob
    nodes = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
                nodes.append((path, kind, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return sorted(set(nodes))


def access(allow, patterns, proc_devices_path="/proc/devices", nodes=None):
    """What a DevicePolicy=closed unit with these DeviceAllow= values does to this host's nodes matching
    patterns: {nodes, denied, unmatched}, and `problem`, one line naming every denied node ("" when none).
    Raises OSError when proc_devices_path cannot be read."""
    with open(proc_devices_path) as handle:
        groups = parse_proc_devices(handle.read())
    nodes = host_nodes(patterns) if nodes is None else nodes
    rules, unmatched = resolve(allow, groups, nodes)
    result = {"nodes": ["%s %d:%d" % (path, major, minor) for path, _, major, minor in nodes],
              "denied": denied_by(rules, nodes), "unmatched": unmatched, "problem": ""}
    if result["denied"]:
        result["problem"] = (
            "DevicePolicy=closed with DeviceAllow=%s would deny %s: the server would see no GPU. Device groups in %s: %s"
            % (", ".join(allow), ", ".join(result["denied"]), proc_devices_path,
               ", ".join("%d %s" % g for g in groups["c"] if "nvidia" in g[1] or "infiniband" in g[1])))
    return result
