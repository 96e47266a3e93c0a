"""Bad input gets a clear, typed error and leaves the table unchanged."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pyarrow as pa
import pytest

import multiwriter as mw
from multiwriter import errors
from tests.conftest import trips


def snapshot_of(path: str) -> dict[str, bytes]:
    """Every file under the table (and its parent) with its bytes: 'unchanged' means equal."""
    root = Path(path).parent
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and "ck" not in p.parts}


@pytest.fixture()
def seeded(trips_table, table_path):
    mw.write(trips(range(5)), table_path, mw.WriterConfig(lock=mw.InProcessLock(), writer_id="seed"))
    return table_path


def cfg(**kw):
    return mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w", **kw)


@pytest.mark.parametrize("bad", [None, ""])
def test_null_or_empty_key(seeded, bad):
    before = snapshot_of(seeded)
    batch = trips(range(3)).set_column(0, "id", pa.array(["a", bad, "c"], pa.string()))
    with pytest.raises(errors.InvalidRecordError, match="null or empty record key"):
        mw.write(batch, seeded, cfg())
    assert snapshot_of(seeded) == before


def test_missing_column_strict(seeded):
    before = snapshot_of(seeded)
    with pytest.raises(errors.SchemaMismatchError, match="value"):
        mw.write(trips(range(3)).drop_columns(["value"]), seeded, cfg())  # refused by default, as in Hudi
    assert snapshot_of(seeded) == before


@pytest.mark.parametrize("column", ["ts", "date"])
def test_missing_required_column(seeded, column):
    """The ordering and partition fields may never be omitted, even when other columns may."""
    before = snapshot_of(seeded)
    with pytest.raises(errors.SchemaMismatchError, match=column):
        mw.write(trips(range(3)).drop_columns([column]), seeded, cfg())
    assert snapshot_of(seeded) == before


def test_allow_missing_columns_is_validated():
    with pytest.raises(errors.ConfigError, match="allow_missing_columns"):
        cfg(allow_missing_columns="yes")


def test_retyped_column(seeded):
    before = snapshot_of(seeded)
    batch = trips(range(3)).set_column(3, "value", pa.array(["x", "y", "z"]))
    with pytest.raises(errors.SchemaMismatchError, match="value"):
        mw.write(batch, seeded, cfg())
    assert snapshot_of(seeded) == before


@pytest.mark.parametrize("value", ["../../etc", "a/b", "..", ".hoodie", "x\x00y", "a\\b", "z" * 300])
def test_unsafe_partition_values(seeded, value):
    before = snapshot_of(seeded)
    outside = Path(seeded).parent
    listing = set(os.listdir(outside))
    with pytest.raises(errors.InvalidRecordError, match="partition value"):
        mw.write(trips(range(2), date=value), seeded, cfg())
    assert snapshot_of(seeded) == before
    assert set(os.listdir(outside)) == listing
    assert not Path("/etc/.hoodie_partition_metadata").exists()


def test_truncated_instant_file_is_a_clear_format_error(seeded):
    tl = mw.Table.open(seeded).timeline()
    f = Path(seeded) / tl.path_of(tl.completed()[-1])
    f.write_bytes(f.read_bytes()[:40])
    # a process that has not read it yet (one that had keeps what it read: a completed
    # instant file never changes)
    from multiwriter.table.timeline import forget_cache

    forget_cache()
    with pytest.raises(errors.TableFormatError, match=f.name):
        mw.Table.open(seeded).read()
    with pytest.raises(errors.TableFormatError, match=f.name):
        mw.write(trips(range(2)), seeded, cfg())


def test_corrupt_properties(seeded):
    p = Path(seeded) / ".hoodie" / "hoodie.properties"
    p.write_text(p.read_text().replace("hoodie.table.version=8", "hoodie.table.version=99"))
    with pytest.raises(errors.TableFormatError, match="version 99"):
        mw.Table.open(seeded)


def test_path_that_is_not_a_table(tmp_path):
    with pytest.raises(errors.TableNotFoundError, match="create it"):
        mw.Table.open(str(tmp_path))
    with pytest.raises(errors.TableNotFoundError):
        mw.write(trips(range(1)), str(tmp_path), cfg())


@pytest.mark.parametrize("wid", ["a/b", "", "x" * 200, "../up", "sp ace", "ü", "w\n"])
def test_unsafe_writer_ids(wid):
    with pytest.raises(errors.ConfigError, match="writer_id"):
        mw.WriterConfig(lock=mw.InProcessLock(), writer_id=wid)


@pytest.mark.parametrize("kw", [
    {"heartbeat_interval_s": 0.1}, {"heartbeat_tolerable_misses": -1}, {"max_conflict_retries": -2},
    {"operation": "merge"}, {"lock_timeout_s": 0}, {"target_file_size_bytes": 10}, {"executor": "gpu"},
    {"lock": "zookeeper"}, {"heartbeat_interval_s": True},
])
def test_config_out_of_range(kw):
    with pytest.raises(errors.ConfigError):
        mw.WriterConfig(**{"lock": mw.InProcessLock(), "writer_id": "w", **kw})


def test_create_with_other_settings_is_a_config_error(trips_table, table_path):
    from tests.conftest import TRIPS_SCHEMA

    again = mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts")
    assert again.config.same_settings(trips_table.config)
    with pytest.raises(errors.ConfigError, match="other settings"):
        mw.Table.create(table_path, name="trips", schema=TRIPS_SCHEMA, record_key="value")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_zookeeper_unreachable_at_start(seeded):
    before = snapshot_of(seeded)
    lock = mw.ZooKeeperLock(connect=f"127.0.0.1:{_closed_port()}", connection_timeout_s=2.0, acquire_timeout_s=2.0)
    with pytest.raises(errors.LockError, match="127.0.0.1"):
        mw.write(trips(range(2)), seeded, mw.WriterConfig(writer_id="w", lock=lock, max_conflict_retries=0))
    lock.close()
    assert snapshot_of(seeded) == before
