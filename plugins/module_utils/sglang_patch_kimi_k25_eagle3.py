# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch kimi_k25_eagle3: KimiK25 delegates the methods EAGLE-3 calls on its target model to the wrapped DeepseekV3."""
from __future__ import annotations

import ast

from ansible.module_utils.sglang_patch_ast import Drift, find_class, find_function, names_in


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
