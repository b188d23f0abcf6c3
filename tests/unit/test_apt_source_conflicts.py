"""Other sources of NVIDIA's repository, as cuda-keyring and hand-made setups leave them."""
import apt_source_conflicts as mod

URI = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
OWN = "/etc/apt/sources.list.d/cuda.sources"
# cuda-keyring 1.1's list file for Ubuntu 24.04, as the package installs it.
KEYRING = ("deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
           "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /\n")
UBUNTU = open(__import__("conftest").FIXTURES / "hosts/h200-driver580/apt-sources.txt").read()


def test_cuda_keyrings_list_is_a_whole_file_conflict():
    files = {"/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list": KEYRING,
             "/etc/apt/sources.list.d/ubuntu.sources": UBUNTU, OWN: "Types: deb\nURIs: %s\nSuites: /\n" % URI}
    assert mod.conflicts(files, URI, OWN) == [
        {"path": "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list", "whole": True, "lines": [KEYRING.strip()]}]


def test_a_line_without_the_trailing_slash_in_a_shared_file_is_named():
    line = "deb https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64 /"
    text = "deb http://archive.ubuntu.com/ubuntu noble main\n" + line + "\n# " + line + "\n"
    assert mod.conflicts({"/etc/apt/sources.list": text}, URI, OWN) == [
        {"path": "/etc/apt/sources.list", "whole": False, "lines": [line]}]


def test_deb822_stanzas_count_unless_disabled():
    stanza = "Types: deb\nURIs: %s\nSuites: /\nSigned-By: /usr/share/keyrings/cuda-archive-keyring.gpg\n" % URI
    assert mod.conflicts({"/etc/apt/sources.list.d/nv.sources": stanza + "Enabled: no\n"}, URI, OWN) == []
    mixed = stanza + "\nTypes: deb\nURIs: http://archive.ubuntu.com/ubuntu\nSuites: noble\n"
    assert mod.conflicts({"/etc/apt/sources.list.d/nv.sources": mixed}, URI, OWN) == [
        {"path": "/etc/apt/sources.list.d/nv.sources", "whole": False, "lines": []}]


def test_ubuntu_as_shipped_has_no_conflict():
    assert mod.conflicts({"/etc/apt/sources.list.d/ubuntu.sources": UBUNTU}, URI, OWN) == []
