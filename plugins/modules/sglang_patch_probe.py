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
  diff_mode:
    support: none
author:
  - sglang-fleet maintainers
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
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dist_info import dist_version

MARKER = "# {mark} sglang-fleet patch %s"
ALL_PATCHES = ("kimi_k25_eagle3", "sm120_symm_mem_max_sizes", "sm120_symm_mem_multimem",
               "sm120_allreduce_fusion_gate", "sm120_flashinfer_trtllm_comm", "server_args_redact_secrets")


class Drift(Exception):
    """Upstream no longer looks like what the patch was written for."""


def marker_lines(name, indent):
    marker = indent + MARKER % name
    return marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END"), marker


def strip_block(text, name):
    """The file as upstream shipped it (our block for `name`, markers included, removed), whether
    our block was there, and the block's lines between its markers."""
    lines = text.splitlines(True)
    begin = next((i for i, l in enumerate(lines) if l.strip() == (MARKER % name).replace("{mark}", "BEGIN")), None)
    if begin is None:
        return text, False, ""
    end = next((i for i in range(begin, len(lines)) if lines[i].strip() == (MARKER % name).replace("{mark}", "END")),
               None)
    if end is None:
        raise Drift("the BEGIN marker of %s has no END marker" % name)
    return "".join(lines[:begin] + lines[end + 1:]), True, "".join(lines[begin + 1:end])


def find_anchor(text, regex):
    """The 1-based line numbers that match the anchor regex."""
    pattern = re.compile(regex)
    return [i for i, line in enumerate(text.splitlines(), start=1) if pattern.search(line)]


def find_class(tree, name):
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def find_function(body, name):
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)


def dict_assignment(body, name):
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            return node
    return None


def dict_keys(node):
    return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]


def names_in(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
           {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


# --- the patches ---------------------------------------------------------------------------------
# Each patch: where it goes (file, anchor, indentation), how to tell that upstream already has it,
# how to tell that upstream drifted from what it was written for, the block, and how to verify it.

class KimiK25Eagle3:
    name = "kimi_k25_eagle3"
    package, relpath = "sglang", "sglang/srt/models/kimi_k25.py"
    anchor, where, indent = r"^    def load_weights\(self, weights", "before", "    "
    cls = "KimiK25ForConditionalGeneration"
    methods = {
        "get_embed_and_head": (
            "    def get_embed_and_head(self):\n"
            "        # EAGLE-3 shares the target's embedding and LM head with its drafter.\n"
            "        return self.language_model.get_embed_and_head()\n"),
        "set_embed_and_head": (
            "    def set_embed_and_head(self, embed, head):\n"
            "        return self.language_model.set_embed_and_head(embed, head)\n"),
        "set_eagle3_layers_to_capture": (
            "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
            "        # The aux hidden states EAGLE-3 reads come from the wrapped DeepseekV3 layers.\n"
            "        return self.language_model.set_eagle3_layers_to_capture(layer_ids)\n"),
    }

    def missing_file(self, version):
        return ("KimiK25 is not in sglang %s (no %s): this release cannot serve Kimi-K2.5; "
                "set sglang_patches_kimi_k25_eagle3: false if this fleet serves another model"
                % (version, self.relpath))

    def _class(self, tree):
        node = find_class(tree, self.cls)
        if node is None:
            raise Drift("class %s not found" % self.cls)
        return node

    def missing(self, tree):
        present = {n.name for n in self._class(tree).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        return [m for m in self.methods if m not in present]

    def upstream_has_it(self, tree, settings):
        return not self.missing(tree)

    def check_anchor(self, tree, lineno, settings):
        node = self._class(tree)
        if not node.lineno < lineno <= node.end_lineno:
            raise Drift("the anchor is not inside class %s" % self.cls)
        init = find_function(node.body, "__init__")
        if init is None or "language_model" not in names_in(init):
            raise Drift("%s.__init__ no longer sets self.language_model" % self.cls)

    def block(self, tree, settings):
        return "\n".join(self.methods[m] for m in self.missing(tree)) + "\n"

    def in_effect(self, tree, settings):
        missing = self.missing(tree)
        if missing:
            return "%s lacks %s" % (self.cls, ", ".join(missing))
        module_level = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in self.methods]
        if module_level:
            return "%s defined at module level, outside the class" % ", ".join(module_level)
        return None


class SymmMemMaxSizes:
    name = "sm120_symm_mem_max_sizes"
    package, relpath = "sglang", "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
    anchor, where, indent = r"^TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = \{$", "after", "    "
    table = "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"

    def _table(self, tree):
        node = dict_assignment(tree.body, self.table)
        if node is None:
            raise Drift("%s is no longer a dict literal at module level" % self.table)
        return node

    def upstream_has_it(self, tree, settings):
        return 12 in dict_keys(self._table(tree))

    def check_anchor(self, tree, lineno, settings):
        if self._table(tree).lineno != lineno:
            raise Drift("the anchor is not the %s assignment" % self.table)
        if "MiB" not in names_in(tree):
            raise Drift("MiB is no longer defined")

    def block(self, tree, settings):
        sizes = ", ".join("%d: %d * MiB" % (int(k), int(v)) for k, v in sorted(settings["symm_mem_max_sizes_mib"].items(),
                                                                             key=lambda kv: int(kv[0])))
        return ("    # SM120 (RTX PRO 6000 Blackwell): without an entry --enable-torch-symm-mem dies with KeyError: 12\n"
                "    12: {%s},\n" % sizes)

    def in_effect(self, tree, settings):
        return None if 12 in dict_keys(self._table(tree)) else "%s has no entry for capability 12" % self.table


class SymmMemMultimem:
    name = "sm120_symm_mem_multimem"
    package, relpath = "sglang", "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
    anchor, where, indent = r"^    _WORLD_SIZES_MULTIMEM = \{$", "after", "        "
    cls, table = "TorchSymmMemCommunicator", "_WORLD_SIZES_MULTIMEM"

    def _table(self, tree):
        node = find_class(tree, self.cls)
        table = dict_assignment(node.body, self.table) if node else None
        if table is None:
            raise Drift("%s.%s is no longer a dict literal" % (self.cls, self.table))
        return table

    def upstream_has_it(self, tree, settings):
        return 12 in dict_keys(self._table(tree))

    def check_anchor(self, tree, lineno, settings):
        if self._table(tree).lineno != lineno:
            raise Drift("the anchor is not the %s.%s assignment" % (self.cls, self.table))

    def block(self, tree, settings):
        sizes = ", ".join(str(int(s)) for s in settings["multimem_world_sizes"])
        return ("        # SM120: PCIe parts have no multicast, so no world size takes the multimem path (two-shot)\n"
                "        12: [%s],\n" % sizes)

    def in_effect(self, tree, settings):
        return None if 12 in dict_keys(self._table(tree)) else "%s.%s has no entry for 12" % (self.cls, self.table)


class AllreduceFusionGate:
    name = "sm120_allreduce_fusion_gate"
    package, relpath = "sglang", "sglang/srt/layers/communicator.py"
    requires = ("sglang/srt/utils/common.py", "is_sm120_supported")  # what the block imports
    anchor, where, indent = r"^_is_sm100_supported = _is_cuda and is_sm100_supported\(\)$", "after", ""
    gate, flag = "apply_flashinfer_allreduce_fusion", "_is_sm100_supported"

    def _gate(self, tree):
        node = find_function(tree.body, self.gate)
        if node is None:
            raise Drift("function %s not found" % self.gate)
        return node

    def upstream_has_it(self, tree, settings):
        names = names_in(self._gate(tree))
        return any("sm120" in n or "blackwell" in n for n in names)

    def check_anchor(self, tree, lineno, settings):
        gate = self._gate(tree)
        if self.flag not in names_in(gate):
            raise Drift("%s no longer tests %s" % (self.gate, self.flag))
        # The patch widens the flag itself: it must not be used for anything but this gate.
        others = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == self.flag
                  and isinstance(n.ctx, ast.Load) and not gate.lineno <= n.lineno <= gate.end_lineno]
        if others:
            raise Drift("%s is also read on line(s) %s, not only by %s" % (self.flag, others, self.gate))

    def block(self, tree, settings):
        return ("# SM120 runs FlashInfer's allreduce fusion too (%s is read only by %s).\n"
                "from sglang.srt.utils.common import is_sm120_supported as _is_sm120_supported  # noqa: E402\n\n"
                "%s = %s or (_is_cuda and _is_sm120_supported())\n" % (self.flag, self.gate, self.flag, self.flag))

    def in_effect(self, tree, settings):
        widened = [n for n in tree.body if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == self.flag for t in n.targets)
                   and "_is_sm120_supported" in names_in(n.value)]
        return None if widened else "%s does not admit capability 12" % self.gate


class FlashinferTrtllmComm:
    name = "sm120_flashinfer_trtllm_comm"
    package, relpath = "flashinfer", "flashinfer/jit/comm.py"
    anchor, where, indent = r"^def gen_trtllm_comm_module\(\) -> JitSpec:$", "after", "    "
    func = "gen_trtllm_comm_module"

    def _shape(self, tree):
        """Upstream's `nvcc_flags = ...get_nvcc_flags_list(supported_major_versions=[...])` and its return."""
        node = find_function(tree.body, self.func)
        if node is None:
            raise Drift("function %s not found" % self.func)
        body = node.body
        if len(body) != 2 or not isinstance(body[0], ast.Assign) or not isinstance(body[1], ast.Return):
            raise Drift("%s is no longer `nvcc_flags = ...; return gen_jit_spec(...)`" % self.func)
        call = body[0].value
        majors = next((kw.value for kw in getattr(call, "keywords", []) if kw.arg == "supported_major_versions"), None)
        if not isinstance(majors, ast.List):
            raise Drift("%s no longer passes supported_major_versions as a list" % self.func)
        return node, body[0], [e.value for e in majors.elts], body[1]

    def upstream_has_it(self, tree, settings):
        return 12 in self._shape(tree)[2]

    def check_anchor(self, tree, lineno, settings):
        if self._shape(tree)[0].lineno != lineno:
            raise Drift("the anchor is not the definition of %s" % self.func)

    def block(self, tree, settings):
        _, assign, majors, ret = self._shape(tree)
        call = assign.value
        new = ast.Call(func=call.func, args=call.args, keywords=[
            ast.keyword(arg="supported_major_versions", value=ast.List(
                elts=[ast.Constant(m) for m in majors + [12]], ctx=ast.Load()))])
        return ("    # SM120 (major 12) runs these kernels too; upstream builds them for majors %s only.\n"
                "    %s = %s\n    return %s\n"
                % (majors, ast.unparse(assign.targets[0]), ast.unparse(new), ast.unparse(ret.value)))

    def in_effect(self, tree, settings):
        node = find_function(tree.body, self.func)
        first = next((n for n in node.body if isinstance(n, ast.Assign)), None) if node else None
        majors = next((kw.value for kw in getattr(first.value, "keywords", []) if kw.arg == "supported_major_versions"),
                      None) if first else None
        ok = isinstance(majors, ast.List) and 12 in [e.value for e in majors.elts]
        return None if ok else "%s does not build for major 12" % self.func


class ServerArgsRedactSecrets:
    """sglang logs the whole ServerArgs at startup (`logger.info(f"{server_args=}")` in
    srt/entrypoints/engine.py), API keys included, into the journal. A __repr__ of the class's own
    wins over the one @dataclass generates, so every log of ServerArgs shows the keys redacted."""
    name = "server_args_redact_secrets"
    package, relpath = "sglang", "sglang/srt/server_args.py"
    anchor, where, indent = r"^    def __post_init__\(self\):$", "before", "    "
    cls, secrets = "ServerArgs", ("api_key", "admin_api_key")

    def _class(self, tree):
        node = find_class(tree, self.cls)
        if node is None:
            raise Drift("class %s not found" % self.cls)
        return node

    def upstream_has_it(self, tree, settings):
        return find_function(self._class(tree).body, "__repr__") is not None

    def check_anchor(self, tree, lineno, settings):
        node = self._class(tree)
        if not node.lineno < lineno <= node.end_lineno:
            raise Drift("the anchor is not inside class %s" % self.cls)
        if not any(isinstance(n, ast.Import) and any(a.name == "dataclasses" and not a.asname for a in n.names)
                   for n in tree.body):
            raise Drift("the module no longer imports dataclasses, which the block uses")
        if not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            raise Drift("%s is no longer a dataclass" % self.cls)
        fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        missing = [f for f in self.secrets if f not in fields]
        if missing:
            raise Drift("%s has no field %s" % (self.cls, ", ".join(missing)))

    def block(self, tree, settings):
        return ("    def __repr__(self):\n"
                "        # Keys stay out of logs: sglang logs the whole ServerArgs at startup.\n"
                "        secrets = %r\n"
                "        shown = ('%%s=%%r' %% (f.name, '<redacted>' if f.name in secrets and getattr(self, f.name)\n"
                "                                else getattr(self, f.name)) for f in dataclasses.fields(self))\n"
                "        return '%%s(%%s)' %% (type(self).__name__, ', '.join(shown))\n" % (self.secrets,))

    def in_effect(self, tree, settings):
        method = find_function(self._class(tree).body, "__repr__")
        if method is None:
            return "%s has no __repr__ of its own" % self.cls
        text = ast.unparse(method)
        return None if all(s in text for s in self.secrets) else "%s.__repr__ does not redact %s" % (
            self.cls, ", ".join(self.secrets))


PATCHES = {p.name: p for p in (KimiK25Eagle3(), SymmMemMaxSizes(), SymmMemMultimem(), AllreduceFusionGate(),
                               FlashinferTrtllmComm(), ServerArgsRedactSecrets())}


def check_defined(site_packages, relpath, name):
    """The block imports `name` from `relpath`: it must be a module-level name there."""
    path = os.path.join(site_packages, relpath)
    try:
        with open(path) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError) as exc:
        raise Drift("cannot read %s: %s" % (path, exc))
    defined = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if name not in defined:
        raise Drift("%s no longer defines %s" % (path, name))


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
                         reason="upstream already provides it; " + ("our now redundant block will be removed"
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
            "symm_mem_max_sizes_mib": {"type": "dict", "default": {2: 64, 4: 64, 6: 128, 8: 128}},
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
