"""tools/leak_scan.py finds a key in every form a run's output carries it, and nothing else."""
import base64
import json
import urllib.parse

import pytest

from leak_scan import leaks, main

KEY = "lab-secret-fleet-gpu-1-4f9c"


@pytest.mark.parametrize("prefix", ["", "a", "ab", "abc", '{"api_key": "'])
def test_a_key_inside_a_base64_encoded_file_is_found_at_every_alignment(prefix):
    document = json.dumps({"server_info": {"tp_size": 8, "api_key": KEY}})
    slurped = base64.b64encode((prefix + document).encode()).decode()
    assert KEY not in slurped
    assert leaks("content: " + slurped, KEY) and all(name.startswith("base64") for name in leaks(slurped, KEY))


def test_plain_and_url_encoded_keys_are_found_and_other_text_is_not():
    assert "plain" in leaks("Authorization: Bearer " + KEY, KEY)
    key = KEY + "/+="
    assert "url-encoded" in leaks("http://h/?key=" + urllib.parse.quote(key, safe=""), key)
    assert "form-encoded" in leaks("key=" + urllib.parse.quote_plus(key), key)
    other = "lab-secret-fleet-gpu-2-4f9c"
    assert leaks(json.dumps({"k": other, "b": base64.b64encode(other.encode()).decode()}), KEY) == []


def test_the_command_names_the_file_and_the_form(tmp_path, capsys):
    (tmp_path / "key").write_text(KEY + "\n")
    (tmp_path / "report.json").write_text(json.dumps({"content": base64.b64encode(b"x" + KEY.encode()).decode()}))
    (tmp_path / "clean.json").write_text("{}")
    assert main(["--secret-file", str(tmp_path / "key"), str(tmp_path / "report.json"), str(tmp_path / "clean.json")]) == 1
    out = capsys.readouterr().out
    assert "report.json: the secret, as base64 at byte 1" in out and "clean.json" not in out
