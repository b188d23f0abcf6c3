"""Every custom module documents itself the way ansible-doc reads it, and documents exactly its options."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

MODULES = sorted(p.stem for p in (ROOT / "plugins/modules").glob("*.py"))
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")


@pytest.fixture(scope="module")
def docs():
    """Every module's documentation as ansible-doc reads it, in one run (one ansible-doc start is most of
    the cost of reading one module)."""
    out = subprocess.run([ANSIBLE_DOC, "-M", str(ROOT / "plugins/modules"), "--json", *MODULES],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_reads_the_module(name, docs):
    doc = docs[name]
    assert doc["doc"]["short_description"] and doc["examples"] and doc["return"]
    module = __import__(name)
    source = (ROOT / "plugins/modules" / f"{name}.py").read_text()
    # The options the module accepts are the options it documents.
    spec_start = source.index("argument_spec=")
    documented = set(doc["doc"]["options"])
    assert all(f'"{option}"' in source[spec_start:] for option in documented)
    assert module.__doc__
