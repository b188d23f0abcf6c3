# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model directory at a pinned revision: its manifest, its verification, its fetch.

Stdlib only: it runs on the managed host under the host's own python3.

A manifest lists every file of a model at one revision with its size and sha256. It is learned
once from the Hub's metadata (`/api/models/<repo>/revision/<rev>?blobs=true`: the sha256 of LFS
files; git files are checked against their git blob id as they arrive and hashed then), or from a
source directory, and every host verifies against it.

A verified directory holds a stamp (STAMP) with the manifest's hash and each file's size and
mtime: a rerun compares those instead of hashing hundreds of GB again.

Fetched files land in a directory beside the target (`.<name>.partial`), are verified there, and
only then move into place: the whole directory by one rename on a first fetch, one file at a time
(each a rename) on a repair. The server never reads a half-written file.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import urllib.error
import urllib.parse
import urllib.request

STAMP = ".sglang-fleet-model.json"
CHUNK = 8 * 1024 * 1024
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A peer's copy server is started by systemd-run just before its first client connects; on a loaded
# host (or CI runner) python can take many seconds to listen. Only a refused connection is retried.
PEER_START_SECONDS = 120
# Files hashed or fetched at once: one sha256 stream is CPU-bound (about 0.9 GB/s on a real H200
# host, tests/fixtures/hosts/h200-driver580/model-sync/); hashlib and sockets release the GIL.
WORKERS = 4


class ModelError(Exception):
    """A failure the operator can act on; the message says what and where."""


# --- manifests ---------------------------------------------------------------------------------

def manifest_digest(manifest):
    """The manifest's identity: the hash of its file list, whatever else it carries."""
    files = sorted((f["path"], f["size"], f["sha256"]) for f in manifest["files"])
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()


def make_manifest(repo_id, revision, files):
    files = sorted(files, key=lambda f: f["path"])
    return {"repo_id": repo_id, "revision": revision, "total_size": sum(f["size"] for f in files),
            "files": files}


def check_manifest(manifest, repo_id, revision):
    """A manifest handed in (e.g. the controller's copy) is for this repo and revision, and whole."""
    if manifest.get("repo_id") != repo_id or manifest.get("revision") != revision:
        raise ModelError("the manifest is for %s@%s, not %s@%s"
                         % (manifest.get("repo_id"), manifest.get("revision"), repo_id, revision))
    for entry in manifest.get("files", []):
        path = entry.get("path", "")
        if (not path or path.startswith("/") or ".." in path.split("/")
                or not re.match(r"^[0-9a-f]{64}$", entry.get("sha256") or "")):
            raise ModelError("manifest entry %r is malformed: it needs a relative path, a size and a sha256"
                             % (entry,))
    if not manifest.get("files"):
        raise ModelError("the manifest for %s@%s lists no files" % (repo_id, revision))


def ignored(path, patterns):
    return any(fnmatch.fnmatch(path, pattern) for pattern in patterns)


# --- the Hub -----------------------------------------------------------------------------------

class _DropAuthOnOtherHost(urllib.request.HTTPRedirectHandler):
    """The Hub redirects LFS files to its CDN: the token goes to the Hub only."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_DropAuthOnOtherHost)


def _request(url, token=None, offset=0, timeout=60):
    headers = {"User-Agent": "sglang-fleet", "Accept-Encoding": "identity"}
    if token:
        headers["Authorization"] = "Bearer " + token
    if offset:
        headers["Range"] = "bytes=%d-" % offset
    return _OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout)


def explain_http_error(err, what, repo_id, revision, token):
    code = err.headers.get("X-Error-Code", "") if err.headers else ""
    message = err.headers.get("X-Error-Message", "") if err.headers else ""
    if code == "RevisionNotFound":
        return "revision %s of %s does not exist on the Hub (%s): pin a commit of that repository" % (
            revision, repo_id, what)
    if code == "GatedRepo" or (err.code in (401, 403) and code != "RepoNotFound"):
        if not token:
            return ("%s is gated or private and no token was given: set sglang_model_hf_token to a token "
                    "with access (%s)" % (repo_id, message or "HTTP %d" % err.code))
        return "the token was refused for %s: it has no access (%s)" % (repo_id, message or "HTTP %d" % err.code)
    if code == "RepoNotFound":
        return "repository %s does not exist on the Hub, or it is private and the token cannot see it" % repo_id
    if code == "EntryNotFound":
        return "%s: no such file at %s@%s" % (what, repo_id, revision)
    return "%s: HTTP %d %s" % (what, err.code, message or err.reason)


def hub_manifest(endpoint, repo_id, revision, token=None, ignore_patterns=(), timeout=60):
    """What the Hub says a revision holds. sha256 for LFS files; git blob ids for the others."""
    url = "%s/api/models/%s/revision/%s?blobs=true" % (endpoint.rstrip("/"), repo_id,
                                                      urllib.parse.quote(revision, safe=""))
    try:
        with _request(url, token, timeout=timeout) as response:
            info = json.load(response)
    except urllib.error.HTTPError as err:
        raise ModelError(explain_http_error(err, "the revision's metadata", repo_id, revision, token))
    except (urllib.error.URLError, OSError) as err:
        raise ModelError("cannot reach %s for %s: %s" % (endpoint, repo_id, getattr(err, "reason", err)))
    if info.get("sha") != revision:
        raise ModelError("the Hub answered revision %s for %s, not the pinned %s" % (info.get("sha"), repo_id, revision))
    files = []
    for sibling in info.get("siblings", []):
        path = sibling["rfilename"]
        if ignored(path, ignore_patterns):
            continue
        if sibling.get("size") is None:
            raise ModelError("the Hub gave no file sizes for %s: is %s a Hub endpoint?" % (repo_id, endpoint))
        lfs = sibling.get("lfs") or {}
        files.append({"path": path, "size": sibling["size"], "sha256": lfs.get("sha256"),
                      "git_sha1": None if lfs else sibling.get("blobId")})
    return make_manifest(repo_id, revision, files)


# --- verification ------------------------------------------------------------------------------

class Progress:
    """Writes {phase, done, total, file, rate} to a JSON file at most once a second."""

    def __init__(self, path, total, phase):
        self.path, self.total, self.phase = path, total, phase
        if path:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        self.done, self.file, self.started, self.last = 0, "", time.time(), 0.0
        self.lock = threading.Lock()  # files are hashed and fetched in parallel

    def add(self, nbytes, file=None, force=False):
        with self.lock:
            self._add(nbytes, file, force)

    def _add(self, nbytes, file, force):
        self.done += nbytes
        if file is not None:
            self.file = file
        now = time.time()
        if self.path and (force or now - self.last >= 1.0):
            self.last = now
            elapsed = max(now - self.started, 1e-6)
            data = {"phase": self.phase, "done": self.done, "total": self.total, "file": self.file,
                    "rate": self.done / elapsed, "elapsed": elapsed}
            partial = self.path + ".part"
            with open(partial, "w") as handle:
                json.dump(data, handle)
            os.replace(partial, self.path)


def git_blob(size):
    """A git blob id in the making: sha1 over a header, then the content."""
    return hashlib.sha1(b"blob %d\0" % size)


def _read_into(path, hashers, progress=None):
    """Feed a file to each hasher in one read."""
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            for hasher in hashers:
                hasher.update(chunk)
            if progress:
                progress.add(len(chunk))


def sha256_of(path, progress=None):
    digest = hashlib.sha256()
    _read_into(path, [digest], progress)
    return digest.hexdigest()


def read_stamp(dest):
    try:
        with open(os.path.join(dest, STAMP)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def stamp_files(dest, manifest):
    """What a stamp records of each file: [size, mtime_ns]."""
    files = {}
    for entry in manifest["files"]:
        st = os.stat(os.path.join(dest, entry["path"]))
        files[entry["path"]] = [st.st_size, st.st_mtime_ns]
    return files


def stamp_is_fresh(dest, manifest):
    """The stamp vouches for this manifest and for every file as it is now."""
    stamp = read_stamp(dest)
    return (stamp.get("manifest_sha256") == manifest_digest(manifest)
            and stamp.get("files") == stamp_files(dest, manifest))


def write_stamp(dest, manifest):
    stamp = {"repo_id": manifest["repo_id"], "revision": manifest["revision"],
             "manifest_sha256": manifest_digest(manifest), "files": stamp_files(dest, manifest),
             "verified_at": int(time.time())}
    partial = os.path.join(dest, STAMP + ".part")
    with open(partial, "w") as handle:
        json.dump(stamp, handle, indent=1)
    os.replace(partial, os.path.join(dest, STAMP))


def inspect(dest, manifest, full=False, progress_file=None):
    """Which files of the manifest `dest` lacks or holds wrong.

    Returns (problems {path: reason}, hashed_bytes). A file whose size and mtime match a stamp of
    this manifest is taken as verified; every other file is hashed (every file when `full`).
    """
    stamp = read_stamp(dest)
    trusted = {} if full or stamp.get("manifest_sha256") != manifest_digest(manifest) else stamp.get("files", {})
    problems, to_hash = {}, []
    for entry in manifest["files"]:
        path = os.path.join(dest, entry["path"])
        try:
            st = os.stat(path)
        except OSError:
            problems[entry["path"]] = "missing"
            continue
        if st.st_size != entry["size"]:
            problems[entry["path"]] = "size %d, expected %d" % (st.st_size, entry["size"])
        elif trusted.get(entry["path"]) != [st.st_size, st.st_mtime_ns]:
            to_hash.append(entry)
    progress = Progress(progress_file, sum(e["size"] for e in to_hash), "verifying")

    def verify(entry):
        progress.add(0, entry["path"], force=True)
        return entry["path"], check_file(os.path.join(dest, entry["path"]), entry, progress)

    with ThreadPoolExecutor(WORKERS) as pool:
        problems.update((path, wrong) for path, wrong in pool.map(verify, to_hash) if wrong)
    return dict(sorted(problems.items())), progress.done


def hashes_of(path, size, progress=None):
    """(sha256, git blob sha1) of a file in one read."""
    digest, blob = hashlib.sha256(), git_blob(size)
    _read_into(path, [digest, blob], progress)
    return digest.hexdigest(), blob.hexdigest()


def check_file(path, entry, progress=None):
    """None if the file is the manifest's, else what is wrong (sha256, or git blob id for a learned git file)."""
    if entry.get("sha256"):
        return None if sha256_of(path, progress) == entry["sha256"] else "sha256 mismatch"
    return None if hashes_of(path, entry["size"], progress)[1] == entry.get("git_sha1") else "git blob id mismatch"


def completed(manifest, dest):
    """The manifest with the sha256 of every git file (learned from the Hub without one) filled in from `dest`."""
    files = []
    for entry in manifest["files"]:
        entry = dict(entry)
        if not entry.get("sha256"):
            entry["sha256"] = hashes_of(os.path.join(dest, entry["path"]), entry["size"])[0]
        entry.pop("git_sha1", None)
        files.append(entry)
    return make_manifest(manifest["repo_id"], manifest["revision"], files)


# --- fetching ----------------------------------------------------------------------------------

class Source:
    """Where files come from: the Hub (or a mirror), a peer host that holds a verified copy, or a directory."""

    def __init__(self, kind, repo_id, revision, endpoint="", token=None, directory="", timeout=60):
        self.kind, self.repo_id, self.revision = kind, repo_id, revision
        self.endpoint, self.token, self.directory, self.timeout = endpoint.rstrip("/"), token, directory, timeout

    def describe(self):
        return {"hub": self.endpoint, "peer": self.endpoint, "path": self.directory}[self.kind]

    def open(self, path, offset):
        """(stream, offset it starts at)."""
        if self.kind == "path":
            handle = open(os.path.join(self.directory, path), "rb")
            handle.seek(offset)
            return handle, offset
        if self.kind == "hub":
            url = "%s/%s/resolve/%s/%s" % (self.endpoint, self.repo_id, self.revision, urllib.parse.quote(path))
        else:
            url = "%s/%s" % (self.endpoint, urllib.parse.quote(path))
        try:
            response = self._connect(url, offset)
        except urllib.error.HTTPError as err:
            raise ModelError(explain_http_error(err, path, self.repo_id, self.revision, self.token)
                             + ("" if self.kind == "hub" else " (from %s)" % self.endpoint))
        except (urllib.error.URLError, OSError) as err:
            raise ModelError("cannot reach %s for %s: %s" % (self.describe(), path, getattr(err, "reason", err)))
        return response, (offset if response.status == 206 else 0)

    def _connect(self, url, offset):
        """A peer's copy server may be a moment from listening when its first client comes: retry that."""
        deadline = time.time() + (PEER_START_SECONDS if self.kind == "peer" else 0)
        while True:
            try:
                return _request(url, self.token, offset, self.timeout)
            except urllib.error.URLError as err:
                if not isinstance(err.reason, ConnectionRefusedError) or time.time() > deadline:
                    raise
                time.sleep(0.2)


def _download(source, entry, partial, progress):
    """One file into `partial`, resuming what an interrupted run left; returns its sha256 and git sha1.

    The git blob id is only computed for a file whose sha256 the manifest lacks (a learned git file).
    """
    offset = os.path.getsize(partial) if os.path.exists(partial) else 0
    if offset > entry["size"]:
        os.unlink(partial)
        offset = 0

    def fresh():
        return hashlib.sha256(), (None if entry.get("sha256") else git_blob(entry["size"]))

    digest, blob = fresh()
    hashers = [h for h in (digest, blob) if h]
    if offset:
        _read_into(partial, hashers)
    if offset < entry["size"]:
        stream, start = source.open(entry["path"], offset)
        if start != offset:  # the source cannot resume: start over
            digest, blob = fresh()
            hashers = [h for h in (digest, blob) if h]
            progress.add(-offset)
            offset = 0
        progress.add(0, entry["path"], force=True)
        with stream, open(partial, "ab" if offset else "wb") as out:
            while True:
                try:
                    chunk = stream.read(CHUNK)
                except OSError as err:
                    raise ModelError("%s: the transfer from %s broke off: %s" % (entry["path"], source.describe(), err))
                if not chunk:
                    break
                out.write(chunk)
                for hasher in hashers:
                    hasher.update(chunk)
                progress.add(len(chunk))
    return digest.hexdigest(), blob.hexdigest() if blob else None


def _fetch_verified(source, entry, partial, progress):
    """Download and verify one file, once more from scratch if the first copy is wrong."""
    for attempt in (1, 2):
        sha256, git_sha1 = _download(source, entry, partial, progress)
        size = os.path.getsize(partial)
        wrong = ("size %d, expected %d" % (size, entry["size"]) if size != entry["size"]
                 else "sha256 %s, expected %s" % (sha256, entry["sha256"]) if entry.get("sha256") and sha256 != entry["sha256"]
                 else "git blob %s, expected %s" % (git_sha1, entry["git_sha1"])
                 if not entry.get("sha256") and entry.get("git_sha1") and git_sha1 != entry["git_sha1"]
                 else None)
        if wrong is None:
            return sha256
        os.unlink(partial)
        if attempt == 2:
            raise ModelError("%s from %s failed verification twice: %s" % (entry["path"], source.describe(), wrong))


def free_bytes(path):
    """Free space for an unprivileged writer on the filesystem that holds `path` (or its nearest parent)."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def partial_dir(dest):
    return os.path.join(os.path.dirname(dest.rstrip("/")), "." + os.path.basename(dest.rstrip("/")) + ".partial")


def fetch(source, manifest, dest, wanted, progress_file=None, margin=0, free=free_bytes):
    """Fetch `wanted` (paths of the manifest) into `dest`, verified, then move them into place.

    Returns the manifest with every sha256 filled in (git files are hashed as they arrive).
    """
    entries = [e for e in manifest["files"] if e["path"] in wanted]
    staging = partial_dir(dest)
    have = sum(os.path.getsize(os.path.join(staging, e["path"])) for e in entries
               if os.path.isfile(os.path.join(staging, e["path"])))
    need = sum(e["size"] for e in entries) - have
    available = free(os.path.dirname(dest.rstrip("/")) or "/")
    if need + margin > available:
        raise ModelError("not enough disk for %s: %.1f GB to fetch (+%.1f GB kept free), %.1f GB free under %s"
                         % (manifest["repo_id"], need / 1e9, margin / 1e9, available / 1e9,
                            os.path.dirname(dest.rstrip("/"))))
    progress = Progress(progress_file, sum(e["size"] for e in entries), "fetching")

    def one(entry):
        partial = os.path.join(staging, entry["path"])
        os.makedirs(os.path.dirname(partial), exist_ok=True)
        return entry["path"], _fetch_verified(source, entry, partial, progress)

    try:
        # Largest first, so the last file to finish is not a big one started late.
        with ThreadPoolExecutor(WORKERS) as pool:
            learned = dict(pool.map(one, sorted(entries, key=lambda e: -e["size"])))
    except ModelError:
        # Bytes already fetched stay for the next run to resume from; an empty staging dir does not.
        if not any(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(staging) for name in names):
            shutil.rmtree(staging, ignore_errors=True)
        raise
    progress.add(0, "", force=True)
    # Git files learned from the Hub get their sha256: hashed on arrival, or read where they already were.
    manifest = completed(dict(manifest, files=[dict(e, sha256=e.get("sha256") or learned.get(e["path"]))
                                               for e in manifest["files"]]), dest)
    if not os.path.exists(dest):
        write_stamp(staging, manifest)
        os.rename(staging, dest)  # a first fetch: the directory appears whole
    else:
        for entry in entries:
            target = os.path.join(dest, entry["path"])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(os.path.join(staging, entry["path"]), target)
        write_stamp(dest, manifest)
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def dir_manifest(directory, repo_id, revision, ignore_patterns=(), progress_file=None):
    """A manifest taken from a directory (a source on shared storage): every file hashed once."""
    if not os.path.isdir(directory):
        raise ModelError("the source directory %s does not exist on this host" % directory)
    paths = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if not name.startswith(".") and not ignored(rel, ignore_patterns):
                paths.append(rel)
    sizes = {p: os.path.getsize(os.path.join(directory, p)) for p in paths}
    progress = Progress(progress_file, sum(sizes.values()), "hashing the source")
    with ThreadPoolExecutor(WORKERS) as pool:
        sums = pool.map(lambda p: sha256_of(os.path.join(directory, p), progress), sorted(paths))
        files = [{"path": p, "size": sizes[p], "sha256": digest} for p, digest in zip(sorted(paths), sums)]
    return make_manifest(repo_id, revision, files)
