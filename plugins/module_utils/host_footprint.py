# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a host already holds what a stage would put there: files, directories, packages, users, a venv's
packages and running units. Each check says what differs in a short phrase, never what a file holds."""
from __future__ import annotations

import glob
import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.dist_info import dist_version


def _ids(owner, group):
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def file_differs(path, content, mode, owner, group):
    """Whether the file is missing, or differs from what is asked in content, mode, owner or group."""
    return path_differs({"path": path, "state": "file", "content": content, "mode": mode,
                         "owner": owner, "group": group}) is not None


def path_differs(want):
    """None where the path is as asked, else the phrase that says how it is not. want: path, state (file,
    directory, link or absent), and for a file or directory mode, owner, group, for a file its content or,
    where that is a secret the module must not be handed, the sha256 of its content, for a link its target
    (as the link holds it, not resolved: a link is switched by what it names)."""
    path, state = want["path"], want.get("state") or "file"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None if state == "absent" else "%s is missing" % path
    except OSError as err:
        return "%s cannot be read (%s)" % (path, err.strerror)
    if state == "absent":
        return "%s is still there" % path
    if state == "link":
        if not stat.S_ISLNK(st.st_mode):
            return "%s is not a symlink" % path
        target = os.readlink(path)
        return None if target == want.get("target") else "%s points to %s, not %s" % (path, target, want.get("target"))
    if state == "directory" and not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory" % path
    if state == "file":
        if not stat.S_ISREG(st.st_mode):
            return "%s is not a regular file" % path
        try:
            with open(path, "rb") as handle:
                held = handle.read()
        except OSError as err:
            return "%s cannot be read (%s)" % (path, err.strerror)
        if want.get("sha256"):
            if hashlib.sha256(held).hexdigest() != want["sha256"]:
                return "%s differs" % path
        elif held != (want.get("content") or "").encode():
            return "%s differs" % path
    if want.get("mode") and stat.S_IMODE(st.st_mode) != int(want["mode"], 8):
        return "%s has mode %04o, not %s" % (path, stat.S_IMODE(st.st_mode), want["mode"])
    ids = _ids(want.get("owner") or "root", want.get("group") or "root")
    if ids is None or (st.st_uid, st.st_gid) != ids:
        return "%s is not owned by %s:%s" % (path, want.get("owner") or "root", want.get("group") or "root")
    return None


def user_differs(want):
    """None where the user exists with the home and shell asked (where asked), else why not."""
    try:
        entry = pwd.getpwnam(want["name"])
    except KeyError:
        return "user %s is missing" % want["name"]
    for key, held in (("home", entry.pw_dir), ("shell", entry.pw_shell)):
        if want.get(key) and want[key] != held:
            return "user %s has %s %s, not %s" % (want["name"], key, held, want[key])
    return None


def venv_package_differs(want):
    """None where the venv holds the project at the version asked, else why not."""
    sites = sorted(glob.glob(os.path.join(want["venv"], "lib", "python*", "site-packages")))
    if not sites or not os.access(os.path.join(want["venv"], "bin", "python"), os.X_OK):
        return "no venv at %s" % want["venv"]
    held = dist_version(sites[-1], want["name"])
    if held != want["version"]:
        return "%s holds %s %s, not %s" % (want["venv"], want["name"], held, want["version"])
    return None


def packages_missing(run, names):
    """The phrases for the dpkg packages among names that are not installed. run(argv) -> rc, out, err."""
    if not names:
        return []
    rc, out, err = run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", "--"] + list(names))
    if rc == 127:
        return ["dpkg-query is not available to read %s" % ", ".join(names)]
    installed = {line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["ii"]}
    return ["package %s is not installed" % name for name in names if name not in installed]


def units_not_running(run, names):
    """The phrases for the systemd units among names that are not both enabled and active."""
    if not names:
        return []
    rc, out, err = run(["systemctl", "show", "--property=Id,ActiveState,UnitFileState", "--"] + list(names))
    if rc != 0:
        return ["systemd cannot say how %s stand (%s)" % (", ".join(names), (err or out).strip() or "rc %d" % rc)]
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in out.strip().split("\n\n")]
    found = []
    for name, props in zip(names, blocks + [{}] * (len(names) - len(blocks))):
        active, enabled = props.get("ActiveState", "unknown"), props.get("UnitFileState", "unknown")
        if active != "active" or enabled != "enabled":
            found.append("%s is %s and %s, not active and enabled" % (name, active, enabled or "not installed"))
    return found


def footprint_pending(run, files=(), users=(), packages=(), venv_packages=(), units=()):
    """Every way the host differs from the footprint, in order; empty when it holds all of it."""
    pending = [p for p in map(path_differs, files) if p]
    pending += [p for p in map(user_differs, users) if p]
    pending += packages_missing(run, packages)
    pending += [p for p in map(venv_package_differs, venv_packages) if p]
    pending += units_not_running(run, units)
    return pending
