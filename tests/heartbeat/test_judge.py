"""The judge: a writer is dead when no new beat appeared for its own bound on the judge's clock.

Fake clocks throughout: ``mono`` is the judge's monotonic clock, ``wall`` its wall clock; the
heartbeat files carry whatever time the writer's clock said, and mtimes are set at will.
"""
from __future__ import annotations

import json
import logging
import os

import pytest

from multiwriter.errors import ConfigError
from multiwriter.heartbeat import HeartbeatClient
from multiwriter.heartbeat.client import is_lapsed
from multiwriter.heartbeat.judge import ALIVE, LAPSED, UNDECIDED, HeartbeatJudge, read_beat
from multiwriter.instant_time import format_time
from multiwriter.storage import Storage
from multiwriter.format.layout import heartbeat_path

NOW = 1_700_000_000.0
T = format_time(NOW - 5)


class Clock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = NOW

    def sleep(self, s: float) -> None:
        self.mono += s
        self.wall += s


@pytest.fixture()
def storage(tmp_path):
    return Storage(str(tmp_path))


@pytest.fixture()
def clock():
    return Clock()


def judge(storage, clock, **kw) -> HeartbeatJudge:
    kw.setdefault("interval_s", 10.0)
    kw.setdefault("tolerable_misses", 2)
    return HeartbeatJudge(storage, monotonic=lambda: clock.mono, wall=lambda: clock.wall, sleep=clock.sleep, **kw)


def beat(storage, t: str = T, *, seq: int | None, ts: float, interval_s: float | None = 1.0, misses: int | None = 1,
         writer: str = "w", mtime: float | None = None, **extra) -> None:
    body: dict = {"ts_ms": int(ts * 1000), "writer_id": writer, **extra}
    if seq is not None:
        body.update(seq=seq, beater="b1")
    if interval_s is not None:
        body["interval_ms"] = int(interval_s * 1000)
    if misses is not None:
        body["tolerable_misses"] = misses
    storage.write_bytes(heartbeat_path(t), json.dumps(body).encode())
    if mtime is not None:
        os.utime(storage.abs(heartbeat_path(t)), (mtime, mtime))


def test_the_client_records_its_settings_and_a_growing_sequence(storage):
    hb = HeartbeatClient(storage, writer_id="w", interval_s=2.5, tolerable_misses=3)
    hb.start(T)
    try:
        first = read_beat(storage, T)
        hb._beat(T)  # noqa: SLF001 -- one more beat now, not after 2.5 s
        second = read_beat(storage, T)
    finally:
        hb.close()
    body = json.loads(storage.read_bytes(heartbeat_path(T))) if storage.exists(heartbeat_path(T)) else None
    assert body is None, "closed: the file is gone"
    assert (first.interval_s, first.tolerable_misses, first.bound_s) == (2.5, 3, 10.0)
    assert second.seq == first.seq + 1 and second.key != first.key
    assert first.writer_id == "w" and first.ts_s is not None


@pytest.mark.parametrize("writer_skew", [-60.0, 0.0, 60.0, 3600.0])
@pytest.mark.parametrize("store_skew", [-60.0, 0.0, 60.0])
def test_a_beating_writer_is_alive_whatever_the_clocks_say(storage, clock, writer_skew, store_skew):
    j = judge(storage, clock)
    for seq in range(10):  # a beat every second, bound 2 s; the judge looks every 0.7 s
        beat(storage, seq=seq, ts=clock.wall + writer_skew, mtime=clock.wall + store_skew)
        for _ in range(2):
            assert not j.is_lapsed(T)
            clock.sleep(0.5)
    assert j.observe(T).verdict == ALIVE
    if writer_skew == store_skew == -60.0:  # the wall-clock rule on a judge 60 s ahead: dead at every look
        assert is_lapsed(storage, T, 1.0, 1, now=clock.wall)


def test_stopped_beats_lapse_after_the_writers_own_bound_on_the_judges_clock(storage, clock):
    j = judge(storage, clock)  # default bound 30 s; the writer says 1 s x (1 + 1)
    beat(storage, seq=1, ts=NOW + 3600)  # a writer clock an hour ahead: its beat looks "from the future"
    assert j.observe(T).verdict == UNDECIDED, "a first sighting decides nothing"
    clock.sleep(1.9)
    assert j.observe(T).verdict == UNDECIDED
    clock.sleep(0.2)
    o = j.observe(T)
    assert o.verdict == LAPSED and o.bound_s == 2.0 and o.bound_from == "writer"
    beat(storage, seq=2, ts=NOW + 3600)  # it beat again: alive again (a paused writer's fence refuses its commit)
    assert j.observe(T).verdict == ALIVE


def test_a_slow_writers_bound_is_its_own_not_the_judges(storage, clock):
    j = judge(storage, clock, interval_s=1.0, tolerable_misses=1)  # the judge's default bound: 2 s
    beat(storage, seq=1, ts=NOW - 50, interval_s=60.0, misses=2)  # beats every 60 s: bound 180 s
    j.observe(T)
    clock.sleep(179)
    assert not j.is_lapsed(T)
    clock.sleep(2)
    assert j.is_lapsed(T)


def test_beats_without_settings_or_sequence_use_the_judges_bound_and_their_mtime(storage, clock):
    j = judge(storage, clock, interval_s=1.0, tolerable_misses=2)
    rel = heartbeat_path(T)
    storage.write_bytes(rel, b"")  # Hudi's JVM writer: an empty file, its mtime the beat
    os.utime(storage.abs(rel), (NOW - 1000, NOW - 1000))
    j.observe(T)
    clock.sleep(2.0)
    os.utime(storage.abs(rel), (NOW - 999, NOW - 999))  # a new beat, with a store clock far behind
    assert j.observe(T).verdict == ALIVE
    clock.sleep(3.1)
    o = j.observe(T)
    assert o.verdict == LAPSED and o.bound_s == 3.0 and o.bound_from == "judge"
    storage.write_bytes(rel, b"not json")  # an unreadable file: it changed, so it is a beat
    assert j.observe(T).verdict == ALIVE


def test_a_missing_heartbeat_is_lapsed_once_observed_missing_for_the_bound(storage, clock):
    j = judge(storage, clock, interval_s=1.0, tolerable_misses=1)
    assert j.observe(T).verdict == UNDECIDED
    clock.sleep(2.1)
    assert j.is_lapsed(T)
    beat(storage, seq=1, ts=NOW, interval_s=5.0, misses=1)  # it was only slow to start
    assert j.observe(T).verdict == ALIVE
    storage.delete(heartbeat_path(T))  # finished (or died): missing for the writer's bound of 10 s
    j.observe(T)
    clock.sleep(9.9)
    assert not j.is_lapsed(T)
    clock.sleep(0.2)
    assert j.is_lapsed(T)


def test_decide_polls_until_each_instant_changes_or_its_bound_passes(storage, clock):
    dead, live, slow = format_time(NOW - 9), format_time(NOW - 8), format_time(NOW - 7)
    beat(storage, dead, seq=1, ts=NOW, interval_s=1.0, misses=2)
    beat(storage, live, seq=1, ts=NOW, interval_s=1.0, misses=2)
    beat(storage, slow, seq=1, ts=NOW, interval_s=60.0, misses=2)
    j = judge(storage, clock, max_observe_s=20.0)
    real_sleep = clock.sleep

    def sleep(s: float) -> None:
        real_sleep(s)
        if clock.mono - 1000.0 > 1.0:
            beat(storage, live, seq=int(clock.mono * 10), ts=clock.wall, interval_s=1.0, misses=2)

    j.sleep = sleep
    out = j.decide([dead, live, slow])
    assert {t: o.verdict for t, o in out.items()} == {dead: LAPSED, live: ALIVE, slow: UNDECIDED}
    assert 20.0 <= clock.mono - 1000.0 < 20.5, "the slow one is watched up to the cap, then left to a later run"
    assert j.decide([dead, live])[dead].verdict == LAPSED, "decided instants cost one read"


def test_decide_returns_once_all_are_decided(storage, clock):
    dead = format_time(NOW - 9)
    beat(storage, dead, seq=1, ts=NOW, interval_s=1.0, misses=2)
    j = judge(storage, clock)
    assert j.decide([dead])[dead].verdict == LAPSED
    assert 3.0 < clock.mono - 1000.0 < 3.3, "a dead writer beating every second is decided in about 3 s"


def test_skew_is_reported_when_a_new_beat_is_seen_and_warned_beyond_the_threshold(storage, clock, caplog):
    seen = []
    j = judge(storage, clock, on_skew=lambda w, s: seen.append((w, round(s, 3))), skew_warn_s=5.0)
    beat(storage, seq=1, ts=clock.wall - 60, writer="behind")
    j.observe(T)
    assert seen == [], "a first sighting: the beat may be old, its skew unknown"
    clock.sleep(0.5)
    beat(storage, seq=2, ts=clock.wall - 60.25, writer="behind")
    with caplog.at_level(logging.WARNING, logger="multiwriter.heartbeat.judge"):
        o = j.observe(T)
    assert seen == [("behind", -60.25)] and o.skew_s == pytest.approx(-60.25)
    assert "clock skew" in caplog.text and "behind" in caplog.text
    assert j.skews == {"behind": pytest.approx(-60.25)}

    caplog.clear()
    t2 = format_time(NOW - 1)
    beat(storage, t2, seq=1, ts=clock.wall, writer="close")
    j.observe(t2)
    clock.sleep(1.0)
    beat(storage, t2, seq=2, ts=clock.wall - 1.0, writer="close")  # written right after the last look
    with caplog.at_level(logging.WARNING, logger="multiwriter.heartbeat.judge"):
        j.observe(t2)
    assert "close" not in caplog.text, "within the threshold once the gap between looks is allowed for"


def test_status_judges_by_the_writers_bound_and_warns_about_skew(trips_table):
    import time

    import multiwriter as mw
    from multiwriter.status import collect, render
    from multiwriter.transaction import Transaction

    lock = mw.InProcessLock().for_table(trips_table.table_id, trips_table.storage)
    t = Transaction(trips_table, lock, writer_id="behind").begin().requested_time
    hb = HeartbeatClient(trips_table.storage, writer_id="behind", interval_s=1.0, tolerable_misses=1,
                         clock=lambda: time.time() - 60)  # a writer whose clock is a minute behind
    hb.start(t)
    try:
        s = collect(trips_table, heartbeat_interval_s=1.0, heartbeat_tolerable_misses=0, observe_s=5.0)
    finally:
        hb.close()
    (f,) = s.in_flight
    assert f.verdict == ALIVE and f.bound_s == 2.0 and f.bound_from == "writer" and f.writer == "behind"
    assert f.skew_s is not None and -62 < f.skew_s < -58
    assert len(s.warnings) == 1 and "clock skew" in s.warnings[0] and "behind" in s.warnings[0]
    assert "WARNING: clock skew" in render(s)


@pytest.mark.parametrize("settings", [
    '"interval_ms": 1e300, "tolerable_misses": 2',  # an instant that would never lapse
    '"interval_ms": 1000, "tolerable_misses": ' + "1" + "0" * 400,  # 10^400: past any float
    '"interval_ms": ' + "1" + "0" * 400 + ', "tolerable_misses": 2',
    '"interval_ms": 3600001, "tolerable_misses": 2',  # just past the largest interval a writer may have
    '"interval_ms": 1000, "tolerable_misses": 101',
    '"interval_ms": -5, "tolerable_misses": 2',
])
def test_a_beat_with_settings_out_of_bounds_is_judged_by_the_judges_own(storage, clock, settings, caplog):
    j = judge(storage, clock, interval_s=1.0, tolerable_misses=1)  # the judge's bound: 2 s
    rel = heartbeat_path(T)
    storage.write_bytes(rel, ('{"ts_ms": 1, "seq": 1, "beater": "b", "writer_id": "w", ' + settings + "}").encode())
    with caplog.at_level(logging.WARNING, logger="multiwriter.heartbeat.judge"):
        assert j.observe(T).verdict == UNDECIDED
    assert rel in caplog.text and "judged by the judge's own settings" in caplog.text
    clock.sleep(2.1)
    o = j.observe(T)
    assert o.verdict == LAPSED and o.bound_s == 2.0 and o.bound_from == "judge"
    assert j.max_bound_s() == 2.0


def test_the_largest_settings_a_writer_may_have_are_still_its_own(storage, clock):
    j = judge(storage, clock, interval_s=1.0, tolerable_misses=1)
    beat(storage, seq=1, ts=NOW, interval_s=3600.0, misses=100)
    o = j.observe(T)
    assert o.bound_from == "writer" and o.bound_s == 3600.0 * 101
    with pytest.raises(ConfigError, match="interval_s=3601"):
        HeartbeatClient(storage, writer_id="w", interval_s=3601.0, tolerable_misses=1)
    with pytest.raises(ConfigError, match="tolerable_misses=101"):
        HeartbeatClient(storage, writer_id="w", interval_s=1.0, tolerable_misses=101)


def test_the_wall_clock_rule_survives_a_timestamp_past_any_float(storage):
    storage.write_bytes(heartbeat_path(T), ('{"ts_ms": 1' + "0" * 400 + "}").encode())
    assert not is_lapsed(storage, T, 1.0, 1, now=NOW - 5)  # judged by the file's mtime
