#!/usr/bin/env python3
"""Regenerate the rendered examples in the role READMEs from the roles themselves.

    .venv/bin/python tools/render_docs.py           # rewrite every rendered block that differs
    .venv/bin/python tools/render_docs.py --check   # exit 1, showing the diff, when one differs

A rendered block in a README follows a marker line naming what renders it:

    <!-- rendered by tools/render_docs.py: sglang.service -->
    ```ini
    ...
    ```

The server's units are rendered from the role defaults alone (no preflight facts), by the playbook the
tests render them with (tests/playbooks/render_unit.yml), on the controller, touching no host.
tests/playbooks/test_render_docs.py fails while a README's block differs from its render.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER_README = ROOT / "roles/sglang_server/README.md"
MARKER = re.compile(r"^(<!-- rendered by tools/render_docs\.py: (?P<name>[\w.-]+) -->\n```\w*\n)(?P<body>.*?)(^```$)",
                    re.M | re.S)


def render_server_units(extravars: dict | None = None) -> dict[str, str]:
    """{unit file name: its text} as the sglang_server role renders them from its defaults."""
    with tempfile.TemporaryDirectory(prefix="render-docs-") as work:
        work = Path(work)
        inventory = work / "hosts.yml"
        inventory.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-node-01:\n"
                             "          ansible_connection: local\n"
                             "          ansible_python_interpreter: %s\n" % sys.executable)
        args = ["-e", "render_dir=%s" % work]
        for key, value in (extravars or {}).items():
            args += ["-e", "%s=%s" % (key, value)]
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"))
        playbook = Path(sys.executable).with_name("ansible-playbook")
        run = subprocess.run([str(playbook), "-i", str(inventory), str(ROOT / "tests/playbooks/render_unit.yml"),
                              *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError("rendering the server's units failed:\n%s%s" % (run.stdout, run.stderr))
        return {name: (work / ("gpu-node-01." + name)).read_text()
                for name in ("sglang.service", "sglang-gpu-init.service")}


def updated(text: str, rendered: dict[str, str]) -> str:
    """The README's text with every marked block replaced by its render; a marker naming no render fails."""
    def replace(match):
        name = match.group("name")
        if name not in rendered:
            raise KeyError("%s names %s, which tools/render_docs.py does not render" % (SERVER_README, name))
        body = rendered[name] if rendered[name].endswith("\n") else rendered[name] + "\n"
        return match.group(1) + body + match.group(4)
    return MARKER.sub(replace, text)


def stale(extravars: dict | None = None) -> str:
    """The unified diff from the README's rendered blocks to a render now ("" when they are the same)."""
    current = SERVER_README.read_text()
    wanted = updated(current, render_server_units(extravars))
    return "".join(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                        str(SERVER_README.relative_to(ROOT)), "rendered"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block differs")
    options = parser.parse_args(argv)
    current = SERVER_README.read_text()
    wanted = updated(current, render_server_units())
    if wanted == current:
        return 0
    if options.check:
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                                   str(SERVER_README.relative_to(ROOT)), "rendered"))
        print("\nrun tools/render_docs.py to regenerate", file=sys.stderr)
        return 1
    SERVER_README.write_text(wanted)
    print("rewrote %s" % SERVER_README.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
