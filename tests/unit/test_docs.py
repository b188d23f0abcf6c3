"""The README is read in ten minutes and the docs cannot point at what is not there.

The README keeps to what it is, its two commands, a fleet's first steps, the stage table and links;
the rest lives in docs/, one page per concern. These tests hold both to that: a page that is not linked,
a link to a file or heading that does not exist, a README grown back into a notebook, or a plugin the
layout does not name fails here.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without its fenced blocks (a link-like string in a code sample is not a link)."""
    return FENCE.sub("", text)


def relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(prose(path.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto:


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else "%s-%d" % (base, count))
    return found


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, "README.md has %d lines: move detail to a page of docs/" % len(lines)
    long = [(number, len(line)) for number, line in enumerate(lines, 1) if len(line) > 400]
    assert not long, "README.md lines over 400 characters (line, length): %s" % long


def test_the_first_screen_holds_exactly_the_two_commands():
    """.ci/run and bin/test's header point at these two commands; nothing else is on the first screen."""
    first = "\n".join(README.read_text().splitlines()[:30]) + "\n"
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", first, re.M | re.S)
    assert len(blocks) == 1, "the first 30 lines hold %d code blocks, not one" % len(blocks)
    language, body = blocks[0]
    assert language == "sh"
    commands = [line.split("#", 1)[0].strip() for line in body.splitlines() if line.strip()]
    assert commands == ["bin/lab", "bin/test"]


def test_the_readme_links_every_docs_page():
    assert PAGES, "docs/ holds no page"
    linked = {(README.parent / target.split("#", 1)[0]).resolve() for target in relative_links(README)}
    missing = [page.name for page in PAGES if page.resolve() not in linked]
    assert not missing, "README.md does not link these pages of docs/: %s" % missing


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.exists():
            broken.append("%s (no such file)" % target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append("%s (no such heading in %s)" % (target, resolved.relative_to(ROOT)))
    assert not broken, "%s links to what is not there: %s" % (page.relative_to(ROOT), broken)


def test_the_runbook_covers_what_an_operator_does():
    headings = anchors(DOCS / "operations.md")
    for wanted in ("the-fleet-run-lock", "when-a-run-was-killed", "add-a-host", "rotate-the-api-key",
                   "upgrade-sglang-roll-back"):
        assert wanted in headings, "docs/operations.md has no section %s" % wanted


def _filters() -> dict[str, list[str]]:
    found = {}
    for path in sorted((ROOT / "plugins/filter").glob("*.py")):
        spec = importlib.util.spec_from_file_location("docs_filter_" + path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found[path.stem] = sorted(module.FilterModule().filters())
    return found


def test_the_layout_names_every_plugin_and_tool():
    layout = (DOCS / "development.md").read_text().split("## Layout", 1)[1]
    words = set(re.findall(r"[\w.]+", layout))
    names = [p.stem for p in (ROOT / "plugins/modules").glob("*.py")]
    names += [p.stem for p in (ROOT / "plugins/module_utils").glob("*.py")]
    for stem, filters in _filters().items():
        names += [stem, *filters]
    names += [p.name for p in (ROOT / "tools").iterdir() if p.is_file()]
    missing = sorted(name for name in set(names) if name not in words)
    assert not missing, "docs/development.md's layout does not name: %s" % missing
