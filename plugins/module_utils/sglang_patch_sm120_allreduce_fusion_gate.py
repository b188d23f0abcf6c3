# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch sm120_allreduce_fusion_gate: sglang's FlashInfer allreduce-fusion gate admits SM120."""
from __future__ import annotations

import ast

from ansible.module_utils.sglang_patch_ast import Drift, find_function, names_in


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
