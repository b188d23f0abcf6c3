"""Every role checks its input before any change: an argument spec that names each of its defaults."""
import pytest
import yaml

from conftest import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks/main.yml").exists())


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_in_the_role_s_argument_spec(role):
    spec = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text()) or {}
    assert sorted(set(defaults) - set(options)) == []
    assert all(name.startswith(role + "_") for name in options), role
