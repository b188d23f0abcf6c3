"""Whether this python's environment holds every requirement given as an argument (pip's syntax: name,
name==version, name>=version). Prints one line for each that it does not hold; exit 0 when none, 1
otherwise. Each named package is checked, not its dependencies, as `pip install` finds it satisfied."""
import sys
from importlib import metadata

try:
    from packaging.requirements import Requirement
except ImportError:  # a venv without packaging still has pip's copy
    from pip._vendor.packaging.requirements import Requirement


def unmet(requirements):
    lines = []
    for text in requirements:
        requirement = Requirement(text)
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            lines.append("%s: not installed" % text)
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            lines.append("%s: %s is installed" % (text, version))
    return lines


if __name__ == "__main__":
    found = unmet(sys.argv[1:])
    if found:
        print("\n".join(found))
    sys.exit(1 if found else 0)
