"""Each role README's settings table is rendered from the role's own argument_specs and defaults
(tools/render_docs.py), so a README cannot name a setting the role lost, miss one it gained, or show a
default the role no longer has."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from render_docs import markdown, role_readmes, settings_stale, settings_table  # noqa: E402


def test_every_role_readme_shows_the_settings_its_role_declares():
    diff = settings_stale()
    assert not diff, "a settings table differs from its role: run tools/render_docs.py to regenerate\n" + diff


def test_every_role_has_a_readme_with_a_settings_table():
    assert [p.parent.name for p in role_readmes()] == sorted(p.parent.parent.name
                                                               for p in ROOT.glob("roles/*/meta/argument_specs.yml"))


def test_a_changed_default_fails_until_the_readme_is_regenerated():
    defaults = yaml.safe_load((ROOT / "roles/gpu_preflight/defaults/main.yml").read_text())
    diff = settings_stale({"gpu_preflight": dict(defaults, gpu_preflight_min_free_disk_gb=900)})
    assert "-| `gpu_preflight_min_free_disk_gb` | int | `700` |" in diff
    assert "+| `gpu_preflight_min_free_disk_gb` | int | `900` |" in diff


def test_a_setting_added_to_a_spec_is_a_row_of_its_table():
    table = settings_table("sglang_verify")
    spec = yaml.safe_load((ROOT / "roles/sglang_verify/meta/argument_specs.yml").read_text())
    names = list(spec["argument_specs"]["main"]["options"])
    assert [line.split("`")[1] for line in table.splitlines()[2:]] == names


def test_ansible_markup_reads_as_markdown_with_nested_parentheses():
    assert markdown("Set C(foo(bar)) or I(x), see L(the docs,https://example.org/a) and B(not) U(https://x.y)") == \
        "Set `foo(bar)` or *x*, see [the docs](https://example.org/a) and **not** https://x.y"
    assert markdown("ABC(x) stays") == "ABC(x) stays"
