# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fleet installs from outside is what it pinned: wheel digests, the CUDA apt key's fingerprint."""
from __future__ import annotations

DOCUMENTATION = r"""
name: supply_chain_pin_problems
short_description: What is wrong with the pins of what the fleet installs from outside
description:
  - I(_input) holds the settings as they hold for a host (its own, else the role defaults).
  - C(sglang_sgl_kernel_wheel_sha256) must be a sha256 (64 lowercase hex digits); so must
    C(flash_attn_prebuilt_wheel_sha256) whenever C(flash_attn_prebuilt_wheel) is set; and
    C(cuda_toolkit_repo_key_fingerprint) must be an OpenPGP fingerprint (40 hex digits, or 64 for a
    v6 key; spaces allowed).
  - Returns a list of problems in words, each naming its setting; empty when every pin is sound.
positional: _input
options:
  _input:
    description: The settings, by name.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The pins are sound
  ansible.builtin.assert:
    that: settings | supply_chain_pin_problems | length == 0
"""

RETURN = r"""
_value:
  description: The problems, in words; empty when every pin is sound.
  type: list
  elements: str
"""

import base64
import binascii
import hashlib
import re

from ansible.errors import AnsibleFilterError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT = re.compile(r"^(?:[0-9A-F]{40}|[0-9A-F]{64})$")
_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_END = "-----END PGP PUBLIC KEY BLOCK-----"
# RFC 9580: public key and public subkey packets.
_PUBLIC_KEY = 6
_PUBLIC_SUBKEY = 14


def sha256_problem(value, setting):
    """'' when `value` is a sha256 as pip's #sha256= and sha256sum write it, else why not, naming `setting`."""
    text = "" if value is None else str(value).strip()
    if _SHA256.match(text):
        return ""
    if not text:
        return ("%s is empty: what is installed from outside is verified by its sha256 "
                "(sha256sum <the file>, or the #sha256= of its index entry)" % setting)
    return "%s is %r, not a sha256 (64 lowercase hex digits)" % (setting, text)


def normal_fingerprint(value):
    """An OpenPGP fingerprint as gpg's fpr: line writes it: upper case, no spaces."""
    return re.sub(r"\s+", "", "" if value is None else str(value)).upper()


def fingerprint_problem(value, setting):
    """'' when `value` is a full OpenPGP fingerprint (a short key id is no pin), else why not."""
    if _FINGERPRINT.match(normal_fingerprint(value)):
        return ""
    if not normal_fingerprint(value):
        return "%s is empty: the apt key is trusted only with its fingerprint pinned" % setting
    return ("%s is %r, not a full OpenPGP fingerprint (40 hex digits, as gpg --show-keys prints it; "
            "a key id is not one)" % (setting, value))


def supply_chain_pin_problems(settings):
    """What is wrong with the pins in `settings` (see DOCUMENTATION)."""
    problems = []
    kernel = sha256_problem(settings.get("sglang_sgl_kernel_wheel_sha256"), "sglang_sgl_kernel_wheel_sha256")
    if kernel:
        problems.append(kernel + " (the wheel of sglang_sgl_kernel_wheel_url)")
    if str(settings.get("flash_attn_prebuilt_wheel") or "").strip():
        prebuilt = sha256_problem(settings.get("flash_attn_prebuilt_wheel_sha256"),
                                  "flash_attn_prebuilt_wheel_sha256")
        if prebuilt:
            problems.append(prebuilt + " (flash_attn_prebuilt_wheel is %s)" % settings["flash_attn_prebuilt_wheel"])
    if "cuda_toolkit_repo_key_fingerprint" in settings:
        key = fingerprint_problem(settings["cuda_toolkit_repo_key_fingerprint"], "cuda_toolkit_repo_key_fingerprint")
        if key:
            problems.append(key)
    return problems


def _dearmor(text):
    """The bytes of every ASCII-armored public key block in `text`, one after the other (as gpg reads a file
    of several blocks)."""
    lines, data = text.replace("\r\n", "\n").split("\n"), b""
    starts = [i for i, line in enumerate(lines) if line.strip() == _BEGIN]
    if not starts:
        raise ValueError("it is not an ASCII-armored OpenPGP public key block")
    for start in starts:
        try:
            end = next(i for i, line in enumerate(lines) if i > start and line.strip() == _END)
        except StopIteration:
            raise ValueError("a key block has no end line")
        body = [line.strip() for line in lines[start + 1:end]]
        # Armor headers (Version:, Comment:) end at the first empty line.
        if "" in body:
            body = body[body.index("") + 1:]
        try:
            data += base64.b64decode("".join(line for line in body if not line.startswith("=")), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("its armor is not valid base64")
    return data


def _packets(data):
    """(tag, body) of each OpenPGP packet in `data` (RFC 9580 section 4.2)."""
    at = 0
    while at < len(data):
        head = data[at]
        if not head & 0x80:
            raise ValueError("byte %d is not an OpenPGP packet header" % at)
        if head & 0x40:
            tag, at = head & 0x3F, at + 1
            first = data[at]
            if first < 192:
                length, at = first, at + 1
            elif first < 224:
                length, at = ((first - 192) << 8) + data[at + 1] + 192, at + 2
            elif first == 255:
                length, at = int.from_bytes(data[at + 1:at + 5], "big"), at + 5
            else:
                raise ValueError("a packet of partial lengths, which no key packet has")
        else:
            tag, kind, at = (head >> 2) & 0x0F, head & 0x03, at + 1
            if kind == 3:
                length = len(data) - at
            else:
                size = (1, 2, 4)[kind]
                length, at = int.from_bytes(data[at:at + size], "big"), at + size
        if at + length > len(data):
            raise ValueError("a packet runs past the end of the key")
        yield tag, data[at:at + length]
        at += length


def _fingerprint(body):
    version = body[0]
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version in (5, 6):
        prefix = b"\x9a" if version == 5 else b"\x9b"
        return hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise ValueError("a version %d key, which this check cannot read" % version)


def openpgp_fingerprints(text):
    """The fingerprints of an ASCII-armored public key block, as gpg --show-keys --with-colons prints them
    (its fpr: lines): C(primary), one per key, and C(subkeys)."""
    try:
        found = {"primary": [], "subkeys": []}
        for tag, body in _packets(_dearmor(str(text))):
            if tag == _PUBLIC_KEY:
                found["primary"].append(_fingerprint(body))
            elif tag == _PUBLIC_SUBKEY:
                found["subkeys"].append(_fingerprint(body))
    except (ValueError, IndexError) as error:
        raise AnsibleFilterError("openpgp_fingerprints: %s" % error)
    return found


def apt_key_problem(text, pinned, source, setting="cuda_toolkit_repo_key_fingerprint"):
    """'' when the key block `text` (read from `source`) holds exactly one key and it is the pinned one,
    else why not, naming both fingerprints. apt trusts every key of a Signed-By file: a block that holds
    the pinned key beside another is refused as well."""
    want = normal_fingerprint(pinned)
    try:
        keys = openpgp_fingerprints(text)["primary"]
    except AnsibleFilterError as error:
        return "the CUDA apt key from %s cannot be read: %s" % (source, str(error).split(": ", 1)[-1])
    if keys == [want]:
        return ""
    if not keys:
        return "the CUDA apt key from %s holds no public key; %s pins %s" % (source, setting, want)
    return ("the CUDA apt key from %s has fingerprint %s, but %s pins %s: apt is not told to trust it"
            % (source, ", ".join(keys), setting, want))


def wheel_digest_problem(actual, expected, path, expected_from):
    """'' when the wheel at `path` has the sha256 `expected` (which `expected_from` records), else why not,
    naming the file and both digests."""
    if str(actual or "").lower() == str(expected or "").strip().lower() and actual:
        return ""
    return ("%s has sha256 %s, but %s records %s: its bytes changed since they were recorded; it is not "
            "installed" % (path, actual or "(unreadable)", expected_from, str(expected or "").strip() or "none"))


class FilterModule:
    def filters(self):
        return {"supply_chain_pin_problems": supply_chain_pin_problems,
                "openpgp_fingerprints": openpgp_fingerprints,
                "apt_key_problem": apt_key_problem,
                "wheel_digest_problem": wheel_digest_problem}
