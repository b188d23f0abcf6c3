#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model directory at a pinned revision, verified file by file against its manifest."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_model_sync
short_description: Verify a model directory against its manifest and fetch what is missing or wrong
description:
  - Checks every file of I(dest) against a manifest (size and sha256 per file). A directory that
    this module verified before carries a stamp; files whose size and mtime still match it are not
    hashed again (I(verify=full) hashes everything).
  - Fetches what is missing or wrong from the Hub (or a Hub-compatible mirror), from a peer host
    that serves a verified copy, or from a directory, into C(.<name>.partial) beside I(dest).
    Each file is verified there; only then do the files move into place (one rename of the whole
    directory on a first fetch). A file that fails verification is fetched once more, then the
    module fails naming it.
  - Without a I(manifest), learns it from the Hub's metadata for the revision (LFS files carry
    their sha256; git files are checked against their git blob id and hashed as they arrive), or
    by hashing I(source_dir). The complete manifest is returned for the controller to keep.
  - Checks the free disk space against what is left to fetch before it starts.
  - Writes progress (bytes done and total) to I(progress_file) while it runs, for async polling.
  - In check mode, reports what it would fetch and writes nothing.
options:
  repo_id:
    description: The model's repository, e.g. C(nvidia/Kimi-K2.5-NVFP4).
    type: str
    required: true
  revision:
    description: The pinned revision, a 40-hex commit id.
    type: str
    required: true
  dest:
    description: The directory the server reads.
    type: path
    required: true
  manifest:
    description: The manifest (C(repo_id), C(revision), C(files) of C(path), C(size), C(sha256)).
    type: dict
  source:
    description: Where missing files come from.
    type: str
    choices: [hub, peer, path]
    default: hub
  endpoint:
    description: The Hub's (or mirror's) base URL for C(hub); the peer's base URL for C(peer).
    type: str
    default: https://huggingface.co
  token:
    description: Bearer token for the endpoint (a Hub token; a peer's per-run token).
    type: str
  source_dir:
    description: The directory to copy from, for C(path).
    type: path
  ignore_patterns:
    description: Glob patterns of repository files to leave out (when the manifest is learned).
    type: list
    elements: str
    default: []
  verify:
    description: C(quick) trusts the stamp for files whose size and mtime match it; C(full) hashes every file.
    type: str
    choices: [quick, full]
    default: quick
  fetch:
    description: False only reports what is missing or wrong.
    type: bool
    default: true
  progress_file:
    description: File to write progress to, as JSON.
    type: path
  free_margin_bytes:
    description: Bytes to leave free on the filesystem of I(dest) beyond what the fetch needs.
    type: int
    default: 0
  timeout:
    description: Seconds to wait for a connection or a read.
    type: int
    default: 60
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Kimi-K2.5-NVFP4 is in place at its pinned revision
  sglang_model_sync:
    repo_id: nvidia/Kimi-K2.5-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    dest: /models/nvidia/Kimi-K2.5-NVFP4
    manifest: "{{ lookup('ansible.builtin.file', manifest_file) | from_json }}"
  vars:
    manifest_file: files/models/nvidia--Kimi-K2.5-NVFP4@0123456789abcdef0123456789abcdef01234567.json
"""

RETURN = r"""
state:
  description: C(verified) (nothing to do), C(fetched) (a first fetch), C(repaired) (some files replaced);
    in check mode or with I(fetch=false), C(incomplete) when something would be fetched.
  type: str
  returned: always
problems:
  description: Each file that was missing or wrong, with what was wrong.
  type: dict
  returned: always
  sample: {"model-00001-of-00002.safetensors": "sha256 mismatch"}
fetched_bytes:
  description: Bytes fetched (or that would be, in check mode).
  type: int
  returned: always
hashed_bytes:
  description: Bytes of I(dest) hashed to verify it (0 when the stamp vouched for every file).
  type: int
  returned: always
manifest:
  description: The manifest, complete (a sha256 for every file) unless the run could not hash git files.
  type: dict
  returned: always
manifest_complete:
  description: Whether every file of I(manifest) has its sha256.
  type: bool
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.model_sync import (COMMIT, ModelError, Source, check_manifest, completed, dir_manifest,
                                             fetch, hub_manifest, inspect, stamp_is_fresh, write_stamp)


def run(params, check_mode):
    repo_id, revision, dest = params["repo_id"], params["revision"], params["dest"].rstrip("/")
    if not COMMIT.match(revision):
        raise ModelError("revision %r of %s is not a commit id (40 hex digits): pin the commit, not a branch or tag"
                         % (revision, repo_id))
    if not re.match(r"^[\w.-]+/[\w.-]+$", repo_id):
        raise ModelError("%r is not a repository id of the form owner/name" % repo_id)
    if params["progress_file"] and os.path.exists(params["progress_file"]):
        os.unlink(params["progress_file"])  # an earlier run's
    source = Source(params["source"], repo_id, revision, endpoint=params["endpoint"], token=params["token"],
                    directory=params["source_dir"] or "", timeout=params["timeout"])
    manifest = params["manifest"]
    if manifest:
        check_manifest(manifest, repo_id, revision)
    elif params["source"] == "hub":
        manifest = hub_manifest(params["endpoint"], repo_id, revision, params["token"], params["ignore_patterns"],
                                params["timeout"])
    elif params["source"] == "path":
        manifest = dir_manifest(params["source_dir"], repo_id, revision, params["ignore_patterns"],
                                params["progress_file"])
    else:
        raise ModelError("fetching %s from a peer needs its manifest" % repo_id)

    if os.path.isdir(dest):
        problems, hashed = inspect(dest, manifest, params["verify"] == "full", params["progress_file"])
    elif os.path.exists(dest):
        raise ModelError("%s exists and is not a directory" % dest)
    else:
        problems, hashed = {entry["path"]: "missing" for entry in manifest["files"]}, 0
    wanted = {entry["path"]: entry["size"] for entry in manifest["files"] if entry["path"] in problems}
    result = dict(problems=problems, hashed_bytes=hashed, fetched_bytes=sum(wanted.values()))

    if not problems:
        if any(not entry.get("sha256") for entry in manifest["files"]):
            manifest = completed(manifest, dest)
        # Hashing vouched for files the stamp did not (touched, or no stamp yet): record that.
        fresh = stamp_is_fresh(dest, manifest)
        if not fresh and not check_mode:
            write_stamp(dest, manifest)
        return dict(result, changed=not fresh, state="verified", fetched_bytes=0, manifest=manifest,
                    manifest_complete=True, stamp_written=not fresh)

    complete = all(entry.get("sha256") for entry in manifest["files"])
    if check_mode or not params["fetch"]:
        # Only a run that would fetch (check mode) reports a change: a plain check writes nothing.
        return dict(result, changed=params["fetch"], state="incomplete", manifest=manifest, manifest_complete=complete)
    first = not os.path.exists(dest)
    os.umask(0o022)  # the server's user reads what root fetched
    manifest = fetch(source, manifest, dest, set(wanted), params["progress_file"], params["free_margin_bytes"])
    return dict(result, changed=True, state="fetched" if first else "repaired", manifest=manifest,
                manifest_complete=True)


def main():
    module = AnsibleModule(
        argument_spec={
            "repo_id": dict(type="str", required=True),
            "revision": dict(type="str", required=True),
            "dest": dict(type="path", required=True),
            "manifest": dict(type="dict"),
            "source": dict(type="str", choices=["hub", "peer", "path"], default="hub"),
            "endpoint": dict(type="str", default="https://huggingface.co"),
            "token": dict(type="str", no_log=True),
            "source_dir": dict(type="path"),
            "ignore_patterns": dict(type="list", elements="str", default=[]),
            "verify": dict(type="str", choices=["quick", "full"], default="quick"),
            "fetch": dict(type="bool", default=True),
            "progress_file": dict(type="path"),
            "free_margin_bytes": dict(type="int", default=0),
            "timeout": dict(type="int", default=60),
        },
        required_if=[("source", "path", ["source_dir"])],
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except ModelError as err:
        module.fail_json(msg="%s@%s: %s" % (module.params["repo_id"], module.params["revision"][:12], err))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
