"""Drain leases: how long one lasts (the stage's own waits), its file on the router host, and the router
module keeping it to the change: written before a worker leaves, removed once it is back, never
written for a worker out by hand, never turned back from failed."""
import json
import os

import pytest

import sglang_drain_lease as lease_module
import sglang_router_worker as worker
from ansible.module_utils import drain_lease as leases
from test_sglang_router_worker import KEY, params, router  # noqa: F401 (the fake router fixture)

TIMEOUTS = {"run": "ops@ctl 2026-12-01T11:00:00Z", "host": "gpu-2", "drain_timeout": 300, "start_timeout": 3600,
            "gate_timeout": 3600}


def test_a_lease_lasts_the_drain_the_start_and_the_gate():
    assert leases.lease_seconds(300, 3600, 3600) == 7500  # the role's defaults
    assert leases.lease_seconds(5, 10, 15) == 30
    assert leases.lease_seconds("5", "10", "15") == 30  # as templated values arrive
    lease = leases.new("http://10.0.0.2:30000/", "run-1", "gpu-2", 30, now=1000.0)
    assert lease["worker"] == "http://10.0.0.2:30000" and lease["until"] == 1030.0
    assert lease["until_utc"] == "1970-01-01T00:17:10Z" and lease["state"] == "draining"
    assert not leases.expired(lease, 1029.9) and leases.expired(lease, 1030.0)


@pytest.mark.parametrize("bad", [(-1, 10, 10), (1.5, 10, 10), ("ten", 10, 10), (None, 10, 10), (0, 0, 0), (True, 1, 1)])
def test_a_lease_of_no_sense_is_refused(bad):
    with pytest.raises(leases.LeaseError):
        leases.lease_seconds(*bad)


def test_what_a_lease_says_to_people():
    lease = leases.new("http://10.0.0.2:30000", "run-1", "gpu-2", 60, now=1000.0)
    assert leases.describe(lease, 1010) == ("out under the drain lease of run run-1 (gpu-2) until "
                                            "1970-01-01T00:17:40Z (50s from now)")
    assert "ended 1970-01-01T00:17:40Z (40s ago): the router host's healer puts it back" in leases.describe(lease, 1100)
    assert "failed its gate in run run-1 (gpu-2)" in leases.describe(dict(lease, state="failed"), 1100)


def test_the_lease_file_round_trips_and_a_broken_one_is_said(tmp_path):
    lease = leases.new("http://10.0.0.2:30000", "run-1", "gpu-2", 60, now=1000.0)
    path = leases.write(str(tmp_path / "leases"), lease)
    assert os.path.basename(path) == "http_10.0.0.2_30000.json"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"  # the healer reads it as the router user
    assert leases.read(str(tmp_path / "leases"), "http://10.0.0.2:30000/") == lease
    (tmp_path / "leases/http_10.0.0.3_30000.json").write_text("{not json")
    found = leases.read_all(str(tmp_path / "leases"))
    assert [os.path.basename(p) for p, _ in found] == ["http_10.0.0.2_30000.json", "http_10.0.0.3_30000.json"]
    assert found[0][1] == lease and isinstance(found[1][1], leases.LeaseError)
    with pytest.raises(leases.LeaseError, match="no drain lease"):
        leases.read(str(tmp_path / "leases"), "http://10.0.0.3:30000")
    assert leases.remove(str(tmp_path / "leases"), "http://10.0.0.2:30000")
    assert not leases.remove(str(tmp_path / "leases"), "http://10.0.0.2:30000")
    assert leases.read_all(str(tmp_path / "nowhere")) == []


def test_taking_a_worker_out_writes_its_lease_first_and_putting_it_back_removes_it(router, tmp_path):  # noqa: F811
    lease_dir = str(tmp_path)
    out = params(router, url="http://10.0.0.1:30000", state="absent", lease_dir=lease_dir, lease=TIMEOUTS)
    seen = []
    real_ensure = worker.ensure

    def ensure_seeing_the_lease(p, *args):
        seen.append(leases.read(lease_dir, p["url"]))  # the lease is there before the DELETE
        return real_ensure(p, *args)
    worker.ensure = ensure_seeing_the_lease
    try:
        changed, listed, _, lease = worker.leased(out, now=lambda: 1000.0)
    finally:
        worker.ensure = real_ensure
    assert changed and listed == [] and seen[0]["run"] == TIMEOUTS["run"]
    assert lease["until"] == 1000.0 + 7500 and lease["host"] == "gpu-2" and "until" in lease["summary"]
    assert json.loads((tmp_path / "http_10.0.0.1_30000.json").read_text())["seconds"] == 7500

    back = params(router, url="http://10.0.0.1:30000", state="present", lease_dir=lease_dir)
    changed, listed, _, ended = worker.leased(back)
    assert changed and ended["run"] == TIMEOUTS["run"] and os.listdir(lease_dir) == []
    assert worker.leased(back)[0] is False and worker.leased(back)[3] is None  # in, no lease: nothing to do


def test_a_worker_out_by_hand_gets_no_lease_and_a_failed_lease_stays_failed(router, tmp_path):  # noqa: F811
    out = params(router, url="http://10.0.0.9:30000", state="absent", lease_dir=str(tmp_path), lease=TIMEOUTS)
    assert worker.leased(out)[0] is False and os.listdir(tmp_path) == []  # never listed, no lease: by hand
    failed = dict(leases.new("http://10.0.0.9:30000", "run-0", "gpu-9", 30, now=1000.0), state="failed")
    leases.write(str(tmp_path), failed)
    changed, _, _, lease = worker.leased(out)
    assert changed is False and lease["state"] == "failed" == leases.read(str(tmp_path), "http://10.0.0.9:30000")["state"]
    # A draining lease of a run that died is renewed by the run that takes over.
    leases.write(str(tmp_path), dict(failed, state="draining"))
    changed, _, _, lease = worker.leased(out, now=lambda: 5000.0)
    assert changed and lease["run"] == TIMEOUTS["run"] and lease["until"] == 5000.0 + 7500


def test_check_mode_writes_and_removes_no_lease_but_says_it_would(router, tmp_path):  # noqa: F811
    out = params(router, url="http://10.0.0.1:30000", state="absent", lease_dir=str(tmp_path), lease=TIMEOUTS)
    changed, _, _, lease = worker.leased(out, check_mode=True)
    assert changed and lease["state"] == "draining" and os.listdir(tmp_path) == []
    leases.write(str(tmp_path), leases.new("http://10.0.0.1:30000", "run-0", "gpu-1", 30, now=1000.0))
    changed, _, _, lease = worker.leased(params(router, url="http://10.0.0.1:30000", state="present",
                                                lease_dir=str(tmp_path)), check_mode=True)
    assert changed and lease["run"] == "run-0" and lease["expired"]  # in the router, but its lease is still there
    assert os.listdir(tmp_path) == ["http_10.0.0.1_30000.json"]


def test_a_failed_gate_marks_the_lease_failed_once(tmp_path):
    p = {"lease_dir": str(tmp_path), "worker": "http://10.0.0.2:30000", "state": "failed"}
    assert lease_module.run(p) == (False, None, [], [])  # no lease: nothing to mark
    leases.write(str(tmp_path), leases.new("http://10.0.0.2:30000", "run-1", "gpu-2", 30, now=1000.0))
    changed, lease, _, _ = lease_module.run(p, check_mode=True)
    assert changed and leases.read(str(tmp_path), p["worker"])["state"] == "draining"
    changed, lease, _, _ = lease_module.run(p, now=lambda: 1010.0)
    assert changed and lease["state"] == "failed" and leases.read(str(tmp_path), p["worker"])["failed_at"] == 1010.0
    assert lease_module.run(p)[0] is False
    _, _, listed, unreadable = lease_module.run({"lease_dir": str(tmp_path), "state": "query"}, now=lambda: 1010.0)
    assert [(x["worker"], x["state"], x["expired"]) for x in listed] == [("http://10.0.0.2:30000", "failed", False)]
    assert "failed its gate in run run-1 (gpu-2)" in listed[0]["summary"] and unreadable == []


def test_a_worker_leaves_through_a_drain_slot_only_while_the_floor_holds(router, tmp_path):  # noqa: F811
    """The fake router lists w1 (http://10.0.0.1:30000, healthy); a second worker joins it. With a floor of 1,
    one of the two may leave; the other may not while the first is out, and may once it is back, healthy."""
    worker.ensure(params(router))  # http://10.0.0.2:30000 joins, healthy
    first = params(router, url="http://10.0.0.1:30000", state="absent", lease_dir=str(tmp_path), lease=TIMEOUTS,
                   min_in_service=1, slot_timeout=0)
    changed, listed, _, _ = worker.leased(first)
    assert changed and [w["url"] for w in listed] == ["http://10.0.0.2:30000"]
    second = dict(first, url="http://10.0.0.2:30000")
    with pytest.raises(worker.NoSlot, match=r"no drain slot for http://10.0.0.2:30000 in 0s: the router lists 0 "
                                            r"healthy worker\(s\) besides it \(none\); fleet_min_in_service keeps 1"):
        worker.leased(second)
    assert leases.read(str(tmp_path), "http://10.0.0.2:30000") is None, "no lease: it never left"
    assert [w["url"] for w in worker.workers(router.url, KEY)] == ["http://10.0.0.2:30000"]
    worker.leased(dict(first, state="present"))  # the first is back and healthy: the slot is free
    changed, listed, _, _ = worker.leased(second)
    assert changed and [w["url"] for w in listed] == ["http://10.0.0.1:30000"]


def test_a_second_run_waits_for_the_slot_lock_and_says_so(router, tmp_path):  # noqa: F811
    import fcntl
    worker.ensure(params(router))
    out = params(router, url="http://10.0.0.1:30000", state="absent", lease_dir=str(tmp_path), lease=TIMEOUTS,
                 min_in_service=1, slot_timeout=4)
    held = os.open(str(tmp_path / worker.SLOT_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # another run is taking its worker out
    clock, naps = [0.0], []

    def sleep(seconds):
        naps.append(seconds)
        clock[0] += seconds
    try:
        with pytest.raises(worker.NoSlot, match="in 4s: another run held the slot lock"):
            worker.leased(out, sleep=sleep, clock=lambda: clock[0])
        assert naps == [2, 2]
        fcntl.flock(held, fcntl.LOCK_UN)  # it has: the slot is there to take
        assert worker.leased(out)[0] is True
    finally:
        os.close(held)


def test_a_floor_of_zero_takes_no_slot_and_check_mode_none(router, tmp_path):  # noqa: F811
    out = params(router, url="http://10.0.0.1:30000", state="absent", lease_dir=str(tmp_path), lease=TIMEOUTS,
                 min_in_service=5, slot_timeout=0)
    assert worker.leased(out, check_mode=True)[0] is True  # check mode says it would leave; it looks at no slot
    assert worker.leased(dict(out, min_in_service=0))[0] is True
    assert not (tmp_path / worker.SLOT_LOCK).exists()
