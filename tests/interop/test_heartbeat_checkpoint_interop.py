"""Heartbeats and streaming checkpoints as Hudi's JVM writers read them.

Oracles: Hudi's rules restated from its sources, on plain files: ``HoodieHeartbeatUtils`` judges
``.hoodie/.heartbeat/<T>`` by its modification time alone (a missing file counts as a beat at
time 0) against ``interval_in_ms * tolerable.misses``; ``CommitUtils`` finds a sink's checkpoint
by scanning completed write instants newest first by instant time, in the JSON map of string to
string under ``_hudi_streaming_sink_checkpoint``, taking the first map that names the sink.
Commit files are read with fastavro.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import fastavro

import multiwriter as mw
from multiwriter.config import WriterConfig
from multiwriter.heartbeat.client import HeartbeatClient, is_lapsed
from multiwriter.instant_time import format_time
from multiwriter.storage import Storage
from tests.conftest import trips

CKPT = "_hudi_streaming_sink_checkpoint"


def hudi_expired(root: str, instant: str, interval_ms: int, misses: int, now_s: float) -> bool:
    """HoodieHeartbeatUtils.isHeartbeatExpired, on a local table."""
    f = Path(root, ".hoodie", ".heartbeat", instant)
    last_ms = int(f.stat().st_mtime * 1000) if f.exists() else 0
    return int(now_s * 1000) - last_ms > interval_ms * misses


def test_both_judges_agree_on_our_heartbeats_and_on_hudis(tmp_path):
    # the keys a JVM writer is given, mapped onto ours: the same expiry bound on both sides
    keys = {"hoodie.client.heartbeat.interval_in_ms": "1000", "hoodie.client.heartbeat.tolerable.misses": "3"}
    cfg = WriterConfig.from_options(keys, lock=mw.InProcessLock())
    interval_ms, misses = 1000, 3
    storage = Storage(str(tmp_path))
    ours = format_time(time.time())
    hb = HeartbeatClient(storage, writer_id="py", interval_s=cfg.heartbeat_interval_s,
                         tolerable_misses=cfg.heartbeat_tolerable_misses)
    hb.start(ours)
    try:
        mtime = Path(tmp_path, ".hoodie", ".heartbeat", ours).stat().st_mtime
        for age in (0.0, 1.5, 2.9, 3.1, 10.0):  # the bound is 3 s on both sides
            now = mtime + age
            assert is_lapsed(storage, ours, cfg.heartbeat_interval_s, cfg.heartbeat_tolerable_misses, now=now) \
                == hudi_expired(str(tmp_path), ours, interval_ms, misses, now), age
    finally:
        hb.close()

    # a JVM writer's heartbeat: an empty file, rewritten every interval
    theirs = format_time(time.time() - 60)
    f = Path(tmp_path, ".hoodie", ".heartbeat", theirs)
    f.write_bytes(b"")
    now = time.time()
    for age in (0.5, 2.9, 3.1, 30.0):
        os.utime(f, (now - age, now - age))
        assert is_lapsed(storage, theirs, cfg.heartbeat_interval_s, cfg.heartbeat_tolerable_misses, now=now) \
            == hudi_expired(str(tmp_path), theirs, interval_ms, misses, now), age

    # the one documented difference: a young instant without a heartbeat file (not written yet,
    # or just deleted at completion) is alive for us and expired for Hudi
    young = format_time(time.time())
    assert not is_lapsed(storage, young, cfg.heartbeat_interval_s, cfg.heartbeat_tolerable_misses)
    assert hudi_expired(str(tmp_path), young, interval_ms, misses, time.time())


def _hudi_checkpoint(root: str, sink: str) -> str | None:
    """CommitUtils.getValidCheckpointForCurrentWriter over the completed commits of a local table."""
    timeline = Path(root, ".hoodie", "timeline")
    done = sorted((p for p in timeline.iterdir() if p.suffix in (".commit", ".replacecommit")),
                  key=lambda p: p.name.split("_")[0], reverse=True)
    for p in done:
        with p.open("rb") as fh:
            (rec,) = list(fastavro.reader(fh))
        raw = (rec.get("extraMetadata") or {}).get(CKPT)
        if raw:
            value = json.loads(raw)
            assert all(isinstance(v, str) for v in value.values()), value  # Jackson reads Map<String, String>
            if sink in value:
                return value[sink]
    return None


def test_our_checkpoints_read_as_hudis_sink_reads_them(trips_table, table_path):
    lock = mw.InProcessLock()
    a, b = mw.WriterConfig(writer_id="a", lock=lock), mw.WriterConfig(writer_id="b", lock=lock)
    mw.write(trips([1]), table_path, a, batch_id=3)
    for k in range(4):
        mw.write(trips([2 + k]), table_path, b, batch_id=10 + k)
    mw.write(trips([9]), table_path, mw.WriterConfig(writer_id="c", lock=lock))  # a write without a batch id
    assert _hudi_checkpoint(table_path, "a") == "3"
    assert _hudi_checkpoint(table_path, "b") == "13"
    assert _hudi_checkpoint(table_path, "c") is None
