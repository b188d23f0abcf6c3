# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every sglang-fleet patch shares: its markers, the block's place in the file, and the AST
queries a patch asks of upstream's code (never grep)."""
from __future__ import annotations

import ast
import os
import re

MARKER = "# {mark} sglang-fleet patch %s"


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
