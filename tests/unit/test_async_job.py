"""What the watches of background jobs read from Ansible's async wrapper, and how they put its verdicts."""
import json
import threading
import time

from ansible.module_utils.async_job import job_failure, job_finished, wait_for_job


def test_a_job_is_finished_when_the_async_wrapper_wrote_its_result(tmp_path):
    results = tmp_path / "job"
    assert not job_finished(str(results))  # not written yet
    results.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1"}))
    assert not job_finished(str(results))
    results.write_text("{\"rc\": 0")  # being replaced
    assert not job_finished(str(results))
    results.write_text(json.dumps({"rc": 1, "stdout": "", "changed": True}))
    assert job_finished(str(results))


def test_one_round_waits_its_fraction_of_a_second_or_ends_when_the_job_does(tmp_path):
    results = tmp_path / "job"
    results.write_text(json.dumps({"started": True, "finished": False}))
    started = time.monotonic()
    assert wait_for_job(str(results), 0.05) is False
    assert 0.05 <= time.monotonic() - started < 0.5  # not a whole poll step, not rounded to a second
    threading.Timer(0.1, results.write_text, [json.dumps({"state": "fetched"})]).start()
    started = time.monotonic()
    assert wait_for_job(str(results), 30, poll=0.02) is True
    assert time.monotonic() - started < 5


def test_the_wrapper_s_verdicts_are_put_in_words():
    assert job_failure({"state": "fetched", "changed": True}) is None
    assert job_failure({"rc": 0, "changed": True}) is None
    # What async_wrapper writes when it kills a job at its `async:` limit.
    assert job_failure({"msg": "Timeout exceeded", "failed": True, "child_pid": 4242}) == (
        "it ran past its time limit and was stopped")
    assert job_failure({"failed": True, "msg": "not enough disk: 12.0 GB free, 600.0 GB needed"}) == (
        "not enough disk: 12.0 GB free, 600.0 GB needed")
    # ansible-core 2.19 nests a crashed module's message in its exception.
    assert job_failure({"failed": True, "exception": {"event": {"msg": "boom"}}}) == "it crashed: boom"
    assert job_failure({"failed": True, "exception": "Traceback ...: boom"}) == "it crashed: Traceback ...: boom"
    assert job_failure(None) == "it left no result"
