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


ENTRY_POINTS = [(role, name) for role in ROLES
                for name in yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
                if name != "main"]


@pytest.mark.parametrize("role,entry_point", ENTRY_POINTS)
def test_an_entry_point_checks_its_options_as_the_role_does(role, entry_point):
    """A smaller entry point (tasks_from) reads the role's own variables: each option it names is the main
    entry point's, with the same type, choices and default, so the two can never disagree on a value."""
    specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
    assert (ROOT / "roles" / role / "tasks" / (entry_point + ".yml")).is_file()
    main, options = specs["main"]["options"], specs[entry_point]["options"]
    assert {name: spec for name, spec in options.items() if main.get(name) != spec} == {}

