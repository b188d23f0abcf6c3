"""tools/build_collection.py: the collection it lays out from the repository, and what it refuses."""
import re
import shutil

import pytest
import yaml
from packaging.specifiers import SpecifierSet

import build_collection
from build_collection import BuildError, rewrite_filters, rewrite_imports
from conftest import ROOT

FQCN = "sglang_fleet.fleet"


def test_imports_of_our_module_utils_become_the_collections_and_core_ones_stay():
    text = ("from ansible.module_utils.basic import AnsibleModule\n"
            "from ansible.module_utils.urls import open_url\n"
            "from ansible.module_utils.nvcc import parse_nvcc\n"
            "    from ansible.module_utils.async_job import (wait_for_job,\n")
    got = rewrite_imports(text, "m.py", {"nvcc", "async_job"}, FQCN)
    assert got.splitlines() == [
        "from ansible.module_utils.basic import AnsibleModule",
        "from ansible.module_utils.urls import open_url",
        "from ansible_collections.sglang_fleet.fleet.plugins.module_utils.nvcc import parse_nvcc",
        "    from ansible_collections.sglang_fleet.fleet.plugins.module_utils.async_job import (wait_for_job,"]


def test_an_import_of_a_module_utils_that_exists_nowhere_stops_the_build():
    with pytest.raises(BuildError, match=r"m.py: imports ansible.module_utils.nvc, which is neither ours"):
        rewrite_imports("from ansible.module_utils.nvc import parse_nvcc\n", "m.py", {"nvcc"}, FQCN)


def test_a_bare_import_of_ours_stops_the_build_instead_of_breaking_in_the_collection():
    with pytest.raises(BuildError, match=r"`import ansible.module_utils.nvcc`"):
        rewrite_imports("import ansible.module_utils.nvcc\n", "m.py", {"nvcc"}, FQCN)


def test_our_filters_get_their_full_name_and_variables_of_the_same_name_do_not():
    names = {"http_url": "http_url.py", "flash_attn_max_jobs": "flash_attn_build.py"}
    text = ("a: \"{{ host | http_url(port) }}\"\n"
            "b: \"{{ flash_attn_max_jobs | int }}\"\n"
            "c: \"{{ x |flash_attn_max_jobs(y) }}\"\n"
            "d: \"{{ x | sglang_fleet.fleet.http_url }}\"\n")
    assert rewrite_filters(text, names, FQCN).splitlines() == [
        "a: \"{{ host | sglang_fleet.fleet.http_url(port) }}\"",
        "b: \"{{ flash_attn_max_jobs | int }}\"",
        "c: \"{{ x |sglang_fleet.fleet.flash_attn_max_jobs(y) }}\"",
        "d: \"{{ x | sglang_fleet.fleet.http_url }}\""]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return build_collection.build(tmp_path_factory.mktemp("collection"))


def test_the_tree_holds_every_role_module_module_utils_filter_and_stage_of_the_repository(tree):
    assert tree.parts[-3:] == ("ansible_collections", "sglang_fleet", "fleet")
    for folder in ("roles", "plugins/modules", "plugins/module_utils", "plugins/filter", "playbooks"):
        mine = sorted(p.relative_to(ROOT / folder) for p in (ROOT / folder).rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)
        theirs = sorted(p.relative_to(tree / folder) for p in (tree / folder).rglob("*") if p.is_file())
        extra = ["site.yml"] if folder == "playbooks" else []
        assert sorted(map(str, theirs)) == sorted([*map(str, mine), *extra]), folder
    assert yaml.safe_load((tree / "galaxy.yml").read_text())["namespace"] == "sglang_fleet"
    requires = SpecifierSet(yaml.safe_load((tree / "meta/runtime.yml").read_text())["requires_ansible"])
    pinned = re.search(r"^ansible-core==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert pinned in requires and "2.18.9" not in requires and "2.20.0" not in requires


def test_no_module_imports_our_module_utils_the_repository_way(tree):
    ours = {p.stem for p in (ROOT / "plugins/module_utils").glob("*.py")}
    for path in (tree / "plugins").rglob("*.py"):
        for name in re.findall(r"from ansible\.module_utils\.(\w+) import", path.read_text()):
            assert name not in ours, path
    probe = (tree / "plugins/modules/sglang_patch_probe.py").read_text()
    assert "from ansible_collections.sglang_fleet.fleet.plugins.module_utils.dist_info import dist_version" in probe


def test_no_role_names_our_filters_short(tree):
    names = build_collection.filter_names(ROOT / "plugins/filter")
    short = re.compile(r"\|\s*(%s)\b" % "|".join(names))
    for path in [*(tree / "roles").rglob("*"), *(tree / "playbooks").rglob("*")]:
        if path.is_file() and path.suffix in (".yml", ".j2"):
            assert not short.findall(path.read_text()), path
    assert "| sglang_fleet.fleet.gpu_profile_mismatches(" in (tree / "roles/gpu_preflight/tasks/main.yml").read_text()


def test_the_site_playbook_imports_every_stage_by_its_full_name(tree):
    repo = yaml.safe_load((ROOT / "site.yml").read_text())
    built = yaml.safe_load((tree / "playbooks/site.yml").read_text())
    assert [p["name"] for p in built] == [p["name"] for p in repo]
    stages = [p["ansible.builtin.import_playbook"] for p in built]
    assert stages == ["sglang_fleet.fleet." + p["ansible.builtin.import_playbook"][len("playbooks/"):-len(".yml")]
                      for p in repo]
    assert all((tree / "playbooks" / (s.rsplit(".", 1)[1] + ".yml")).is_file() for s in stages)


def fake_repo(tmp_path, monkeypatch):
    """A copy of the repository's buildable parts, for a build to be made to fail."""
    root = tmp_path / "repo"
    for src in [*build_collection.LAYOUT, "site.yml", "collection"]:
        dest = root / src
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / src).is_dir() else shutil.copy2)(ROOT / src, dest)
    monkeypatch.setattr(build_collection, "ROOT", root)
    monkeypatch.setattr(build_collection, "SOURCE", root / "collection")
    return root


def test_a_plugin_type_the_build_does_not_place_stops_it(tmp_path, monkeypatch):
    root = fake_repo(tmp_path, monkeypatch)
    (root / "plugins/lookup").mkdir()
    (root / "plugins/lookup/thing.py").write_text("")
    with pytest.raises(BuildError, match="plugins/lookup: a plugin type the collection build does not place"):
        build_collection.build(tmp_path / "out")


def test_a_path_a_role_reaches_that_the_collection_lacks_stops_it(tmp_path, monkeypatch):
    root = fake_repo(tmp_path, monkeypatch)
    with open(root / "roles/sglang_router/vars/main.yml", "a") as out:
        out.write("__sglang_router_elsewhere: \"{{ role_path }}/../../files/lab/labctl.py\"\n")
    with pytest.raises(BuildError, match=r"roles/sglang_router/vars/main.yml: reaches .*/files/lab/labctl.py'?, which "
                                         r"the collection does not hold"):
        build_collection.build(tmp_path / "out")


def test_a_site_entry_that_is_not_a_stage_import_stops_it(tmp_path, monkeypatch):
    root = fake_repo(tmp_path, monkeypatch)
    with open(root / "site.yml", "a") as out:
        out.write("\n- name: Extra\n  hosts: all\n  tasks: []\n")
    with pytest.raises(BuildError, match="site.yml: 'Extra' is not a stage import"):
        build_collection.build(tmp_path / "out")


def test_a_filter_named_in_a_string_stops_it(tmp_path, monkeypatch):
    root = fake_repo(tmp_path, monkeypatch)
    with open(root / "roles/sglang_router/vars/main.yml", "a") as out:
        out.write("__sglang_router_urls: \"{{ hosts | map('http_url', 30000) | list }}\"\n")
    with pytest.raises(BuildError, match=r"uses filter\(s\) \['http_url'\] by name in a string"):
        build_collection.build(tmp_path / "out")


def test_the_command_line_says_why_it_failed(tmp_path, monkeypatch, capsys):
    root = fake_repo(tmp_path, monkeypatch)
    (root / "plugins/lookup").mkdir()
    assert build_collection.main(["--out", str(tmp_path / "out")]) == 1
    assert "build_collection: plugins/lookup: a plugin type" in capsys.readouterr().err


def test_documentation_links_to_our_modules_get_their_full_name(tree):
    watch = (tree / "plugins/modules/sglang_model_watch.py").read_text()
    assert "M(sglang_fleet.fleet.sglang_model_sync)" in watch and "M(sglang_model_sync)" not in watch
    assert build_collection.rewrite_doc_links("M(file) and M(sglang_venvs)", {"sglang_venvs"}, FQCN) == \
        "M(file) and M(sglang_fleet.fleet.sglang_venvs)"
