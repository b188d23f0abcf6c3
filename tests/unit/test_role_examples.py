"""Each role README has one example: settings for the inventory and the tag that runs them.

The example's settings are the role's own: each is an option of its meta/argument_specs.yml (or of the
fleet layer's, which every role reads), and its value passes that option's spec (type, choices,
elements); the tag is one site.yml runs. A renamed or retyped setting fails here until the example
follows it."""
from __future__ import annotations

import re

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from conftest import ROOT

ROLES = sorted(path.parent.name for path in (ROOT / "roles").glob("*/README.md"))
EXAMPLE = re.compile(r"^## Example\n\nIn the inventory's `group_vars/(?P<group>[\w-]+)\.yml`:\n\n```yaml\n"
                     r"(?P<body>.*?)^```\n\nthen `ansible-playbook -i inventory site\.yml --tags (?P<tags>[\w,]+)`\.",
                     re.M | re.S)
SPEC_KEYS = ("type", "choices", "elements", "options", "no_log")


def options(role: str) -> dict:
    """Every entry point's options of the role, by name."""
    found = {}
    for entry in yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"].values():
        found.update(entry.get("options") or {})
    return found


def site_tags() -> set[str]:
    tags = set()
    for playbook in (ROOT / "playbooks").glob("*.yml"):
        for play in yaml.safe_load(playbook.read_text()) or ():
            tags.update(play.get("tags", ()) if isinstance(play, dict) else ())
    return tags - {"always", "never"}


def example(role: str) -> re.Match:
    found = EXAMPLE.findall((ROOT / "roles" / role / "README.md").read_text())
    assert len(found) == 1, "%s's README has %d examples in the expected form, not one" % (role, len(found))
    return EXAMPLE.search((ROOT / "roles" / role / "README.md").read_text())


def problems(role: str, settings: dict) -> list[str]:
    known = {**options("fleet"), **options(role)}
    unknown = sorted(set(settings) - set(known))
    if unknown:
        return ["not a setting of %s or the fleet layer: %s" % (role, ", ".join(unknown))]
    spec = {name: {key: value for key, value in known[name].items() if key in SPEC_KEYS} for name in settings}
    result = ArgumentSpecValidator(spec).validate(dict(settings))
    return [str(error) for error in result.errors]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_readme_has_one_example_whose_settings_its_specs_accept(role):
    match = example(role)
    settings = yaml.safe_load(match["body"])
    assert isinstance(settings, dict) and settings, match["body"]
    assert not problems(role, settings), problems(role, settings)
    assert set(match["tags"].split(",")) <= site_tags(), match["tags"]


def test_a_misspelled_or_mistyped_setting_is_caught():
    assert problems("gpu_preflight", {"gpu_preflight_min_free_disk": 900})
    assert problems("gpu_preflight", {"gpu_preflight_min_free_disk_gb": "lots"})
    assert problems("sglang_server", {"sglang_server_allreduce_fusion": "sometimes"})
    assert not problems("sglang_server", {"sglang_server_allreduce_fusion": "on", "fleet_server_port": 30000})
