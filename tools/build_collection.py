#!/usr/bin/env python3
"""Build the sglang_fleet.fleet collection from the repository as it is.

    tools/build_collection.py [--out DIR] [--tarball]

The repository keeps one copy of every file (roles/, plugins/, playbooks/, site.yml); this lays out
DIR/ansible_collections/<namespace>/<name>/ from them (collection/galaxy.yml names both) and, with
--tarball, runs `ansible-galaxy collection build` on it, printing the tarball's path.

What a collection needs that the repository layout does not give, the build does, and checks:
- modules import our module_utils as ansible.module_utils.<x> (ansible.cfg's module_utils path); in
  a collection that is ansible_collections.<ns>.<name>.plugins.module_utils.<x>;
- a role's filters: ansible.cfg's filter_plugins makes them known by their short name, a
  collection's filters only by their full one, so `| http_url` becomes `| <ns>.<name>.http_url`
  (modules need nothing: a role in a collection finds its collection's modules by short name);
- a module's documentation links ours as M(<module>); a collection's as M(<ns>.<name>.<module>);
- site.yml imports playbooks/<stage>.yml; the collection's playbooks/site.yml imports
  <ns>.<name>.<stage>, so both `<ns>.<name>.site` and `<ns>.<name>.<stage>` run.
Anything it cannot place (a plugin type, an import of a module_utils that exists nowhere, a path a
role reaches outside itself that the collection does not hold, a site.yml entry that is not a stage
import) stops the build with the reason: a collection that builds is one that runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "collection"  # galaxy.yml, meta/runtime.yml, tests/sanity: the collection's own files

# Repository path -> collection path; a folder is copied whole (less caches).
LAYOUT = {
    "roles": "roles",
    "plugins/modules": "plugins/modules",
    "plugins/module_utils": "plugins/module_utils",
    "plugins/filter": "plugins/filter",
    "playbooks": "playbooks",
    # fleet_monitoring renders from these (the fleet layer's fleet_shipped_monitoring_dir)
    "files/monitoring": "files/monitoring",
    # sglang_model_manifest_dir's default folder (the fleet layer's fleet_model_manifests_dir)
    "files/models": "files/models",
    # the verify stage renders the bench report with it (playbook_dir/../tools/bench_report.py)
    "tools/bench_report.py": "tools/bench_report.py",
    "tools/bench_report.schema.json": "tools/bench_report.schema.json",
    "README.md": "README.md",
}
PLUGIN_TYPES = {"modules", "module_utils", "filter"}  # plugins/<type>: what LAYOUT places
# Controller-side outputs the role defaults put beside the code (operators set them to a site path when
# the collection is installed read-only): not content, so not in the collection, and no reason to fail.
CONTROLLER_OUTPUTS = ("files/wheels", "reports")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")
IMPORT = re.compile(r"^(\s*from\s+)ansible\.module_utils\.(\w+)(\s+import\b)", re.M)
BARE_IMPORT = re.compile(r"^\s*import\s+ansible\.module_utils\.(\w+)", re.M)
# role_path ~ '/../../files/monitoring', "{{ role_path }}/../sglang_patches/...", "{{ playbook_dir }}/../tools/x"
OUTSIDE = re.compile(r"(role_path|playbook_dir)\s*(?:\}\}\s*|~\s*['\"])((?:/\.\.)+)/([\w./-]+)")


class BuildError(Exception):
    """Something the collection cannot hold as the repository has it."""


def galaxy() -> dict:
    meta = yaml.safe_load((SOURCE / "galaxy.yml").read_text())
    return {"namespace": meta["namespace"], "name": meta["name"], "version": meta["version"]}


def filter_names(filter_dir: Path) -> dict[str, str]:
    """Every filter our filter plugins define -> the file that defines it."""
    names: dict[str, str] = {}
    sys.path.insert(0, str(filter_dir))  # filters that load a sibling, as ansible-core allows
    try:
        for path in sorted(filter_dir.glob("*.py")):
            spec = importlib.util.spec_from_file_location("_collection_filter_" + path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if not hasattr(module, "FilterModule"):
                raise BuildError(f"{path.relative_to(ROOT)}: a filter plugin without a FilterModule")
            for name in module.FilterModule().filters():
                if name in names:
                    raise BuildError(f"filter {name} is defined twice: {names[name]} and {path.name}")
                names[name] = path.name
    finally:
        sys.path.remove(str(filter_dir))
    return names


def core_module_utils(name: str) -> bool:
    """ansible.module_utils.<name> is one of ansible-core's own (basic, urls, common...)."""
    import ansible.module_utils
    return any((Path(p) / name).is_dir() or (Path(p) / f"{name}.py").is_file() for p in ansible.module_utils.__path__
               if Path(p).resolve() != (ROOT / "plugins/module_utils").resolve())


def rewrite_imports(text: str, where: str, ours: set[str], fqcn: str) -> str:
    """Imports of our module_utils as the collection's; ansible-core's stay as they are."""
    for match in BARE_IMPORT.finditer(text):
        if match.group(1) in ours:
            raise BuildError(f"{where}: `import ansible.module_utils.{match.group(1)}`: use `from ... import`, "
                             "which the build rewrites for the collection")

    def one(match):
        name = match.group(2)
        if name in ours:
            return f"{match.group(1)}ansible_collections.{fqcn}.plugins.module_utils.{name}{match.group(3)}"
        if core_module_utils(name):
            return match.group(0)
        raise BuildError(f"{where}: imports ansible.module_utils.{name}, which is neither ours "
                         "(plugins/module_utils) nor ansible-core's")
    return IMPORT.sub(one, text)


def rewrite_doc_links(text: str, modules: set[str], fqcn: str) -> str:
    """M(name) of our modules in documentation -> M(<ns>.<name>.name): a collection's docs link by full name."""
    return re.sub(r"\bM\((%s)\)" % "|".join(map(re.escape, sorted(modules))), lambda m: f"M({fqcn}.{m.group(1)})", text)


def rewrite_filters(text: str, names: dict[str, str], fqcn: str) -> str:
    """`| name` and `|name(` of our filters -> `| <ns>.<name>.name` (a collection's filters need their full name)."""
    pattern = re.compile(r"(\|\s*)(%s)\b(?!\s*\.)" % "|".join(map(re.escape, sorted(names, key=len, reverse=True))))
    return pattern.sub(lambda m: f"{m.group(1)}{fqcn}.{m.group(2)}", text)


def short_filter_uses(text: str, names: dict[str, str]) -> list[str]:
    """Our filters still named short after the rewrite: in map('x'), select('x')... a string, not a `|`."""
    quoted = re.compile(r"\b(?:map|select|reject)\(\s*['\"](%s)['\"]" % "|".join(map(re.escape, names)))
    return quoted.findall(text)


def site_playbook(fqcn: str) -> str:
    """site.yml with each `playbooks/<stage>.yml` import as `<fqcn>.<stage>`."""
    plays = yaml.safe_load((ROOT / "site.yml").read_text())
    text = (ROOT / "site.yml").read_text()
    for play in plays:
        target = play.get("ansible.builtin.import_playbook")
        if set(play) - {"name", "ansible.builtin.import_playbook"} or not target:
            raise BuildError(f"site.yml: {play.get('name', play)!r} is not a stage import "
                             "(name + ansible.builtin.import_playbook): the collection's site cannot follow it")
        match = re.fullmatch(r"playbooks/(\w+)\.yml", target)
        if not match or not (ROOT / target).is_file():
            raise BuildError(f"site.yml imports {target}, not a playbooks/<stage>.yml that exists")
        text = re.sub(r"(import_playbook:\s*)%s" % re.escape(target) + "[ \\t]*$",
                      lambda m: f"{m.group(1)}{fqcn}.{match.group(1)}", text, count=1, flags=re.M)
    header = (f"# Built by tools/build_collection.py from the repository's site.yml: each stage as {fqcn}.<stage>.\n")
    return text.replace("---\n", "---\n" + header, 1)


def check_reaches(tree: Path, fqcn: str) -> None:
    """Every path a role or playbook reaches outside itself (role_path/../.., playbook_dir/..) is in the tree."""
    for path in sorted(tree.rglob("*")):
        if not path.is_file() or path.suffix not in (".yml", ".yaml", ".j2"):
            continue
        text = path.read_text()
        for match in OUTSIDE.finditer(text):
            base = path.parent
            # role_path is roles/<role>; playbook_dir is where the playbook is
            if match.group(1) == "role_path":
                rel = path.relative_to(tree)
                if rel.parts[0] != "roles":
                    raise BuildError(f"{rel}: role_path outside a role")
                base = tree / "roles" / rel.parts[1]
            up = match.group(2).count("/..")
            target = (base.joinpath(*[".."] * up) / match.group(3).rstrip("/")).resolve()
            inside = target.relative_to(tree.resolve()) if target.is_relative_to(tree.resolve()) else None
            if inside is None:
                raise BuildError(f"{path.relative_to(tree)}: reaches {match.group(0)!r}, outside the collection")
            if str(inside).startswith(CONTROLLER_OUTPUTS):
                continue
            if not (tree / inside).exists():
                raise BuildError(f"{path.relative_to(tree)}: reaches {match.group(0)!r}, "
                                 "which the collection does not hold: add it to LAYOUT in tools/build_collection.py")


def build(out: Path) -> Path:
    """Lay the collection out under out/ansible_collections/<ns>/<name>; return that folder."""
    meta = galaxy()
    fqcn = f"{meta['namespace']}.{meta['name']}"
    tree = out / "ansible_collections" / meta["namespace"] / meta["name"]
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for kind in sorted(p.name for p in (ROOT / "plugins").iterdir() if p.is_dir() and p.name != "__pycache__"):
        if kind not in PLUGIN_TYPES:
            raise BuildError(f"plugins/{kind}: a plugin type the collection build does not place")
    for src, dest in LAYOUT.items():
        source = ROOT / src
        if not source.exists():
            raise BuildError(f"{src}: in the layout, missing from the repository")
        (tree / dest).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, tree / dest, ignore=IGNORE, symlinks=False)
        else:
            shutil.copy2(source, tree / dest)
    shutil.copytree(SOURCE, tree, dirs_exist_ok=True, ignore=IGNORE)

    ours = {p.stem for p in (ROOT / "plugins/module_utils").glob("*.py")}
    modules = {p.stem for p in (ROOT / "plugins/modules").glob("*.py")}
    for path in sorted((tree / "plugins").rglob("*.py")):
        text = path.read_text()
        new = rewrite_doc_links(rewrite_imports(text, str(path.relative_to(tree)), ours, fqcn), modules, fqcn)
        if new != text:
            path.write_text(new)
    names = filter_names(ROOT / "plugins/filter")
    for path in sorted([*(tree / "roles").rglob("*"), *(tree / "playbooks").rglob("*")]):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
            text = path.read_text()
            new = rewrite_filters(text, names, fqcn)
            left = short_filter_uses(new, names)
            if left:
                raise BuildError(f"{path.relative_to(tree)}: uses filter(s) {sorted(set(left))} by name in a "
                                 "string, which a collection cannot resolve: call them with `|`")
            if new != text:
                path.write_text(new)
    if (tree / "playbooks/site.yml").exists():
        raise BuildError("playbooks/site.yml exists in the repository: the build writes it from site.yml")
    (tree / "playbooks/site.yml").write_text(site_playbook(fqcn))
    check_reaches(tree, fqcn)
    return tree


def tarball(tree: Path, output: Path) -> Path:
    """ansible-galaxy collection build on the laid-out tree; the tarball's path."""
    meta = galaxy()
    output.mkdir(parents=True, exist_ok=True)
    galaxy_cli = Path(sys.executable).with_name("ansible-galaxy")
    subprocess.run([str(galaxy_cli), "collection", "build", "--force", "--output-path", str(output), str(tree)],
                   check=True, stdout=subprocess.DEVNULL)
    path = output / f"{meta['namespace']}-{meta['name']}-{meta['version']}.tar.gz"
    if not path.is_file():
        raise BuildError(f"ansible-galaxy collection build made no {path.name}")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache/collection",
                        help="where ansible_collections/<ns>/<name> is laid out (default .cache/collection)")
    parser.add_argument("--tarball", action="store_true",
                        help="also run ansible-galaxy collection build; the tarball goes in --out")
    args = parser.parse_args(argv)
    try:
        tree = build(args.out.resolve())
        print(tarball(tree, args.out.resolve()) if args.tarball else tree)
    except BuildError as error:
        print(f"build_collection: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
