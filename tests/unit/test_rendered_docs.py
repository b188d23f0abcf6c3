"""The docs' rendered parts are made by tools/render_docs.py from the code: each role README's settings
table from the role's argument_specs and defaults (a README cannot name a setting the role lost, miss one
it gained, or show a default the role no longer has), and the fleet report in docs/real-hosts.md by
tools/fleet.py's report() of a recorded lab run (the page cannot show columns the report lost)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from render_docs import (RECORDED_RUN, markdown, report_stale, role_readmes, sandboxes_stale, settings_stale,  # noqa: E402
                         settings_table)
import systemd_sandbox  # noqa: E402  (plugins/filter, on the tests' path)


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


def test_the_real_hosts_page_shows_the_report_tools_fleet_prints_for_the_recorded_run():
    diff = report_stale()
    assert not diff, "docs/real-hosts.md's fleet report differs: run tools/render_docs.py to regenerate\n" + diff


def test_a_report_that_prints_otherwise_fails_until_the_page_is_regenerated(tmp_path):
    recorded = json.loads(RECORDED_RUN.read_text())
    recorded["hosts"]["lab-gpu-2"]["changed"] = 3
    changed = tmp_path / "run.json"
    changed.write_text(json.dumps(recorded))
    diff = report_stale(changed)
    assert "+  lab-gpu-2     107  3        0" in diff and "+  3 host(s) ok, 0 failed; 3 change(s) in all" in diff


def test_the_security_page_shows_every_unit_s_sandbox_as_the_filter_makes_it():
    diff = sandboxes_stale()
    assert not diff, "docs/security.md's sandbox table differs: run tools/render_docs.py to regenerate\n" + diff


def test_a_unit_that_gives_up_a_line_fails_until_the_page_is_regenerated():
    units = dict(systemd_sandbox.UNITS, router={"headline": [], "set": {"ProtectClock": None},
                                               "why": {"ProtectClock": "a reason"}})
    diff = sandboxes_stale(units)
    assert "-| router | none | |" in diff and "+| router | no `ProtectClock=yes` | a reason |" in diff
