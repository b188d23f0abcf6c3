# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch eagle3_fused_allreduce_capture: EAGLE-3 reads reduced hidden states under allreduce fusion.

With FlashInfer allreduce fusion, each DeepseekV2 decoder layer leaves its MLP output unreduced
(`hidden_states._sglang_needs_allreduce_fusion = True`): every rank holds its partial sum, and the
next layer's fused all-reduce + add + RMSNorm reduces it. sglang 0.5.9 and 0.5.10 capture
EAGLE-3's auxiliary states in `DeepseekV2Model.forward` as `hidden_states + residual` *before*
that next layer runs, so at TP > 1 the drafter reads one rank's partial sum. Upstream fixed it in
PR #28343 by capturing the fused kernel's residual output inside the layer
(`captured_last_layer_outputs`), the shape 0.5.23 has.

The block goes just before the capture: for a layer that is captured, and only when the state it
is handed is a deferred partial sum, it reduces that state with sglang's own all-reduce (the one
the unfused path uses) and clears the deferral flag, so the capture and this layer see exactly
what they see with fusion off. The cost is the fusion of the captured layers alone (3 of 61 on
Kimi-K2.5). Capturing inside the layer, as upstream does, would save that, but means rewriting
the layer's forward and its signature rather than inserting one block.
"""
from __future__ import annotations

import ast

from ansible.module_utils.sglang_patch_ast import Drift, find_class, find_function, names_in

FLAG = "_sglang_needs_allreduce_fusion"
REDUCE = "tensor_model_parallel_all_reduce"
UPSTREAM_FIX = "captured_last_layer_outputs"  # PR #28343: the layer captures after its fused kernel


def _is_partial_capture(node):
    """`<list>.append(hidden_states + residual)`: the capture that reads a deferred partial sum."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
            and len(node.args) == 1 and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Add)
            and [ast.unparse(node.args[0].left), ast.unparse(node.args[0].right)] == ["hidden_states", "residual"])


def _is_capture_test(node):
    """`if i in self.layers_to_capture:`"""
    return isinstance(node, ast.If) and "layers_to_capture" in names_in(node.test) and \
        isinstance(node.test, ast.Compare) and isinstance(node.test.ops[0], ast.In)


def _is_our_reduction(node):
    """`if <layer captured> and getattr(hidden_states, FLAG, False): hidden_states = REDUCE(...)`"""
    if not isinstance(node, ast.If) or "layers_to_capture" not in names_in(node.test):
        return False
    flags = [n for n in ast.walk(node.test) if isinstance(n, ast.Constant) and n.value == FLAG]
    reduces = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id == REDUCE]
    return bool(flags and reduces)


class Eagle3FusedAllreduceCapture:
    name = "eagle3_fused_allreduce_capture"
    package, relpath = "sglang", "sglang/srt/models/deepseek_v2.py"
    anchor, where, indent = r"^                if i in self\.layers_to_capture:$", "before", "                "
    model, layer = "DeepseekV2Model", "DeepseekV2DecoderLayer"

    def _forward(self, tree, cls):
        node = find_class(tree, cls)
        forward = find_function(node.body, "forward") if node else None
        if forward is None:
            raise Drift("%s.forward not found" % cls)
        return forward

    def _loop(self, tree):
        """The loop over the layers in the model's forward, and the capture `if` in it."""
        forward = self._forward(tree, self.model)
        for loop in (n for n in ast.walk(forward) if isinstance(n, ast.For)):
            captures = [n for n in ast.walk(loop) if _is_capture_test(n)]
            if captures:
                return forward, loop, captures
        raise Drift("%s.forward has no loop that tests `i in self.layers_to_capture`" % self.model)

    def upstream_has_it(self, tree, settings):
        forward = self._forward(tree, self.model)
        passes_capture = any(isinstance(n, ast.keyword) and n.arg == UPSTREAM_FIX for n in ast.walk(forward))
        partial = any(_is_partial_capture(n) for n in ast.walk(forward))
        return passes_capture and not partial

    def check_anchor(self, tree, lineno, settings):
        forward, loop, captures = self._loop(tree)
        if [c.lineno for c in captures] != [lineno]:
            raise Drift("the anchor is not the one `if i in self.layers_to_capture:` of %s.forward's layer loop"
                        % self.model)
        if not any(_is_partial_capture(n) for n in ast.walk(captures[0])):
            raise Drift("the capture no longer appends `hidden_states + residual`")
        layer_sets_flag = any(isinstance(n, ast.Attribute) and n.attr == FLAG and isinstance(n.ctx, ast.Store)
                              for n in ast.walk(self._forward(tree, self.layer)))
        if not layer_sets_flag:
            raise Drift("%s.forward no longer defers its all-reduce with hidden_states.%s" % (self.layer, FLAG))
        imported = any(isinstance(n, ast.ImportFrom) and any(a.name == REDUCE and not a.asname for a in n.names)
                       for n in tree.body)
        if not imported:
            raise Drift("the module no longer imports %s, which the block calls" % REDUCE)

    def block(self, tree, settings):
        return (
            "                # Under allreduce fusion the previous layer left its MLP output unreduced (a\n"
            "                # partial sum per rank) for this layer's fused all-reduce + RMSNorm. EAGLE-3\n"
            "                # captures hidden_states + residual below: reduce it first with sglang's own\n"
            "                # all-reduce, as the unfused path does, so the drafter reads the sum (sglang\n"
            "                # PR #28343); this layer then takes the unfused add + RMSNorm.\n"
            "                if (\n"
            "                    i in self.layers_to_capture\n"
            "                    and residual is not None\n"
            "                    and hidden_states.shape[0] > 0\n"
            "                    and getattr(hidden_states, %r, False)\n"
            "                ):\n"
            "                    hidden_states = %s(hidden_states)\n"
            "                    hidden_states.%s = False\n" % (FLAG, REDUCE, FLAG))

    def in_effect(self, tree, settings):
        _, loop, captures = self._loop(tree)
        reductions = [n for n in ast.walk(loop) if _is_our_reduction(n)]
        if not reductions:
            return "%s.forward captures EAGLE-3 states without reducing a deferred partial sum" % self.model
        if reductions[0].lineno > captures[0].lineno:
            return "the reduction comes after the capture in %s.forward" % self.model
        return None
