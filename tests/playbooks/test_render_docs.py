"""The rendered examples in the role READMEs are the roles' own render (tools/render_docs.py).

A role change that alters a rendered unit fails here until the README is regenerated, so the README
cannot show a unit the role no longer writes (it showed the server unit without --enable-metrics long
after the defaults had it).
"""
from __future__ import annotations

from render_docs import SERVER_README, stale


def test_the_server_readme_shows_the_units_the_role_renders_from_its_defaults():
    diff = stale()
    assert not diff, "%s differs from the role's render: run tools/render_docs.py to regenerate\n%s" % (
        SERVER_README.name, diff)


def test_a_changed_setting_fails_until_the_readme_is_regenerated():
    diff = stale({"fleet_server_port": 31000})
    assert "-    --port 30000 \\\n+    --port 31000 \\\n" in diff
