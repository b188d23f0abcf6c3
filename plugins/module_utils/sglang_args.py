# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command-line flags an installed sglang accepts, read from its server_args.py source.

No import of sglang (nor of torch): the `parser.add_argument(...)` calls are read with `ast`,
their `choices` resolved where they are literals, module constants, or `Class.Map.keys()` of a
class sglang imports. Then an argv is checked as argparse would: exact flags, unique prefixes
(argparse's allow_abbrev), the number of values each flag takes, and choices.
Stdlib only: the lab's server fixture uses this file too.
"""
from __future__ import annotations

import ast
import difflib
import os

ZERO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version", "DeprecatedAction"}


class Flag(object):
    def __init__(self, names, nargs, choices, dest):
        self.names, self.nargs, self.choices, self.dest = names, nargs, choices, dest

    def __repr__(self):
        return "Flag(%s)" % self.names[0]


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


class _Resolver(object):
    """Turns a `choices=` expression into a list of values, or None when it cannot."""

    def __init__(self, site_packages, tree):
        self.site_packages = site_packages
        self.module_assigns = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                               for t in n.targets if isinstance(t, ast.Name)}
        self.imports = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = node.module

    def resolve(self, node, local_assigns, depth=0):
        if depth > 8 or node is None:
            return None
        value = _literal(node)
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(node, (ast.List, ast.Tuple)):
            out = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.resolve(elt.value, local_assigns, depth + 1)
                    if inner is None:
                        return None
                    out.extend(inner)
                else:
                    item = _literal(elt)
                    if item is None:
                        return None
                    out.append(item)
            return out
        if isinstance(node, ast.Name):
            source = local_assigns.get(node.id, self.module_assigns.get(node.id))
            return self.resolve(source, local_assigns, depth + 1)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("list", "tuple", "sorted") and len(node.args) == 1:
                return self.resolve(node.args[0], local_assigns, depth + 1)
            if isinstance(func, ast.Attribute) and func.attr == "keys" and not node.args:
                return self._class_dict_keys(func.value)
        return None

    def _class_dict_keys(self, node):
        """`Class.Attr.keys()` where Class comes from `from module import Class`."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            return None
        module = self.imports.get(node.value.id)
        if not module:
            return None
        path = os.path.join(self.site_packages, *module.split(".")) + ".py"
        try:
            with open(path) as handle:
                tree = ast.parse(handle.read())
        except (OSError, SyntaxError):
            return None
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == node.value.id), None)
        for stmt in cls.body if cls else []:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == node.attr for t in targets) \
                        and isinstance(stmt.value, ast.Dict):
                    keys = [_literal(k) for k in stmt.value.keys]
                    return keys if all(isinstance(k, str) for k in keys) else None
        return None


def _function_assigns(tree):
    """Per add_argument call: the plain `name = expr` assignments of the function it is in."""
    scopes = {}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigns = {t.id: n.value for n in ast.walk(func) if isinstance(n, ast.Assign)
                       for t in n.targets if isinstance(t, ast.Name)}
            for call in ast.walk(func):
                if isinstance(call, ast.Call):
                    scopes.setdefault(id(call), assigns)
    return scopes


def read_flags(site_packages):
    """{option string: Flag} for every add_argument call of sglang/srt/server_args.py."""
    path = os.path.join(site_packages, "sglang", "srt", "server_args.py")
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    resolver = _Resolver(site_packages, tree)
    scopes = _function_assigns(tree)
    flags = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        names = [n for n in names if n.startswith("-")]
        if not names:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        action_name = _literal(action) if isinstance(action, ast.Constant) else \
            (action.id if isinstance(action, ast.Name) else None)
        nargs = _literal(kw["nargs"]) if "nargs" in kw else (0 if action_name in ZERO_VALUE_ACTIONS else None)
        choices = resolver.resolve(kw.get("choices"), scopes.get(id(node), {})) if "choices" in kw else None
        flag = Flag(names, nargs, choices, names[0].lstrip("-").replace("-", "_"))
        flag.choices_unresolved = "choices" in kw and choices is None
        for name in names:
            flags[name] = flag
    return flags


def _match(option, flags):
    """(flag, canonical option, problem): argparse's exact match, else its unique-prefix match."""
    if option in flags:
        return flags[option], option, None
    candidates = sorted(name for name in flags if name.startswith(option) and name.startswith("--"))
    distinct = {id(flags[c]) for c in candidates}
    if len(distinct) == 1:
        return flags[candidates[0]], candidates[0], None
    if candidates:
        return None, None, "ambiguous: %s could be %s" % (option, ", ".join(candidates))
    close = difflib.get_close_matches(option, list(flags), n=3, cutoff=0.6)
    return None, None, "unknown flag %s%s" % (option, " (closest: %s)" % ", ".join(close) if close else "")


def lint(argv, flags):
    """(parsed, problems): {dest: value(s)} of argv as argparse would read it, and what is wrong."""
    parsed, problems, i = {}, [], 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-"):
            problems.append("unexpected value %r (no flag before it takes a value)" % token)
            continue
        option, inline = (token.split("=", 1) + [None])[:2] if "=" in token else (token, None)
        flag, canonical, problem = _match(option, flags)
        if problem:
            problems.append(problem)
            while i < len(argv) and not argv[i].startswith("-"):  # its values, whatever they are
                i += 1
            continue
        if option != canonical:  # an abbreviation, as argparse allows: say what it stands for
            canonical = "%s (%s)" % (option, canonical)
        if inline is not None:
            values = [inline]
        elif flag.nargs == 0:
            values = []
        elif flag.nargs in ("+", "*"):
            values = []
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        elif flag.nargs == "?":
            values = [argv[i]] if i < len(argv) and not argv[i].startswith("--") else []
            i += len(values)
        else:
            count = flag.nargs if isinstance(flag.nargs, int) else 1
            values = argv[i:i + count]
            i += len(values)
            if len(values) < count or any(v.startswith("--") for v in values):
                problems.append("%s expects %d value(s)" % (canonical, count))
                continue
        if flag.nargs == 0 and inline is not None:
            problems.append("%s takes no value (got %r)" % (canonical, inline))
            continue
        if flag.nargs == "+" and not values:
            problems.append("%s expects at least one value" % canonical)
            continue
        if flag.choices is not None:
            allowed = [str(c) for c in flag.choices]
            bad = [v for v in values if v not in allowed]
            if bad:
                problems.append("%s %s: not one of the choices (%s)" % (canonical, ", ".join(bad), ", ".join(allowed)))
                continue
        parsed[flag.dest] = values[0] if len(values) == 1 and flag.nargs in (None, "?", 1) else (values or True)
    return parsed, problems


def combination_problems(parsed, environment=None, gpus_per_node=None, nnodes=1):
    """What sglang accepts flag by flag but cannot run, from `lint`'s parse of the command line and
    the unit's environment, one sentence each. gpus_per_node: the host's GPUs, to check --tp (None:
    not checked)."""
    environment, problems = environment or {}, []
    speculative = parsed.get("speculative_algorithm")
    quantization = str(parsed.get("quantization") or "")
    if speculative and quantization.startswith("modelopt") and \
            parsed.get("speculative_draft_model_quantization") != "unquant":
        problems.append("--quantization %s with EAGLE-3 needs --speculative-draft-model-quantization unquant, or the "
                        "BF16 drafter inherits %s and fails to load" % (quantization, quantization))
    topk = int(parsed.get("speculative_eagle_topk") or 1)
    if speculative and str(environment.get("SGLANG_ENABLE_SPEC_V2", "")).lower() in ("1", "true") and topk > 1:
        problems.append("SGLANG_ENABLE_SPEC_V2 needs --speculative-eagle-topk 1, not %d" % topk)
    tp = int(parsed.get("tensor_parallel_size") or 1)
    if gpus_per_node is not None and tp != int(gpus_per_node) * int(nnodes):
        problems.append("--tp %d does not match %d GPU(s) x %d node(s)" % (tp, int(gpus_per_node), int(nnodes)))
    return problems
