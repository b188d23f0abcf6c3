# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch sm120_flashinfer_trtllm_comm: flashinfer's TRT-LLM comm JIT module builds for major 12 too."""
from __future__ import annotations

import ast

from ansible.module_utils.sglang_patch_ast import Drift, find_function


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
