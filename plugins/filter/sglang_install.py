# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The id of an sglang install: the same inputs give the same id on every host."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_install_id
short_description: The id of an sglang install, from what defines it
description:
  - The id is C(<sglang version>-<12 hex digits>), the digits from the sha256 of I(_input) written
    as canonical JSON (sorted keys, no spaces), so key order and YAML formatting do not matter
    and every host with the same inputs gets the same id.
  - I(_input) must name the sglang version as C(sglang).
positional: _input
options:
  _input:
    description: What defines the install (versions, wheel URLs and checksums, Python, patch set).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The install id is known
  ansible.builtin.set_fact:
    install_id: "{{ {'sglang': '0.5.9', 'python': 'cpython-312'} | sglang_install_id }}"
"""

RETURN = r"""
_value:
  description: The install id, for example 0.5.9-3f2a9c1d0b7e.
  type: str
"""

import ast
import hashlib
import json
import re

import yaml
from ansible.errors import AnsibleFilterError

# What the sglang role's vars pass for a patch setting the site does not set (the patches role's
# defaults are not in the sglang role's scope).
ROLE_DEFAULT = "(role default)"
PATCH_SETTING_PREFIX = "sglang_patches_"
# tools/build_collection.py rewrites `from ansible.module_utils.<x> import` into the collection's name.
COLLECTION_MODULE_UTILS = re.compile(r"ansible_collections\.\w+\.\w+\.plugins\.module_utils\.")
# Ansible's documentation of a module, read by ansible-doc, never run (the build rewrites its M() links).
MODULE_DOCS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def sglang_install_mismatches(report, expected):
    """What a venv holds that its install's pins do not say, one line each ([] when it matches).

    report is venv_report.py's output; expected maps a package to its version ("" when not pinned,
    so not checked) or, for a wheel installed by URL, to {url, sha256}; expected["python"] is the
    interpreter's cache tag."""
    problems = []
    if report.get("python") != expected.get("python"):
        problems.append("python is %s, not %s" % (report.get("python"), expected.get("python")))
    for name, want in sorted(expected.get("packages", {}).items()):
        have = (report.get("packages") or {}).get(name)
        if not want:
            continue
        if have is None:
            problems.append("%s is not installed" % name)
        elif isinstance(want, dict):
            if have.get("url") != want.get("url") or (want.get("sha256") and have.get("sha256") != want["sha256"]):
                problems.append("%s came from %s, not %s" % (name, have.get("url") or "an index", want.get("url")))
        elif have.get("version") != want:
            problems.append("%s is %s, not %s" % (name, have.get("version"), want))
    return problems


def _canonical(node):
    """An AST as plain data: node type and fields, no line numbers. A field that is None or [] is left
    out, so the fields newer Pythons add with empty values (type_params in 3.12, ...) leave it as it was:
    the repository's patch code gives one digest under every controller Python from 3.9 to 3.13."""
    if isinstance(node, ast.AST):
        fields = {}
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            fields[name] = _canonical(value)
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_canonical(item) for item in node]
    if node is None or isinstance(node, (str, int, float, bool)):
        return node
    return [type(node).__name__, repr(node)]  # bytes, complex, Ellipsis


def _is_docstring(statement):
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def code_meaning(text):
    """What a Python file does, as plain data: its AST without comments, formatting, docstrings or
    Ansible's documentation strings, with our module_utils imported under the repository's names
    whether the file is the repository's or the built collection's."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:]
        if isinstance(node, ast.ImportFrom) and node.module:
            node.module = COLLECTION_MODULE_UTILS.sub("ansible.module_utils.", node.module)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and all(
        isinstance(t, ast.Name) and t.id in MODULE_DOCS for t in n.targets))]
    return _canonical(tree)


def _digest(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sglang_patch_set(sources, settings):
    """The patch set the sglang_patches stage applies, as it goes into the install id: what it does,
    not how its files are written.

    sources: `code`, the texts of the probe module and of each patch's module_utils file, in a fixed
    order; `defaults` and `internals`, the texts of the patches role's defaults/main.yml and
    vars/main.yml. settings: each setting that changes what is written, named without its
    sglang_patches_ prefix, as the site sets it or ROLE_DEFAULT.

    The code counts as its AST with docstrings stripped, not as a fingerprint per patch (name,
    anchor, block text for the settings). A fingerprint cannot be computed without upstream's file
    for every block (flashinfer's block is rebuilt from upstream's call, KimiK25's holds only the
    methods upstream lacks), and it would miss code that decides what is written without being
    the block: upstream_has_it (whether a patch applies at all), the probe's planning, the markers.
    The AST changes with any change to what runs, so no such change can edit a venv in service,
    and it does not change with a comment, a docstring or formatting. A refactor that writes the
    same bytes is a new install: the safe side.

    The defaults count as the values of the settings (a setting the site leaves alone counts as its
    default's value), so a comment there, or a change of an operational default (backup, local
    facts), is no new install. The internals count as their parsed YAML."""
    defaults = yaml.safe_load(sources["defaults"]) or {}
    values = {}
    for name, given in settings.items():
        if given == ROLE_DEFAULT:
            if PATCH_SETTING_PREFIX + name not in defaults:
                raise AnsibleFilterError("sglang_patch_set: %s%s has no default in the patches role"
                                         % (PATCH_SETTING_PREFIX, name))
            given = defaults[PATCH_SETTING_PREFIX + name]
        values[name] = given
    return {"code": _digest([code_meaning(text) for text in sources["code"]]),
            "internals": _digest(yaml.safe_load(sources["internals"])),
            "settings": values}


def sglang_patch_set_earlier(sources, settings):
    """The patch set as releases before sglang_patch_set wrote it into the install id (the files'
    bytes, as the file lookup reads them): the id an install on a host was built under. Their
    vars joined the code files with a backslash and an n, not a newline (`join('\\n')` in a folded
    YAML scalar), and so does this, or no earlier id would match."""
    code = COLLECTION_MODULE_UTILS.sub("ansible.module_utils.", "\\n".join(sources["code"]))
    return {"code": hashlib.sha256(code.encode()).hexdigest(),
            "defaults": hashlib.sha256(sources["defaults"].encode()).hexdigest(),
            "internals": hashlib.sha256(sources["internals"].encode()).hexdigest(),
            "settings": dict(settings)}


def sglang_install_id(inputs):
    if not isinstance(inputs, dict) or not str(inputs.get("sglang") or ""):
        raise AnsibleFilterError("sglang_install_id needs a dict that names the sglang version as 'sglang'")
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return "%s-%s" % (inputs["sglang"], hashlib.sha256(canonical.encode()).hexdigest()[:12])


def sglang_install_pick(installs, wanted, earlier=""):
    """Which install under venvs/ is the one whose inputs give the id `wanted`.

    installs is sglang_venvs' list: each install's directory name (`id`, the id it was built under),
    whether it is complete, and the id its marker records (`recorded`). In this order:
    - the install named `wanted` (complete or not: an unfinished one is finished);
    - a complete install whose marker records `wanted`: one built under an earlier representation of
      the same inputs, adopted by an earlier run;
    - the complete install named `earlier`, the id these same inputs had when the patch set went into
      the id as its files' bytes (sglang_patch_set_earlier, from today's files): built from exactly
      these files and settings, so it is this install. Its marker is then to record `wanted`
      (`adopt` true), so a later comment, which changes those bytes, still finds it;
    - else `wanted`, to be built.
    Returns {"id": the directory to use, "adopt": whether its marker is to record `wanted`}."""
    names = {i["id"]: i for i in installs}
    if wanted in names:
        return {"id": wanted, "adopt": False}
    recorded = [i["id"] for i in installs if i.get("complete") and i.get("recorded") == wanted]
    if recorded:
        return {"id": recorded[0], "adopt": False}
    if earlier and earlier != wanted and names.get(earlier, {}).get("complete"):
        return {"id": earlier, "adopt": True}
    return {"id": wanted, "adopt": False}


class FilterModule:
    def filters(self):
        return {"sglang_install_id": sglang_install_id, "sglang_install_mismatches": sglang_install_mismatches,
                "sglang_patch_set": sglang_patch_set, "sglang_patch_set_earlier": sglang_patch_set_earlier,
                "sglang_install_pick": sglang_install_pick}
