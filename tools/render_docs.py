#!/usr/bin/env python3
"""Regenerate the rendered examples and settings tables in the role READMEs from the roles themselves.

    .venv/bin/python tools/render_docs.py           # rewrite every rendered block that differs
    .venv/bin/python tools/render_docs.py --check   # exit 1, showing the diff, when one differs

Every role README's settings table lies between two marker lines, and is made from the role's
meta/argument_specs.yml (its main entry point: each option's type and description, in the spec's
order) and defaults/main.yml (each default as the role sets it, a template as written):

    <!-- settings: rendered by tools/render_docs.py from meta/argument_specs.yml and defaults/main.yml -->
    | setting | type | default | what it does |
    ...
    <!-- end of settings -->

tests/unit/test_rendered_docs.py fails while a table differs from its render.

A rendered block in a README follows a marker line naming what renders it:

    <!-- rendered by tools/render_docs.py: sglang.service -->
    ```ini
    ...
    ```

The server's units are rendered from the role defaults alone (no preflight facts), by the playbook the
tests render them with (tests/playbooks/render_unit.yml), on the controller, touching no host; the
router's unit and its healer's from the router role's defaults in front of an example fleet of two
servers (tests/playbooks/render_router_units.yml).
tests/playbooks/test_render_docs.py fails while a README's block differs from its render.

docs/security.md's table of the units' sandboxes is made from plugins/filter/systemd_sandbox.py (the
base every unit starts from, and what each unit changes of it, with why), between two marker lines;
tests/unit/test_rendered_docs.py fails while it differs.

docs/real-hosts.md's fleet report is tools/fleet.py's report() of a recorded lab run
(tests/fixtures/lab/fleet-report-noop.json: a no-change `bin/lab`, its facts that the report reads);
tests/unit/test_rendered_docs.py fails while it differs.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

import fleet  # tools/fleet.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
SERVER_README = ROOT / "roles/sglang_server/README.md"
REAL_HOSTS = ROOT / "docs/real-hosts.md"
RECORDED_RUN = ROOT / "tests/fixtures/lab/fleet-report-noop.json"
MARKER = re.compile(r"^(<!-- rendered by tools/render_docs\.py: (?P<name>[\w.-]+) -->\n```\w*\n)(?P<body>.*?)(^```$)",
                    re.M | re.S)


def _render(work: Path, playbook: str, limit: str, extravars: dict | None) -> None:
    """Runs one of tests/playbooks' render playbooks on the controller over work/hosts.yml, into work."""
    args = ["-l", limit, "-e", "render_dir=%s" % work]
    for key, value in (extravars or {}).items():
        args += ["-e", "%s=%s" % (key, value)]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"))
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    run = subprocess.run([str(ansible_playbook), "-i", str(work / "hosts.yml"), str(ROOT / "tests/playbooks" / playbook),
                          *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError("%s failed:\n%s%s" % (playbook, run.stdout, run.stderr))


def render_server_units(extravars: dict | None = None) -> dict[str, str]:
    """{unit file name: its text} as the sglang_server role renders them from its defaults."""
    with tempfile.TemporaryDirectory(prefix="render-docs-") as work:
        work = Path(work)
        (work / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-node-01:\n"
                                        "          ansible_connection: local\n"
                                        "          ansible_python_interpreter: %s\n" % sys.executable)
        _render(work, "render_unit.yml", "gpu_nodes", extravars)
        return {name: (work / ("gpu-node-01." + name)).read_text()
                for name in ("sglang.service", "sglang-gpu-init.service")}


ROUTER_README = ROOT / "roles/sglang_router/README.md"
ROUTER_UNITS = ("sglang-router.service", "sglang-router-healer.service", "sglang-router-healer.timer")
# The router's example fleet: two GPU hosts whose servers listen on their own address, as servers behind a
# router on another host must (the servers' default, 127.0.0.1, serves their own host only).
ROUTER_EXAMPLE_WORKERS = {"gpu-node-01": "10.0.0.11", "gpu-node-02": "10.0.0.12"}
# Their key, which the unit names only by its file.
EXAMPLE_KEY = "example-key-from-your-vault"


def render_router_units(extravars: dict | None = None) -> dict[str, str]:
    """{unit file name: its text} as the sglang_router role renders them from its defaults, in front of the
    example fleet's two servers."""
    with tempfile.TemporaryDirectory(prefix="render-docs-") as work:
        work = Path(work)
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
            "gpu_nodes": {"hosts": {name: dict(local, fleet_server_host=address, sglang_server_api_key=EXAMPLE_KEY)
                                    for name, address in ROUTER_EXAMPLE_WORKERS.items()}},
            "sglang_routers": {"hosts": {"router-01": local}}}}}))
        (work / "etc/systemd/system").mkdir(parents=True)
        _render(work, "render_router_units.yml", "sglang_routers", extravars)
        return {name: (work / "etc/systemd/system" / name).read_text() for name in ROUTER_UNITS}


def render_fleet_report(recorded: Path = RECORDED_RUN) -> dict[str, str]:
    """{"fleet-report": the report tools/fleet.py prints for the recorded run}."""
    data = json.loads(recorded.read_text())
    run = fleet.PlaybookRun(data["playbook"], [], data["status"], data["rc"],
                            {host: fleet.HostResult(**result) for host, result in data["hosts"].items()})
    return {"fleet-report": fleet.report(run).lstrip("\n")}


def updated(text: str, rendered: dict[str, str], path: Path = SERVER_README) -> str:
    """The document's text with every marked block replaced by its render; a marker naming no render fails."""
    def replace(match):
        name = match.group("name")
        if name not in rendered:
            raise KeyError("%s names %s, which tools/render_docs.py does not render" % (path, name))
        body = rendered[name] if rendered[name].endswith("\n") else rendered[name] + "\n"
        return match.group(1) + body + match.group(4)
    return MARKER.sub(replace, text)


def diff(path: Path, wanted: str) -> str:
    """The unified diff from the document as it is on disk to its wanted text ("" when they are the same)."""
    return "".join(difflib.unified_diff(path.read_text().splitlines(True), wanted.splitlines(True),
                                        str(path.relative_to(ROOT)), "rendered"))


def rendered_readmes(extravars: dict | None = None) -> dict[Path, dict[str, str]]:
    """{role README: the renders its marked blocks show}: the server's units and the router's."""
    return {SERVER_README: render_server_units(extravars), ROUTER_README: render_router_units(extravars)}


def stale(extravars: dict | None = None) -> str:
    """The unified diff from the READMEs' rendered blocks to a render now ("" when they are the same)."""
    return "".join(diff(readme, updated(readme.read_text(), rendered, readme))
                   for readme, rendered in rendered_readmes(extravars).items())


SETTINGS_MARKER = re.compile(r"^(<!-- settings: rendered by tools/render_docs\.py from meta/argument_specs\.yml and "
                             r"defaults/main\.yml -->\n)(?P<body>.*?)(^<!-- end of settings -->$)", re.M | re.S)
# A default longer than this is not inlined: the table points at the defaults file instead.
LONGEST_INLINE_DEFAULT = 70
# Ansible's documentation markup in the specs' descriptions, as Markdown.
MARKUP = {"C": "`%s`", "V": "`%s`", "O": "`%s`", "M": "`%s`", "I": "*%s*", "B": "**%s**", "U": "%s"}


def markdown(text: str) -> str:
    """Ansible's C(), I(), B(), U(), L(text,url)... in a spec description as Markdown; parentheses nest."""
    out, i = [], 0
    while i < len(text):
        letter = text[i]
        if (letter in MARKUP or letter == "L") and text.startswith("(", i + 1) and (i == 0 or not text[i - 1].isalnum()):
            depth, j = 0, i + 1
            while j < len(text):
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            if j < len(text):
                inner = text[i + 2:j]
                if letter == "L":
                    label, _, url = inner.rpartition(",")
                    out.append("[%s](%s)" % (label.strip(), url.strip()))
                else:
                    out.append(MARKUP[letter] % inner)
                i = j + 1
                continue
        out.append(letter)
        i += 1
    return "".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_cell(value) -> str:
    if isinstance(value, str):
        shown = '""' if value == "" else value
    else:
        shown = yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip()
        shown = shown[:-4].rstrip() if shown.endswith("\n...") else shown
    if len(shown) > LONGEST_INLINE_DEFAULT:
        return "see `defaults/main.yml`"
    return "`%s`" % shown.replace("`", "'")


def settings_table(role: str, defaults: dict | None = None) -> str:
    """The role's settings as a Markdown table: its main entry point's options, in the spec's order."""
    role_dir = ROOT / "roles" / role
    spec = yaml.safe_load((role_dir / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]
    defaults_file = role_dir / "defaults/main.yml"
    if defaults is None:
        defaults = (yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else None) or {}
    rows = ["| setting | type | default | what it does |", "|---|---|---|---|"]
    for name, option in spec.get("options", {}).items():
        kind = option.get("type", "str") + (" of %s" % option["elements"] if option.get("elements") else "")
        if option.get("choices"):
            kind += ": " + ", ".join("`%s`" % c for c in option["choices"])
        if name in defaults:
            default = _default_cell(defaults[name])
        else:
            default = "required" if option.get("required") else "none"
        description = option.get("description", "")
        description = " ".join(description) if isinstance(description, list) else description
        rows.append("| `%s` | %s | %s | %s |" % (name, _cell(kind), _cell(default), _cell(markdown(" ".join(description.split())))))
    return "\n".join(rows) + "\n"


def role_readmes() -> list[Path]:
    return sorted(ROOT.glob("roles/*/README.md"))


def updated_settings(readme: Path, defaults: dict | None = None) -> str:
    """The README's text with its settings table rendered anew; a README without the markers fails."""
    text = readme.read_text()
    if len(SETTINGS_MARKER.findall(text)) != 1:
        raise KeyError("%s has no settings markers (or more than one pair): see tools/render_docs.py" % readme)
    table = settings_table(readme.parent.name, defaults)
    return SETTINGS_MARKER.sub(lambda m: m.group(1) + table + m.group(3), text)


def report_stale(recorded: Path = RECORDED_RUN) -> str:
    """The unified diff from docs/real-hosts.md's fleet report to the recorded run's ("" when the same)."""
    return diff(REAL_HOSTS, updated(REAL_HOSTS.read_text(), render_fleet_report(recorded), REAL_HOSTS))


def settings_stale(role_defaults: dict[str, dict] | None = None) -> str:
    """The unified diff from every role README's settings table to a render now ("" when all match).
    role_defaults: {role: its defaults as a test would change them}, for the roles not read from disk."""
    return "".join(diff(readme, updated_settings(readme, (role_defaults or {}).get(readme.parent.name)))
                   for readme in role_readmes())


SECURITY = ROOT / "docs/security.md"
SANDBOX_MARKER = re.compile(r"^(<!-- sandboxes: rendered by tools/render_docs\.py from plugins/filter/systemd_sandbox\.py -->\n)"
                            r"(?P<body>.*?)(^<!-- end of sandboxes -->$)", re.M | re.S)


def sandbox_table(units: dict | None = None) -> str:
    """The base sandbox, then a row per unit: what it changes of the base, and why."""
    sys.path.insert(0, str(ROOT / "plugins/filter"))
    import systemd_sandbox  # noqa: E402  (plugins/filter is no package)
    units = systemd_sandbox.UNITS if units is None else units
    base = " ".join("`%s=%s`" % (key.rstrip("~"), value) for key, value in systemd_sandbox.BASE)
    rows = ["The base, in every unit's order (with `PrivateDevices=yes`, or `DevicePolicy=closed` and a "
            "`DeviceAllow=` per device for a unit given devices; its writable paths as `ReadWritePaths=`): "
            + base + "\n", "| unit | changes to the base | why |", "|---|---|---|"]
    for name, profile in units.items():
        changes = [("`%s=%s`" % (key.rstrip("~"), value) if value is not None else "no `%s=%s`" % (
            key.rstrip("~"), dict(systemd_sandbox.BASE)[key]), key) for key, value in profile.get("set", {}).items()]
        changes += [("adds `%s=%s`" % (directive, value), directive) for _, directive, value in profile.get("add", ())]
        if not changes:
            rows.append("| %s | none | |" % name)
        for number, (change, key) in enumerate(changes):
            rows.append("| %s | %s | %s |" % (name if number == 0 else "", change, _cell(profile["why"][key])))
    return "\n".join(rows) + "\n"


def updated_sandboxes(text: str, units: dict | None = None) -> str:
    if len(SANDBOX_MARKER.findall(text)) != 1:
        raise KeyError("%s has no sandbox markers (or more than one pair): see tools/render_docs.py" % SECURITY)
    return SANDBOX_MARKER.sub(lambda m: m.group(1) + sandbox_table(units) + m.group(3), text)


def sandboxes_stale(units: dict | None = None) -> str:
    """The unified diff from docs/security.md's sandbox table to a render now ("" when the same)."""
    return diff(SECURITY, updated_sandboxes(SECURITY.read_text(), units))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block differs")
    options = parser.parse_args(argv)
    wanted = {readme: updated_settings(readme) for readme in role_readmes()}
    for readme, rendered in rendered_readmes().items():
        wanted[readme] = updated(wanted[readme], rendered, readme)
    wanted[REAL_HOSTS] = updated(REAL_HOSTS.read_text(), render_fleet_report(), REAL_HOSTS)
    wanted[SECURITY] = updated_sandboxes(SECURITY.read_text())
    differ = {readme: text for readme, text in wanted.items() if text != readme.read_text()}
    for readme, text in differ.items():
        if options.check:
            sys.stdout.write(diff(readme, text))
        else:
            readme.write_text(text)
            print("rewrote %s" % readme.relative_to(ROOT))
    if differ and options.check:
        print("\nrun tools/render_docs.py to regenerate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
