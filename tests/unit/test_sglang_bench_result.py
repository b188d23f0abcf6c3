"""bench_serving's result file is cut on the host before it is read back (sglang_bench_result): the server's
/get_server_info, which sglang 0.5.9 answers with every ServerArgs field, keys included, never leaves it."""
import ast
import base64
import json
import os

import pytest

from conftest import FIXTURES
from leak_scan import leaks
from sglang_bench_result import cut_file

KEEP = {"speculative_algorithm", "tp_size", "enable_flashinfer_allreduce_fusion", "version"}
KEY, ADMIN = "client-key-5b0e9d1c77a2", "admin-key-91fe03aa6c4d"


def server_args_fields(upstream_sglang):
    """Every field of the real ServerArgs dataclass (what /get_server_info returns, as dataclasses.asdict)."""
    tree = ast.parse((upstream_sglang / "sglang/srt/server_args.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"]
    return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


@pytest.fixture
def result_file(tmp_path, upstream_sglang):
    """The lab's captured bench_serving line, its server_info as the real 0.5.9 server answers: every field."""
    fields = server_args_fields(upstream_sglang)
    assert {"api_key", "admin_api_key"} <= set(fields)
    record = json.loads((FIXTURES / "bench_serving/lab-eagle3-c8.jsonl").read_text().splitlines()[-1])
    info = {name: record["server_info"].get(name) for name in fields}
    info.update(api_key=KEY, admin_api_key=ADMIN, version="0.5.9")
    path = tmp_path / "eagle3-c8.jsonl"
    path.write_text(json.dumps(dict(record, server_info=info)) + "\n")
    os.chmod(path, 0o640)
    return path, record


def test_the_file_and_what_is_read_back_hold_no_key_in_any_encoding(result_file):
    path, record = result_file
    assert leaks(path.read_text(), KEY)  # what bench_serving wrote
    result, cut = cut_file(str(path), KEEP)
    assert cut == 1 and set(result["server_info"]) == KEEP
    assert result["server_info"]["speculative_algorithm"] == "EAGLE3" and result["server_info"]["tp_size"] == 8
    assert result["output_throughput"] == record["output_throughput"]
    for text in (path.read_text(), json.dumps(result), base64.b64encode(path.read_bytes()).decode()):
        assert not leaks(text, KEY) and not leaks(text, ADMIN)
    assert os.stat(path).st_mode & 0o777 == 0o640  # the file keeps its mode


def test_a_file_already_cut_is_left_alone_and_check_mode_writes_nothing(result_file):
    path, _ = result_file
    before = path.read_bytes()
    result, cut = cut_file(str(path), KEEP, check_mode=True)
    assert cut == 1 and path.read_bytes() == before and not leaks(json.dumps(result), KEY)
    cut_file(str(path), KEEP)
    cut_again = path.read_bytes()
    assert cut_file(str(path), KEEP)[1] == 0 and path.read_bytes() == cut_again


def test_every_line_of_a_file_bench_serving_appended_to_is_cut(result_file):
    path, _ = result_file
    line = path.read_text()
    path.write_text(line + line.replace('"max_concurrency": 8', '"max_concurrency": 1'))
    result, cut = cut_file(str(path), KEEP)
    assert cut == 2 and result["max_concurrency"] == 1 and not leaks(path.read_text(), KEY)


def test_a_server_that_did_not_answer_and_a_prefill_decode_server_are_read(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"output_throughput": 1.0, "server_info": None}) + "\n")
    assert cut_file(str(path), KEEP) == ({"output_throughput": 1.0, "server_info": None}, 0)
    path.write_text(json.dumps({"server_info": {"decode": [{"tp_size": 8, "api_key": KEY}], "prefill": [{}]}}) + "\n")
    result, cut = cut_file(str(path), KEEP)
    assert result["server_info"] == {"tp_size": 8} and cut == 1 and not leaks(path.read_text(), KEY)
