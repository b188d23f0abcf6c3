# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch sm120_symm_mem_max_sizes: A capability-12 row in the torch symmetric-memory all-reduce size table."""
from __future__ import annotations

from ansible.module_utils.sglang_patch_ast import Drift, dict_assignment, dict_keys, names_in


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
