"""The rendered examples in the role READMEs are the roles' own render (tools/render_docs.py).

A role change that alters a rendered unit fails here until the README is regenerated, so the README
cannot show a unit the role no longer writes (it showed the server unit without --enable-metrics long
after the defaults had it, and the router's unit was written by hand).
"""
from __future__ import annotations

from leak_scan import leaks
from render_docs import EXAMPLE_KEY, ROUTER_README, ROUTER_UNITS, SERVER_README, stale


def test_the_server_and_router_readmes_show_the_units_their_roles_render_from_their_defaults():
    diff = stale()
    assert not diff, "a README differs from its role's render: run tools/render_docs.py to regenerate\n%s" % diff
    for unit in ROUTER_UNITS:
        assert "<!-- rendered by tools/render_docs.py: %s -->" % unit in ROUTER_README.read_text()


def test_a_changed_setting_fails_until_the_readme_is_regenerated():
    diff = stale({"fleet_server_port": 31000})
    # the server's own port, and every worker URL the router fronts
    assert "-    --port 30000 \\\n+    --port 31000 \\\n" in diff
    assert ("-    --worker-urls http://10.0.0.11:30000 http://10.0.0.12:30000\n"
            "+    --worker-urls http://10.0.0.11:31000 http://10.0.0.12:31000\n") in diff
    assert stale({"sglang_router_healer_period": 45}).count("+OnUnitActiveSec=45s") == 1


def test_the_example_key_is_in_no_readme_in_any_encoding():
    for readme in (SERVER_README, ROUTER_README):
        assert not leaks(readme.read_text(), EXAMPLE_KEY), readme
