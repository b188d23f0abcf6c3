# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch server_args_redact_secrets: ServerArgs prints its API keys as <redacted> in every log."""
from __future__ import annotations

import ast

from ansible.module_utils.sglang_patch_ast import Drift, find_class, find_function


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
