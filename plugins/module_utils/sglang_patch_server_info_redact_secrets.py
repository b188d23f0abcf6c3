# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch server_info_redact_secrets: /server_info and /get_server_info answer without the server's keys."""
from __future__ import annotations

import ast

from ansible.module_utils.sglang_patch_ast import Drift, find_function
from ansible.module_utils.sglang_patch_server_args_redact_secrets import ServerArgsRedactSecrets

WRAPPER = "_sglang_fleet_without_keys"


class ServerInfoRedactSecrets:
    """sglang 0.5.9's /server_info returns `dataclasses.asdict(server_args)`, api_key and admin_api_key
    included, at the client key's auth level (/get_server_info calls it): any holder of the client key
    read the admin key there, and bench_serving stores the answer in its result file. The block, right
    after server_info, wraps it so both keys read <redacted>, and registers the wrapper as the route (the
    decorator registered the unwrapped function when the module was imported); /get_server_info calls
    server_info by its global name, so it answers through the wrapper too."""
    name = "server_info_redact_secrets"
    package, relpath = "sglang", "sglang/srt/entrypoints/http_server.py"
    anchor, where, indent = r'^@app\.get\("/get_load"\)$', "before", ""
    function, route = "server_info", "/server_info"
    secrets = ServerArgsRedactSecrets.secrets  # the same ServerArgs fields its __repr__ redacts

    def _function(self, tree):
        node = find_function(tree.body, self.function)
        if node is None:
            raise Drift("function %s not found" % self.function)
        return node

    def upstream_has_it(self, tree, settings):
        # An answer that names the keys itself is upstream's own redaction (none up to 0.5.23 has one).
        return any(s in ast.unparse(self._function(tree)) for s in self.secrets)

    def check_anchor(self, tree, lineno, settings):
        node = self._function(tree)
        if not isinstance(node, ast.AsyncFunctionDef) or node.args.args:
            raise Drift("%s is no longer an async function without parameters" % self.function)
        if not any(ast.unparse(d) == "app.get(%r)" % self.route for d in node.decorator_list):
            raise Drift("%s is no longer the route @app.get(%r)" % (self.function, self.route))
        after = next((n for n in tree.body if n.lineno > node.end_lineno), None)
        # A statement's first line is its first decorator's, where it has any.
        if after is None or min([after.lineno] + [d.lineno for d in getattr(after, "decorator_list", [])]) != lineno:
            raise Drift("the anchor is not the statement right after %s" % self.function)
        if not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "app" for t in n.targets)
                   and "FastAPI(" in ast.unparse(n.value) for n in tree.body):
            raise Drift("the module no longer makes its FastAPI app as `app = FastAPI(...)`")
        if not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == self.function
                   for f in tree.body if isinstance(f, ast.AsyncFunctionDef) and f.name == "get_server_info"
                   for n in ast.walk(f)):
            raise Drift("get_server_info no longer answers by calling %s" % self.function)

    def block(self, tree, settings):
        return ("import functools  # noqa: E402\n"
                "\n"
                "\n"
                "def %(wrapper)s(endpoint):\n"
                "    # The server's keys stay out of its answer: ServerArgs' asdict() holds them.\n"
                "    @functools.wraps(endpoint)\n"
                "    async def answer():\n"
                "        info = await endpoint()\n"
                "        return {key: '<redacted>' if key in %(secrets)r and value else value\n"
                "                for key, value in info.items()}\n"
                "\n"
                "    return answer\n"
                "\n"
                "\n"
                "%(function)s = %(wrapper)s(%(function)s)\n"
                "app.router.routes[:] = [r for r in app.router.routes if getattr(r, 'path', None) != %(route)r]\n"
                "app.get(%(route)r)(%(function)s)\n"
                % {"wrapper": WRAPPER, "secrets": self.secrets, "function": self.function, "route": self.route})

    def in_effect(self, tree, settings):
        wrapper = find_function(tree.body, WRAPPER)
        if wrapper is None:
            return "%s has no %s" % (self.relpath, WRAPPER)
        if not all(s in ast.unparse(wrapper) for s in self.secrets):
            return "%s does not redact %s" % (WRAPPER, ", ".join(self.secrets))
        after = [ast.unparse(n) for n in tree.body if n.lineno > wrapper.end_lineno]
        wanted = ["%s = %s(%s)" % (self.function, WRAPPER, self.function), "app.get(%r)(%s)" % (self.route, self.function)]
        if not all(w in after for w in wanted):
            return "%s is not what %s answers with" % (WRAPPER, self.route)
        return None
