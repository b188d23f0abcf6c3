"""What the fleet installs from outside is what it pinned (plugins/filter/supply_chain.py): wheel digests
are required and compared, and the CUDA apt key's fingerprints are read as gpg reads them."""
import pytest
import yaml

from conftest import FIXTURES, ROOT
from supply_chain import apt_key_problem, openpgp_fingerprints, supply_chain_pin_problems, wheel_digest_problem

KEYS = FIXTURES / "apt-keys"
SHA = "4be1313f82808f0fb6df8107e79f6b6cea07a4aa2b20139e0342eafe31eb28bd"
NVIDIA = "EB693B3035CD5710E231E123A4B469963BF863CC"


def gpg_fingerprints(name):
    """The fpr: lines of gpg --show-keys --with-colons (captured with GnuPG 2.2.40), primary keys and subkeys."""
    found, last = {"primary": [], "subkeys": []}, None
    for line in (KEYS / (name + ".colons")).read_text().splitlines():
        fields = line.split(":")
        if fields[0] in ("pub", "sub"):
            last = fields[0]
        elif fields[0] == "fpr":
            found["primary" if last == "pub" else "subkeys"].append(fields[9])
    return found


@pytest.mark.parametrize("name", ["archive-key", "other-key", "two-keys"])
def test_the_fingerprints_are_gpg_s_own(name):
    assert openpgp_fingerprints((KEYS / (name + ".asc")).read_text()) == gpg_fingerprints(name)
    assert gpg_fingerprints(name)["primary"]  # the capture is not empty


def test_the_pinned_key_passes_and_another_fails_naming_both_fingerprints():
    text = (KEYS / "archive-key.asc").read_text()
    (mine,) = gpg_fingerprints("archive-key")["primary"]
    assert apt_key_problem(text, mine, "file:///srv/key.asc") == ""
    # As a site writes it: lower case, in groups of four.
    assert apt_key_problem(text, " ".join(mine[i:i + 4] for i in range(0, 40, 4)).lower(), "k") == ""
    refused = apt_key_problem(text, NVIDIA, "https://mirror.example/3bf863cc.pub")
    assert refused == ("the CUDA apt key from https://mirror.example/3bf863cc.pub has fingerprint " + mine
                       + ", but cuda_toolkit_repo_key_fingerprint pins " + NVIDIA + ": apt is not told to trust it")


def test_a_block_that_holds_the_pinned_key_beside_another_is_refused():
    (mine,) = gpg_fingerprints("archive-key")["primary"]
    refused = apt_key_problem((KEYS / "two-keys.asc").read_text(), mine, "k")
    assert refused and ", ".join(gpg_fingerprints("two-keys")["primary"]) in refused


@pytest.mark.parametrize("text,why", [
    ("<html>404 Not Found</html>", "not an ASCII-armored OpenPGP public key block"),
    ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----\n", "not valid base64"),
])
def test_what_is_no_key_is_refused_saying_why(text, why):
    assert why in apt_key_problem(text, NVIDIA, "https://mirror.example/k.pub")


def test_the_default_pins_are_sound_and_an_empty_one_is_refused_naming_its_setting():
    defaults = {**yaml.safe_load((ROOT / "roles/sglang/defaults/main.yml").read_text()),
                **yaml.safe_load((ROOT / "roles/flash_attn/defaults/main.yml").read_text()),
                **yaml.safe_load((ROOT / "roles/cuda_toolkit/defaults/main.yml").read_text())}
    assert supply_chain_pin_problems(defaults) == []
    assert defaults["cuda_toolkit_repo_key_fingerprint"] == NVIDIA
    (empty,) = supply_chain_pin_problems({**defaults, "sglang_sgl_kernel_wheel_sha256": ""})
    assert empty.startswith("sglang_sgl_kernel_wheel_sha256 is empty")
    (upper,) = supply_chain_pin_problems({**defaults, "sglang_sgl_kernel_wheel_sha256": SHA.upper()})
    assert "not a sha256" in upper
    (prebuilt,) = supply_chain_pin_problems({**defaults, "flash_attn_prebuilt_wheel": "https://w.example/f.whl"})
    assert prebuilt.startswith("flash_attn_prebuilt_wheel_sha256 is empty") and "https://w.example/f.whl" in prebuilt
    assert supply_chain_pin_problems({**defaults, "flash_attn_prebuilt_wheel": "/w/f.whl",
                                      "flash_attn_prebuilt_wheel_sha256": SHA}) == []
    (short,) = supply_chain_pin_problems({**defaults, "cuda_toolkit_repo_key_fingerprint": "3bf863cc"})
    assert short.startswith("cuda_toolkit_repo_key_fingerprint is '3bf863cc', not a full OpenPGP fingerprint")


def test_a_wheel_whose_bytes_changed_is_refused_naming_the_file_and_both_digests():
    assert wheel_digest_problem(SHA, SHA, "/c/k/f.whl", "/c/k/key.json") == ""
    other = "0" * 64
    assert wheel_digest_problem(other, SHA, "/c/k/f.whl", "/c/k/key.json") == (
        "/c/k/f.whl has sha256 " + other + ", but /c/k/key.json records " + SHA
        + ": its bytes changed since they were recorded; it is not installed")
    assert "records none" in wheel_digest_problem(other, "", "/c/k/f.whl", "/c/k/key.json")


def test_the_lab_mirror_pins_the_fingerprint_gpg_gives_its_one_key():
    import aptrepo
    (mine,) = gpg_fingerprints("archive-key")["primary"]
    assert aptrepo.key_fingerprint((KEYS / "archive-key.colons").read_text()) == mine
    with pytest.raises(SystemExit, match="holds 2 keys, not one"):
        aptrepo.key_fingerprint((KEYS / "two-keys.colons").read_text())
