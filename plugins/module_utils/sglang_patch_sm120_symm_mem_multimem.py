# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch sm120_symm_mem_multimem: A capability-12 row (no multimem world sizes on PCIe) in the symmetric-memory communicator."""
from __future__ import annotations

from ansible.module_utils.sglang_patch_ast import Drift, dict_assignment, dict_keys, find_class


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
