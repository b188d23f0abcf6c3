"""The model stage's first pass: the quick check settles what every host holds; the rest takes the whole work."""
import json

from model_distribution import (sglang_model_known_manifests, sglang_model_manifest_file, sglang_model_problems,
                                sglang_model_settled_report, sglang_model_unsettled)

REV = "a" * 40
MODELS = [{"repo_id": "org/main", "revision": REV, "dir": "/models/main"},
          {"repo_id": "org/draft", "revision": REV, "dir": "/models/draft"}]


def check(*states):
    """A host's registered loop: one result per model, a state or None (a skipped item)."""
    return {"results": [({"item": m, "skipped": True} if s is None else
                         {"item": m, "state": s, "hashed_bytes": 7, "changed": False})
                        for m, s in zip(MODELS, states)]}


def test_every_host_verified_settles_every_model_and_reports_it_as_the_whole_work_would():
    checks = [check("verified", "verified"), check("verified", "verified")]
    assert sglang_model_unsettled(MODELS, checks) == []
    assert sglang_model_settled_report(checks[0], MODELS, []) == [
        {"repo_id": m["repo_id"], "revision": REV, "dir": m["dir"], "state": "verified", "from": "", "problems": {},
         "fetched_bytes": 0, "hashed_bytes": 7} for m in MODELS]


def test_one_host_missing_a_model_sends_that_model_alone_to_the_whole_work():
    checks = [check("verified", "verified"), check("verified", "incomplete")]
    assert sglang_model_unsettled(MODELS, checks) == [MODELS[1]]
    assert [r["repo_id"] for r in sglang_model_settled_report(checks[0], MODELS, [MODELS[1]])] == ["org/main"]


def test_a_model_no_quick_check_ran_for_or_a_failed_check_is_unsettled():
    failed = {"results": [{"item": MODELS[0], "failed": False, "msg": "not a directory"},
                          check(None, "verified")["results"][1]]}
    assert sglang_model_unsettled(MODELS, [check(None, "verified")]) == [MODELS[0]]
    assert sglang_model_unsettled(MODELS, [failed]) == [MODELS[0]]
    assert sglang_model_unsettled(MODELS, [{}]) == MODELS      # a host that did not run the check
    assert sglang_model_unsettled(MODELS, []) == MODELS


def test_the_controller_manifests_are_found_by_their_file_names(tmp_path):
    (tmp_path / ("org--main@%s.json" % REV)).write_text(json.dumps({"files": []}))
    assert sglang_model_manifest_file(MODELS[0], "/m") == "/m/org--main@%s.json" % REV
    assert sglang_model_known_manifests(MODELS, str(tmp_path)) == {"org/main": {"files": []}}


def test_bad_models_and_settings_are_named():
    bad = [{"repo_id": "org/x", "revision": "main", "dir": "rel"}, {"repo_id": "org/y", "revision": REV, "dir": "rel",
                                                                      "source": "path"}]
    problems = sglang_model_problems(bad, "hub", 0, 30)
    assert problems == ['org/x: revision "main" is not a commit id (40 hex digits); pin the commit you validated',
                        "org/x: dir rel is not an absolute path", "org/y: dir rel is not an absolute path",
                        "org/y: source path needs source_dir", "two models share one dir",
                        "sglang_model_fetch_timeout_hours (0) and sglang_model_progress_interval (30) must be positive"]
    assert sglang_model_problems(MODELS) == []
