"""Claims (``multiwriter.write.claims``): a writer that lost a race on file groups claims them for
its retry, and a writer about to rewrite one of them waits while an older claim's instant is
pending, so two writers of one file group take turns instead of one winning every race.

A claim only delays a commit before its lock: stale claims (their instant not pending), claims
on other groups and garbage are ignored, and nothing waits longer than its bound.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import multiwriter as mw
from multiwriter import faults
from multiwriter.errors import UnsafePathError
from multiwriter.format import layout
from multiwriter.transaction import Transaction
from multiwriter.write import claims
from multiwriter.write.writer import commit_metadata
from tests.conftest import trips
from tests.oracle import hudi_read, rows


def _writer(path: str, wid: str, **kw) -> mw.Writer:
    return mw.Writer(mw.Table.open(path), mw.WriterConfig(writer_id=wid, lock=mw.InProcessLock(), executor="driver",
                                                          **kw))


def _group(path: str) -> tuple[str, str]:
    tl = mw.Table.open(path).timeline()
    [stat] = tl.commit_metadata(tl.completed_writes()[-1]).all_stats()
    return stat.partition_path, stat.file_id


def _pending_instant(path: str) -> Transaction:
    t = mw.Table.open(path)
    txn = Transaction(t, mw.InProcessLock().for_table(t.table_id), writer_id="claimant")
    txn.begin()
    return txn


def test_claims_round_trip_and_anything_else_is_ignored(trips_table, table_path):
    s = trips_table.storage
    c = claims.Claim("w1", frozenset({("2024-01-01", "g1"), ("p", "g2")}), 12.5, "20261130000000123")
    claims.put(s, c)
    s.write_bytes(f"{layout.CLAIMS_DIR}/junk.json", b"{not json")
    s.write_bytes(f"{layout.CLAIMS_DIR}/w2.json", b'{"writer": "w2", "groups": [], "since": 1, "instant": "../x"}')
    s.write_bytes(f"{layout.CLAIMS_DIR}/w3.json", b'{"writer": "w3", "groups": [], "since": "NaN", "instant": "20261130000000123"}')
    assert claims.read_all(s) == [c]
    claims.drop(s, "w1")
    assert [x.writer for x in claims.read_all(s)] == []
    for bad in ("..", "a/b", "", "x" * 200):
        with pytest.raises(UnsafePathError):
            layout.claim_path(bad)


def test_a_rewrite_waits_while_an_older_claims_instant_is_pending(trips_table, table_path):
    mw.write(trips(range(5)), table_path, mw.WriterConfig(writer_id="seed", lock=mw.InProcessLock()))
    group = _group(table_path)
    claimant = _pending_instant(table_path)
    t = claimant.instant.requested_time
    claims.put(trips_table.storage, claims.Claim("claimant", frozenset({group}), time.time(), t))
    w = _writer(table_path, "w")
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(r=w.write(trips(range(3), value=2.0))))
    try:
        thread.start()
        time.sleep(0.5)
        assert "r" not in out, "the rewrite waited for the older claim"
        # the claimant lands (nothing of the group's rows: it rewrote none in the end)
        meta = commit_metadata([], trips_table.schema(claimant.base_timeline), trips_table.name, "upsert", None)
        claimant.commit(meta)
        thread.join(30)
    finally:
        w.close()
    r = out["r"]
    assert r.protocol["claim_wait"] >= 0.4 and r.instant.completion_time > claimant.instant.completion_time
    assert r.conflicts == 0
    expected = [(str(k), 2.0 if k < 3 else 1.0) for k in range(5)]
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == expected
    assert rows(hudi_read(table_path), ["id", "value"]) == expected


def test_stale_claims_claims_on_other_groups_and_long_claims_do_not_hold_a_commit(trips_table, table_path):
    mw.write(trips(range(5)), table_path, mw.WriterConfig(writer_id="seed", lock=mw.InProcessLock()))
    group = _group(table_path)
    s = trips_table.storage
    claims.put(s, claims.Claim("gone", frozenset({group}), 1.0, "20200101000000000"))  # its instant: not pending
    claimant = _pending_instant(table_path)
    claims.put(s, claims.Claim("other", frozenset({("2024-01-01", "another-group")}), 1.0,
                               claimant.instant.requested_time))
    w = _writer(table_path, "w")
    try:
        assert w.write(trips(range(2), value=2.0)).protocol["claim_wait"] == 0.0
        claims.put(s, claims.Claim("slow", frozenset({group}), 1.0, claimant.instant.requested_time))
        w2 = _writer(table_path, "w2", heartbeat_interval_s=1.0, heartbeat_tolerable_misses=1)
        try:  # a claimant that never lands holds a rewrite for the heartbeat bound at most, and once
            r = w2.write(trips(range(2), value=3.0))
            assert 1.9 <= r.protocol["claim_wait"] < 5.0
            assert w2.write(trips(range(2), value=4.0)).protocol["claim_wait"] == 0.0
        finally:
            w2.close()
    finally:
        w.close()
        claimant.abort()


def test_a_lost_race_claims_its_groups_for_the_retry_and_the_claim_goes_when_it_lands(trips_table, table_path,
                                                                                     monkeypatch):
    mw.write(trips(range(5)), table_path, mw.WriterConfig(writer_id="seed", lock=mw.InProcessLock()))
    group = _group(table_path)
    winner, loser = _writer(table_path, "winner"), _writer(table_path, "loser", retry_backoff_s=0.01)
    put: list[claims.Claim] = []
    original_put, original_point = claims.put, faults.point
    monkeypatch.setattr(claims, "put", lambda storage, c: put.append(c) or original_put(storage, c))
    raced = []

    def point(name: str) -> None:  # the winner commits while the loser's first attempt writes
        if name == "after-data-files" and threading.current_thread().name == "loser" and not raced:
            raced.append("racing")  # before the winner's own write passes this point
            winner.write(trips(range(5), value=5.0))
        original_point(name)

    monkeypatch.setattr(faults, "point", point)
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(r=loser.write(trips(range(2), value=7.0))), name="loser")
    try:
        thread.start()
        thread.join(60)
    finally:
        winner.close()
        loser.close()
    r = out["r"]
    assert r.conflicts == 1 and r.attempts == 2
    [c] = put
    assert c.writer == "loser" and c.groups == {group} and c.instant == r.instant.requested_time
    assert claims.read_all(trips_table.storage) == [], "dropped once the retry landed"
    assert not Path(table_path, layout.claim_path("loser")).exists()
    expected = [(str(k), 7.0 if k < 2 else 5.0) for k in range(5)]
    assert rows(mw.Table.open(table_path).read(), ["id", "value"]) == expected


def test_a_claims_store_that_fails_never_fails_a_batch(trips_table, table_path, monkeypatch):
    """Claims only order writers: a store refusing their files leaves the batch to land."""
    mw.write(trips(range(5)), table_path, mw.WriterConfig(writer_id="seed", lock=mw.InProcessLock()))
    claims.put(trips_table.storage, claims.Claim("other", frozenset({_group(table_path)}), 1.0, "20261130000000123"))
    storage_type = type(trips_table.storage)
    original_read, original_write = storage_type.read_bytes, storage_type.write_bytes

    def read_bytes(self, rel):
        if rel.startswith(layout.CLAIMS_DIR):
            raise OSError("claims unreadable")
        return original_read(self, rel)

    def write_bytes(self, rel, data):
        if rel.startswith(layout.CLAIMS_DIR):
            raise OSError("claims unwritable")
        return original_write(self, rel, data)

    monkeypatch.setattr(storage_type, "read_bytes", read_bytes)
    monkeypatch.setattr(storage_type, "write_bytes", write_bytes)
    w = _writer(table_path, "w")
    try:
        r = w.write(trips(range(3), value=4.0))
        w._lose([_group(table_path)])  # as after a lost race: its next attempt writes a claim
        r2 = w.write(trips(range(3), value=5.0))
    finally:
        w.close()
    assert r.instant is not None and r2.instant is not None and r.protocol["claim_wait"] == 0.0
    assert rows(mw.Table.open(table_path).read(), ["id", "value"])[:3] == [(str(k), 5.0) for k in range(3)]


def test_one_wait_for_a_claimant_is_bounded_whatever_its_heartbeat(trips_table, table_path, monkeypatch):
    """A claimant that died keeps its instant pending until the companion job rolls it back:
    a writer waits for it once, and no longer than ``MAX_WAIT_S``, even with a long heartbeat."""
    monkeypatch.setattr(claims, "MAX_WAIT_S", 0.5)
    mw.write(trips(range(5)), table_path, mw.WriterConfig(writer_id="seed", lock=mw.InProcessLock()))
    claimant = _pending_instant(table_path)
    claims.put(trips_table.storage, claims.Claim("dead", frozenset({_group(table_path)}), 1.0,
                                                 claimant.instant.requested_time))
    w = _writer(table_path, "w", heartbeat_interval_s=30.0)
    try:
        waits = [w.write(trips(range(2), value=float(v))).protocol["claim_wait"] for v in (2, 3)]
    finally:
        w.close()
        claimant.abort()
    assert 0.45 <= waits[0] < 2.0 and waits[1] == 0.0
