#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe the installed sglang/flashinfer sources and plan (or verify) the sglang-fleet patch set."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_patch_probe
short_description: Plan and verify the sglang-fleet patches against the installed sglang sources
description:
  - >-
    Parses every target file of the patch set (with the C(ast) module, never with grep) and
    classifies each enabled patch as C(upstream) (the installed release already does what the
    patch adds, so it is skipped), C(apply) (needs patching, or our block there is not the one
    this run would write), C(applied) (our block is in place, exactly as this run would write it:
    nothing to write) or, for I(state=absent), C(remove).
  - In I(mode=plan) it fails before anything is written when any enabled patch cannot be
    applied (file missing, anchor missing, upstream drifted), naming the file, the anchor and the
    installed sglang version. Its result carries, per patch, the block, marker and anchor that
    M(ansible.builtin.blockinfile) needs.
  - In I(mode=verify) it fails unless every planned patch is in effect (methods on the class,
    table entries present, gates admit capability 12) and every touched file compiles.
  - Read-only, it never writes.
options:
  site_packages:
    description: The site-packages directory that holds C(sglang/) and C(flashinfer/).
    type: path
    required: true
  patches:
    description:
      - Names of the enabled patches. The others are planned out (C(remove) when our block is
        in their file), so switching a patch off reverts it.
    type: list
    elements: str
    default:
      - kimi_k25_eagle3
      - sm120_symm_mem_max_sizes
      - sm120_symm_mem_multimem
      - sm120_allreduce_fusion_gate
      - sm120_flashinfer_trtllm_comm
      - server_args_redact_secrets
      - server_info_redact_secrets
      - eagle3_fused_allreduce_capture
  symm_mem_max_sizes_mib:
    description: World size to maximum symmetric-memory all-reduce size (MiB) for capability 12.
    type: dict
    default: {"2": 64, "4": 64, "6": 128, "8": 128}
  multimem_world_sizes:
    description: World sizes that use multimem all-reduce on capability 12 (none on PCIe parts).
    type: list
    elements: int
    default: []
  state:
    description: C(present) plans the patches in, C(absent) plans them out.
    type: str
    choices: [present, absent]
    default: present
  mode:
    description: C(plan) before writing, C(verify) after.
    type: str
    choices: [plan, verify]
    default: plan
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would change, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Plan the patch set
  sglang_patch_probe:
    site_packages: /opt/sglang/venv/lib/python3.12/site-packages
  register: plan

- name: Verify it after blockinfile ran
  sglang_patch_probe:
    site_packages: /opt/sglang/venv/lib/python3.12/site-packages
    mode: verify
"""

RETURN = r"""
report:
  description: Per patch, its name, status and reason (the patches list without blocks).
  returned: always
  type: list
  elements: dict
summary:
  description: One line per patch (name, status and reason) for the run output.
  returned: always
  type: list
  elements: str
sglang_version:
  description: Version of the installed sglang (from its dist-info), C(unknown) if absent.
  returned: always
  type: str
  sample: 0.5.9
flashinfer_version:
  description: Version of the installed flashinfer-python, C(unknown) if absent.
  returned: always
  type: str
  sample: 0.6.3
patches:
  description: One entry per enabled patch.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Patch name.
      type: str
    path:
      description: Absolute path of the target file.
      type: str
    status:
      description: "upstream, apply, applied, remove, absent, disabled, or an error (missing-file, missing-anchor, drift)."
      type: str
    reason:
      description: Why, in one sentence.
      type: str
    marker:
      description: The blockinfile marker (contains C({mark})).
      type: str
    block:
      description: The block to insert (empty when nothing is to be written).
      type: str
    insertafter:
      description: Anchor regex the block follows, or null.
      type: str
    insertbefore:
      description: Anchor regex the block precedes, or null.
      type: str
"""

import ast
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dist_info import dist_version
# find_anchor, find_class and find_function stay reachable here for the tests that place and read blocks.
from ansible.module_utils.sglang_patch_ast import (  # noqa: F401
    Drift, check_defined, find_anchor, find_class, find_function, marker_lines, strip_block)
from ansible.module_utils.sglang_patch_eagle3_fused_allreduce_capture import Eagle3FusedAllreduceCapture
from ansible.module_utils.sglang_patch_kimi_k25_eagle3 import KimiK25Eagle3
from ansible.module_utils.sglang_patch_server_args_redact_secrets import ServerArgsRedactSecrets
from ansible.module_utils.sglang_patch_server_info_redact_secrets import ServerInfoRedactSecrets
from ansible.module_utils.sglang_patch_sm120_allreduce_fusion_gate import AllreduceFusionGate
from ansible.module_utils.sglang_patch_sm120_flashinfer_trtllm_comm import FlashinferTrtllmComm
from ansible.module_utils.sglang_patch_sm120_symm_mem_max_sizes import SymmMemMaxSizes
from ansible.module_utils.sglang_patch_sm120_symm_mem_multimem import SymmMemMultimem

# Each patch's knowledge (where it goes, how to tell upstream has it or drifted, its block, how to
# verify it) lives in its own module_utils file; this module only runs them.
PATCHES = {p.name: p for p in (KimiK25Eagle3(), SymmMemMaxSizes(), SymmMemMultimem(), AllreduceFusionGate(),
                               FlashinferTrtllmComm(), ServerArgsRedactSecrets(), ServerInfoRedactSecrets(),
                               Eagle3FusedAllreduceCapture())}
ALL_PATCHES = tuple(PATCHES)


def plan_one(patch, site_packages, settings, state, version):
    begin, end, marker = marker_lines(patch.name, patch.indent)
    path = os.path.join(site_packages, patch.relpath)
    entry = {"name": patch.name, "path": path, "marker": marker, "block": "", "status": "", "reason": "",
             "insertafter": None, "insertbefore": None}
    if not os.path.isfile(path):
        reason = patch.missing_file(version) if hasattr(patch, "missing_file") else \
            "%s not found under %s (is %s installed there?)" % (patch.relpath, site_packages, patch.package)
        entry.update(status="missing-file" if state == "present" else "absent", reason=reason)
        return entry
    with open(path) as handle:
        text = handle.read()
    try:
        upstream, ours, inner = strip_block(text, patch.name)
        if state == "absent":
            entry.update(status="remove" if ours else "absent",
                         reason="our block will be removed" if ours else "no block of ours in the file")
            return entry
        tree = ast.parse(upstream)
        if patch.upstream_has_it(tree, settings):
            entry.update(status="remove" if ours else "upstream",
                         reason="not needed: upstream already provides it; " + ("our now redundant block will be removed"
                                                                     if ours else "nothing to do"))
            return entry
        hits = find_anchor(upstream, patch.anchor)
        if len(hits) != 1:
            entry.update(status="missing-anchor", reason="anchor /%s/ matches %d lines in %s, expected exactly one"
                         % (patch.anchor, len(hits), path))
            return entry
        patch.check_anchor(tree, hits[0], settings)
        if getattr(patch, "requires", None):
            check_defined(site_packages, *patch.requires)
        block = patch.block(tree, settings).rstrip("\n")
        current = ours and inner.rstrip("\n") == block
        entry.update(status="applied" if current else "apply", block=block,
                     reason="our block is in place" if current
                     else "our block there is out of date" if ours else "needs patching",
                     **{"insert" + patch.where: patch.anchor})
    except Drift as exc:
        entry.update(status="drift", reason="upstream drifted in %s (anchor /%s/): %s" % (path, patch.anchor, exc))
    except SyntaxError as exc:
        entry.update(status="drift", reason="%s does not parse: %s" % (path, exc))
    return entry


def verify_one(patch, site_packages, settings):
    path = os.path.join(site_packages, patch.relpath)
    with open(path) as handle:
        text = handle.read()
    try:
        compile(text, path, "exec")
    except SyntaxError as exc:
        return "%s does not compile: %s" % (path, exc)
    problem = patch.in_effect(ast.parse(text), settings)
    return "%s: %s" % (path, problem) if problem else None


def probe(site_packages, names, settings, state="present", mode="plan"):
    """(result, errors): the plan per patch, and the problems that must stop the run."""
    version = dist_version(site_packages, "sglang")
    patches = [plan_one(patch, site_packages, settings, state if name in names else "absent", version)
               for name, patch in PATCHES.items()]
    for entry in patches:
        if entry["name"] not in names and entry["status"] == "absent":
            entry.update(status="disabled", reason="switched off")
    result = {"sglang_version": version, "flashinfer_version": dist_version(site_packages, "flashinfer-python"),
              "patches": patches,
              "report": [{k: p[k] for k in ("name", "status", "reason")} for p in patches],
              "summary": ["%s: %s (%s)" % (p["name"], p["status"], p["reason"]) for p in patches]}
    errors = ["%s: %s" % (p["name"], p["reason"]) for p in result["patches"]
              if p["status"] in ("missing-file", "missing-anchor", "drift")]
    if mode == "verify" and not errors:
        for entry in patches:
            if entry["status"] == "applied":
                errors.append(verify_one(PATCHES[entry["name"]], site_packages, settings))
            elif entry["status"] == "apply":
                errors.append("%s: not applied" % entry["name"])
            elif entry["status"] == "remove":
                errors.append("%s: our block is still in %s" % (entry["name"], entry["path"]))
        errors = [e for e in errors if e]
    return result, errors


def main():
    module = AnsibleModule(
        argument_spec={
            "site_packages": {"type": "path", "required": True},
            "patches": {"type": "list", "elements": "str", "default": list(ALL_PATCHES)},
            # string keys, as the role's value arrives (module arguments travel as JSON)
            "symm_mem_max_sizes_mib": {"type": "dict", "default": {"2": 64, "4": 64, "6": 128, "8": 128}},
            "multimem_world_sizes": {"type": "list", "elements": "int", "default": []},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "mode": {"type": "str", "choices": ["plan", "verify"], "default": "plan"},
        },
        supports_check_mode=True,
    )
    p = module.params
    unknown = [n for n in p["patches"] if n not in PATCHES]
    if unknown:
        module.fail_json(msg="unknown patch(es) %s; known: %s" % (", ".join(unknown), ", ".join(ALL_PATCHES)))
    if not os.path.isdir(os.path.join(p["site_packages"], "sglang")):
        module.fail_json(msg="no sglang package under %s: is it the site-packages of the sglang venv?"
                             % p["site_packages"])
    settings = {"symm_mem_max_sizes_mib": p["symm_mem_max_sizes_mib"], "multimem_world_sizes": p["multimem_world_sizes"]}
    result, errors = probe(p["site_packages"], p["patches"], settings, p["state"], p["mode"])
    if errors:
        verb = "verification failed" if p["mode"] == "verify" else "nothing was written"
        module.fail_json(msg="sglang %s, flashinfer %s: %s: %s" % (result["sglang_version"], result["flashinfer_version"],
                                                                  verb, "; ".join(errors)), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
