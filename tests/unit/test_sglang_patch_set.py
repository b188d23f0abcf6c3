"""The patch set in the install id (plugins/filter/sglang_install.py, sglang_patch_set): what the patches
stage does, from the repository's own patch modules and role files. A comment is no new install (no venv
built again, no server restarted for it); a change to what is written is."""
import re

import pytest
import yaml

import build_collection
from conftest import ROOT
from sglang_install import ROLE_DEFAULT, sglang_install_id, sglang_install_pick, sglang_patch_set, \
    sglang_patch_set_earlier

PROBE = ROOT / "plugins/modules/sglang_patch_probe.py"
PATCH_MODULES = sorted((ROOT / "plugins/module_utils").glob("sglang_patch_*.py"))
CODE = [PROBE] + PATCH_MODULES
SETTINGS = yaml.safe_load((ROOT / "roles/sglang/vars/main.yml").read_text())["__sglang_patch_settings"]
UNSET = {name: ROLE_DEFAULT for name in SETTINGS}


def sources(edit=None):
    """The texts the role's vars read (the file lookup strips trailing whitespace), one file edited."""
    texts = {path: path.read_text() for path in CODE + [ROOT / "roles/sglang_patches/defaults/main.yml",
                                                         ROOT / "roles/sglang_patches/vars/main.yml"]}
    if edit:
        path, change = edit
        new = change(texts[path])
        assert new != texts[path], "the edit changed nothing in %s" % path.name
        texts[path] = new
    return {"code": [texts[p].rstrip() for p in CODE],
            "defaults": texts[ROOT / "roles/sglang_patches/defaults/main.yml"].rstrip(),
            "internals": texts[ROOT / "roles/sglang_patches/vars/main.yml"].rstrip()}


def install_id(edit=None, settings=UNSET, patch_set=sglang_patch_set):
    return sglang_install_id({"sglang": "0.5.9", "python": "cpython-312",
                              "patch_set": patch_set(sources(edit), settings)})


def after_line(regex, added):
    """Insert `added` (indented like the line) after the first line matching regex."""
    def change(text):
        match = re.search(regex, text, re.M)
        assert match, regex
        end = text.index("\n", match.end()) + 1
        indent = re.match(r"\s*", match.group(0)).group(0)
        return text[:end] + indent + added + "\n" + text[end:]
    return change


def replace(old, new):
    def change(text):
        assert text.count(old) == 1, old
        return text.replace(old, new)
    return change


UTILS = ROOT / "plugins/module_utils"
MULTIMEM = UTILS / "sglang_patch_sm120_symm_mem_multimem.py"
REDACT = UTILS / "sglang_patch_server_args_redact_secrets.py"
CAPTURE = UTILS / "sglang_patch_eagle3_fused_allreduce_capture.py"
DEFAULTS = ROOT / "roles/sglang_patches/defaults/main.yml"
INTERNALS = ROOT / "roles/sglang_patches/vars/main.yml"

UNCHANGED = {
    **{"a comment appended to " + p.name: (p, lambda t: t + "\n# a note for readers\n") for p in CODE},
    "a comment inside a block()": (MULTIMEM, after_line(r"^    def block\(self, tree, settings\):$",
                                                       "    # the table row, one per world size")),
    "a class docstring added": (MULTIMEM, after_line(r"^class SymmMemMultimem:$", '    """The PCIe row."""')),
    "a method docstring added": (REDACT, after_line(r"^    def in_effect\(self, tree, settings\):$",
                                                    '    """None when ServerArgs hides its keys."""')),
    "a class docstring reworded": (REDACT, replace("A __repr__ of the class's own", "A __repr__ of its own")),
    "a module docstring reworded": (CAPTURE, replace("The cost is the fusion of the captured layers alone",
                                                     "It costs the fusion of the captured layers alone")),
    "the probe's documentation reworded": (PROBE, replace("Read-only, it never writes.", "It writes nothing.")),
    "a comment appended to the defaults": (DEFAULTS, lambda t: t + "\n# a note for readers\n"),
    "a comment appended to the internals": (INTERNALS, lambda t: t + "\n# a note for readers\n"),
    "the defaults' comments reworded": (DEFAULTS, replace("# Which patches to apply", "# The patches applied")),
    "an operational default (backup)": (DEFAULTS, replace("sglang_patches_backup: true", "sglang_patches_backup: false")),
}

CHANGED = {
    "a block's text": (MULTIMEM, replace("so no world size takes the multimem path", "so no size takes multimem")),
    "a block's code": (REDACT, replace("'<redacted>'", "'<hidden>'")),
    "an anchor": (MULTIMEM, replace(r'anchor, where, indent = r"^    _WORLD_SIZES_MULTIMEM = \{$", "after"',
                                    r'anchor, where, indent = r"^    _WORLD_SIZES_MULTIMEM = \{", "after"')),
    "where a block goes": (MULTIMEM, replace('= \\{$", "after"', '= \\{$", "before"')),
    "what upstream_has_it accepts": (CAPTURE, replace("return passes_capture and not partial", "return passes_capture")),
    "the probe's planning": (PROBE, replace('block = patch.block(tree, settings).rstrip("\\n")',
                                            'block = patch.block(tree, settings)')),
    "the markers": (UTILS / "sglang_patch_ast.py", replace('MARKER = "# {mark} sglang-fleet patch %s"',
                                                           'MARKER = "# {mark} fleet patch %s"')),
    "a default of a setting": (DEFAULTS, replace("sglang_patches_multimem_world_sizes: []",
                                                 "sglang_patches_multimem_world_sizes: [2]")),
    "the internals": (INTERNALS, replace("['kimi_k25_eagle3']", "['kimi_k25_eagle3', 'server_args_redact_secrets']")),
}


@pytest.mark.parametrize("edit", UNCHANGED.values(), ids=UNCHANGED.keys())
def test_a_comment_docstring_or_operational_default_keeps_the_install(edit):
    assert install_id(edit) == install_id()


@pytest.mark.parametrize("edit", CHANGED.values(), ids=CHANGED.keys())
def test_a_change_to_what_is_written_is_a_new_install(edit):
    assert install_id(edit) != install_id()


def test_a_setting_the_site_changes_is_a_new_install_and_one_set_to_its_default_is_not():
    defaults = yaml.safe_load(DEFAULTS.read_text())
    as_default = dict(UNSET, multimem_world_sizes=defaults["sglang_patches_multimem_world_sizes"],
                      state=defaults["sglang_patches_state"])
    assert install_id(settings=as_default) == install_id()
    for name, value in {"multimem_world_sizes": [2], "state": "absent", "kimi_k25_eagle3": False,
                        "symm_mem_max_sizes_mib": {2: 64, 4: 64, 6: 128, 8: 256}}.items():
        assert install_id(settings=dict(UNSET, **{name: value})) != install_id(), name


def test_a_setting_without_a_default_in_the_patches_role_is_refused():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="sglang_patches_no_such_switch has no default"):
        sglang_patch_set(sources(), dict(UNSET, no_such_switch=ROLE_DEFAULT))


def test_the_built_collection_gives_the_repositorys_id():
    """tools/build_collection.py rewrites our module_utils imports and the modules' doc links."""
    ours = {p.stem for p in UTILS.glob("*.py")}
    modules = {p.stem for p in (ROOT / "plugins/modules").glob("*.py")}
    fqcn = "sglang_fleet.fleet"
    repo = sources()
    built = dict(repo, code=[build_collection.rewrite_doc_links(build_collection.rewrite_imports(
        text, "f.py", ours, fqcn), modules, fqcn) for text in repo["code"]])
    assert built["code"] != repo["code"]  # the build did rewrite them
    assert sglang_patch_set(built, UNSET) == sglang_patch_set(repo, UNSET)
    assert sglang_patch_set_earlier(built, UNSET) == sglang_patch_set_earlier(repo, UNSET)


# Which install a host has is the one of today's id, else one built for the same inputs under an earlier id.
INSTALLS = [{"id": "0.5.9-0ld0ld0ld0ld", "complete": True, "recorded": "0.5.9-0ld0ld0ld0ld"},
            {"id": "0.5.9-0ther0ther0", "complete": True, "recorded": "0.5.9-0ther0ther0"}]


def test_an_install_of_todays_id_is_the_install():
    installs = [{"id": "0.5.9-new000000000", "complete": False, "recorded": ""}] + INSTALLS
    assert sglang_install_pick(installs, "0.5.9-new000000000", "0.5.9-0ld0ld0ld0ld") == {
        "id": "0.5.9-new000000000", "adopt": False}


def test_the_install_an_earlier_release_built_for_the_same_inputs_is_kept_and_its_marker_records_todays_id():
    assert sglang_install_pick(INSTALLS, "0.5.9-new000000000", "0.5.9-0ld0ld0ld0ld") == {
        "id": "0.5.9-0ld0ld0ld0ld", "adopt": True}


def test_once_its_marker_records_todays_id_it_is_found_by_it_whatever_the_files_bytes_become():
    installs = [dict(INSTALLS[0], recorded="0.5.9-new000000000"), INSTALLS[1]]
    assert sglang_install_pick(installs, "0.5.9-new000000000", "0.5.9-0ld0ld0ld1ld") == {
        "id": "0.5.9-0ld0ld0ld0ld", "adopt": False}


def test_an_unfinished_install_of_the_earlier_id_or_none_of_it_is_built_anew():
    unfinished = [dict(INSTALLS[0], complete=False, recorded=""), INSTALLS[1]]
    assert sglang_install_pick(unfinished, "0.5.9-new000000000", "0.5.9-0ld0ld0ld0ld") == {
        "id": "0.5.9-new000000000", "adopt": False}
    assert sglang_install_pick(INSTALLS, "0.5.9-new000000000", "0.5.9-n0ne0n0ne0n0") == {
        "id": "0.5.9-new000000000", "adopt": False}


def test_the_earlier_representation_follows_the_files_bytes_so_an_earlier_id_is_only_that_of_the_same_files():
    comment = (MULTIMEM, lambda t: t + "\n# a note\n")
    assert install_id(comment, patch_set=sglang_patch_set_earlier) != install_id(patch_set=sglang_patch_set_earlier)
