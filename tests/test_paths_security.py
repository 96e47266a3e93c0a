"""Nothing in a table's own files makes us read, write or delete outside that table.

Each case plants what someone who can write the table's ``.hoodie/`` folder could plant, runs
the companion job, readers and writers, and checks the sentinels beside the table (read back
from the file system or the bucket, not through our storage layer) and the typed error naming
the file the bad value came from.
"""
from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import multiwriter as mw
from multiwriter import errors
from multiwriter.instant_time import next_after
from multiwriter.storage import Storage
from multiwriter.format import instant as inst
from multiwriter.table import properties as props
from multiwriter.table import timeline as tlmod
from multiwriter.table.metadata import encode
from tests.cleaner.conftest import HB, MISSES, wait_lapsed
from tests.conftest import TRIPS_SCHEMA, trips
from tests.oracle import rows

COLS = ["id", "date", "ts", "value"]


def _lock() -> mw.InProcessLock:
    return mw.InProcessLock()


def _cfg(writer_id: str = "w") -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=writer_id, lock=_lock(), executor="driver",
                           heartbeat_interval_s=HB, heartbeat_tolerable_misses=MISSES)


def _create(path: str, **kw) -> mw.Table:
    kw.setdefault("partition_by", ["date"])
    return mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", ordering_field="ts", **kw)


def _cleaner(path: str) -> mw.Cleaner:
    return mw.Cleaner(path, lock=_lock(), heartbeat_interval_s=HB, heartbeat_tolerable_misses=MISSES,
                      clustering=None)


def _plant_rollback(table: mw.Table, target: str) -> str:
    """A pending rollback whose plan targets ``target``, left by a cleaner that died (no heartbeat)."""
    times = [x for i in table.timeline().instants for x in (i.requested_time, i.completion_time) if x]
    r = next_after(max(times))
    plan = {"instantToRollback": {"commitTime": target, "action": inst.COMMIT}, "RollbackRequests": [], "version": 1}
    tlmod.create_requested(table.storage, table.config, r, inst.ROLLBACK, encode("rollback_plan", plan))
    return r


def _sentinels(root) -> dict[str, bytes]:
    """Files beside the table: a folder, a lone file and a whole other Hudi table."""
    out = {}
    for rel in ("beside/keep.txt", "outside.txt"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"sentinel {rel}".encode())
        out[rel] = p.read_bytes()
    other = _create(str(root / "other"))
    mw.write(trips(range(3)), other.path, _cfg("other"))
    for dirpath, _dirs, files in os.walk(root / "other"):
        for f in files:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = fh.read()
    return out


def _still_there(root, sentinels: dict[str, bytes]) -> None:
    for rel, data in sentinels.items():
        assert (root / rel).is_file(), f"{rel} beside the table was deleted"
        assert (root / rel).read_bytes() == data


# -- 1. a rollback plan's target ------------------------------------------------------------------


@pytest.mark.parametrize("target", ["../../..", "../../../outside.txt", "../../../other/.hoodie", "/etc"])
def test_a_rollback_plan_targeting_outside_the_table_deletes_nothing_there(tmp_path, target):
    table = _create(str(tmp_path / "trips"))
    mw.write(trips(range(4)), table.path, _cfg())
    sentinels = _sentinels(tmp_path)
    r = _plant_rollback(table, target)
    cleaner = _cleaner(table.path)
    try:
        wait_lapsed(table, r, cleaner=cleaner)
        report = cleaner.run_once(raise_errors=False)
    finally:
        cleaner.close()
    _still_there(tmp_path, sentinels)
    assert rows(table.read(), COLS) == rows(trips(range(4)), COLS), "the table's own rows are intact"
    plan_file = f"{r}.rollback.requested"
    assert any(plan_file in e and "instant time" in e for e in report.errors), report.errors
    assert report.rolled_back == [] and report.resumed == []
    # the companion job went on with its other steps: archival and the sweep ran (no error from them)
    assert all(plan_file in e for e in report.errors), report.errors
    with pytest.raises(errors.TableFormatError, match=plan_file) as e:
        from multiwriter.cleaner import rollback

        # moved aside, so that it stops nothing else (see multiwriter.cleaner.plan_checks)
        assert table.timeline().find(r, inst.ROLLBACK) is None
        rollback.RollbackPlan.from_bytes(r, table.storage.read_bytes(f".hoodie/.quarantine/{plan_file}"),
                                         source=f".hoodie/timeline/{plan_file}")
    assert type(e.value).__name__ == "UnsafePathError"


def test_a_rollback_plan_targeting_outside_the_table_on_s3_deletes_nothing_there(s3_server):
    bucket = s3_server()
    name = bucket[len("s3://"):]
    client = s3_server.client
    table = _create(f"{bucket}/lake/trips")
    mw.write(trips(range(4)), table.path, _cfg())
    client.put_object(Bucket=name, Key="outside.txt", Body=b"sentinel")
    client.put_object(Bucket=name, Key="lake/beside/keep.txt", Body=b"sentinel 2")
    before = {o["Key"] for o in client.list_objects_v2(Bucket=name)["Contents"]}
    r1 = _plant_rollback(table, "../../../../outside.txt")  # the heartbeat "file" of the target
    r2 = _plant_rollback(table, "../../..")  # the marker "directory" of the target: the bucket's lake/
    cleaner = _cleaner(table.path)
    try:
        wait_lapsed(table, r1, r2, cleaner=cleaner)
        report = cleaner.run_once(raise_errors=False)
    finally:
        cleaner.close()
    after = {o["Key"] for o in client.list_objects_v2(Bucket=name)["Contents"]}
    assert client.get_object(Bucket=name, Key="outside.txt")["Body"].read() == b"sentinel"
    assert client.get_object(Bucket=name, Key="lake/beside/keep.txt")["Body"].read() == b"sentinel 2"
    assert {k for k in before if not k.startswith("lake/trips/")} <= after
    assert sum(f"{r}.rollback.requested" in e for r in (r1, r2) for e in report.errors) == 2, report.errors
    assert rows(table.read(), COLS) == rows(trips(range(4)), COLS)


def test_storage_refuses_dot_dot_everywhere(tmp_path, s3_server):
    for st in (Storage(str(tmp_path / "t")), Storage(s3_server() + "/t")):
        for rel in ("..", "../x", "a/../../x", ".hoodie/.temp/../../..", "a\x00b"):
            with pytest.raises(errors.TableFormatError, match="would leave the table"):
                st.abs(rel)
        assert st.abs("a..b/c..").endswith("/t/a..b/c..")  # '..' inside a name is a name


# -- 2. the timeline folders named in hoodie.properties ------------------------------------------


def _rewrite_properties(table: mw.Table, **changes: str) -> None:
    raw = props.parse(table.storage.read_bytes(props.PROPERTIES_FILE).decode())
    raw.update(changes)
    table.storage.write_bytes(props.PROPERTIES_FILE, props.render(raw).encode())


@pytest.mark.parametrize(("key", "value"), [
    ("hoodie.timeline.history.path", "../../../victim"),
    ("hoodie.timeline.history.path", "/abs/history"),
    ("hoodie.timeline.path", "../../victim"),
    ("hoodie.timeline.path", "timeline/../.."),
    ("hoodie.timeline.path", ""),
])
def test_timeline_folders_outside_hoodie_are_refused(tmp_path, key, value):
    table = _create(str(tmp_path / "trips"))
    for n in range(3):
        mw.write(trips(range(n, n + 2), ts=n), table.path, _cfg())
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "00000000000000000_00000000000000001_0.parquet").write_bytes(b"not ours")
    (victim / "manifest_0").write_bytes(b"not ours either")
    _rewrite_properties(table, **{key: value})
    with pytest.raises(errors.TableFormatError, match=key) as e:
        mw.Table.open(table.path)
    assert "hoodie.properties" in str(e.value) and type(e.value).__name__ == "UnsafePathError"
    with pytest.raises(errors.TableFormatError, match=key):
        mw.write(trips([9]), table.path, _cfg())
    with pytest.raises(errors.TableFormatError, match=key):
        mw.Cleaner(table.path, lock=_lock()).run_once()
    assert sorted(p.name for p in victim.iterdir()) == ["00000000000000000_00000000000000001_0.parquet", "manifest_0"]
    assert (victim / "manifest_0").read_bytes() == b"not ours either"


# -- 3. symbolic links in listings -----------------------------------------------------------------


def test_a_partition_linked_to_another_table_is_neither_read_nor_swept(tmp_path, caplog):
    a = _create(str(tmp_path / "a"))
    mw.write(trips(range(3), date="2024-01-01"), a.path, _cfg())
    b = _create(str(tmp_path / "b"))
    mw.write(trips(range(10, 14), date="2023-06-01"), b.path, _cfg())
    mw.write(trips(range(20, 24), date="2023-06-01"), b.path, _cfg("w2"))  # a second file in B's partition
    b_files = sorted(p for p in (tmp_path / "b" / "2023-06-01").iterdir() if p.suffix == ".parquet")
    assert len(b_files) >= 2
    old = time.time() - 3600  # old enough for any age bound of the sweep
    for f in b_files:
        os.utime(f, (old, old))
    want = {f.name: f.read_bytes() for f in b_files}
    os.symlink(tmp_path / "b" / "2023-06-01", tmp_path / "a" / "2023-06-01")
    # and a lone file linked into A's own partition
    os.symlink(b_files[0], tmp_path / "a" / "2024-01-01" / b_files[0].name)

    assert rows(mw.Table.open(a.path).read(), COLS) == rows(trips(range(3), date="2024-01-01"), COLS)
    cleaner = _cleaner(a.path)
    try:
        report = cleaner.run_once(raise_errors=False)
    finally:
        cleaner.close()
    assert {f.name: f.read_bytes() for f in b_files if f.exists()} == want, "B's data files were deleted through A"
    assert rows(mw.Table.open(b.path).read(), COLS) == rows(
        pa.concat_tables([trips(range(10, 14), date="2023-06-01"), trips(range(20, 24), date="2023-06-01")]), COLS)
    assert "symbolic link" in caplog.text
    assert report.files_deleted == 0
    # a delete through the linked directory is refused by storage itself
    assert a.storage.delete(f"2023-06-01/{b_files[1].name}") is False
    assert b_files[1].exists()


# -- 4. column and table names ---------------------------------------------------------------------


@pytest.mark.parametrize("column", ["../../escaped", ".hoodie/timeline/x", "a/b", "a\nb", "x\x00y", "..", "a=b", "a\\b"])
@pytest.mark.parametrize("hive", [True, False])
def test_unsafe_partition_column_names_are_refused_at_create(tmp_path, column, hive):
    schema = pa.schema([("id", pa.string()), (column, pa.string()), ("ts", pa.int64())])
    with pytest.raises(errors.ConfigError, match="partition column"):
        mw.Table.create(str(tmp_path / "t"), name="t", schema=schema, record_key="id", partition_by=[column],
                        ordering_field="ts", hive_style_partitioning=hive)
    assert sorted(os.listdir(tmp_path)) == [], "nothing was created"


@pytest.mark.parametrize("column", ["a\nb", "x\x00y", ""])
def test_unsafe_column_names_are_refused_at_create(tmp_path, column):
    schema = pa.schema([("id", pa.string()), (column, pa.string())])
    with pytest.raises(errors.ConfigError, match="column"):
        mw.Table.create(str(tmp_path / "t"), name="t", schema=schema, record_key="id")


@pytest.mark.parametrize(("key", "value", "what"), [
    ("hoodie.table.partition.fields", "../../escaped", "partition column"),
    ("hoodie.table.partition.fields", "date,.hoodie/timeline/x", "partition column"),
    ("hoodie.table.recordkey.fields", "id\nx", "column"),
    ("hoodie.table.name", "trips\x00", "table name"),
    ("hoodie.table.name", "a\nb", "table name"),
    ("hoodie.table.name", "../x", "table name"),
])
def test_unsafe_names_in_properties_are_refused_on_open(tmp_path, key, value, what):
    table = _create(str(tmp_path / "trips"), hive_style_partitioning=True)
    _rewrite_properties(table, **{key: value})
    with pytest.raises(errors.TableFormatError, match=what) as e:
        mw.Table.open(table.path)
    assert "hoodie.properties" in str(e.value)
    with pytest.raises(errors.TableFormatError):
        mw.write(trips([1]), table.path, _cfg())
    assert sorted(os.listdir(tmp_path)) == ["trips"]


def test_schema_evolution_refuses_an_unsafe_new_column(trips_table, table_path):
    mw.write(trips([1]), table_path, _cfg())
    before = [str(i) for i in trips_table.timeline().instants]
    bad = trips([2]).append_column("note\nforged=1", pa.array(["x"]))
    with pytest.raises(errors.SchemaMismatchError, match="column"):
        mw.write(bad, table_path, _cfg())
    assert [str(i) for i in trips_table.timeline().completed()] == [
        s for s in before if s.endswith("[completed]")]
    assert rows(trips_table.read(), COLS) == rows(trips([1]), COLS)


# -- 7. paths in write statistics and history manifests -------------------------------------------


def test_a_write_stat_path_outside_the_table_is_never_opened(tmp_path, caplog):
    from multiwriter import conflict
    from multiwriter.table.metadata import CommitMetadata, WriteStat

    table = _create(str(tmp_path / "trips"))
    mw.write(trips([1]), table.path, _cfg())
    base = table.timeline().completed()[-1].completion_time
    # a file outside the table holding the key we insert
    pq.write_table(pa.table({"_hoodie_record_key": ["5"]}), tmp_path / "outside.parquet")
    t = next_after(base)
    stat = WriteStat(file_id="f1-0", path="../outside.parquet", partition_path="2024-01-01", num_inserts=1)
    tlmod.create_completed(table.storage, table.config, t, next_after(t), inst.COMMIT,
                           CommitMetadata({"2024-01-01": [stat]}).to_bytes())
    got = conflict.find_insert_conflict(table.timeline(), base, "29990101000000000", {"2024-01-01": pa.array(["5"])})
    assert got is None, "a file outside the table was read as the commit's insert"
    assert "../outside.parquet" in caplog.text and f"{t}_" in caplog.text


def test_a_history_manifest_entry_outside_the_table_is_refused(tmp_path):
    from multiwriter.table import history
    from multiwriter.format import lsm_timeline as lsm

    table = _create(str(tmp_path / "trips"))
    mw.write(trips([1]), table.path, _cfg())
    hist = table.config.history_dir
    outside = lsm.encode([lsm.LsmInstant("20200101000000000", "20200101000000001", inst.COMMIT, b"{}")])
    (tmp_path / "outside.parquet").write_bytes(outside)
    name = "../../../../outside.parquet"
    table.storage.write_bytes(f"{hist}/{lsm.MANIFEST_PREFIX}1",
                              json.dumps({"files": [{"fileName": name, "fileLen": len(outside)}]}).encode())
    table.storage.write_bytes(f"{hist}/{lsm.VERSION_FILE}", b"1")
    with pytest.raises(errors.TableFormatError, match=f"{lsm.MANIFEST_PREFIX}1") as e:
        history.load(table.storage, hist)
    assert type(e.value).__name__ == "UnsafePathError" and name in str(e.value)
    assert (tmp_path / "outside.parquet").read_bytes() == outside


# -- issue 40, 3: writer ids ---------------------------------------------------------------------


@pytest.mark.parametrize("wid", [".", ".."])
def test_dot_writer_ids_are_refused_by_name(wid):
    with pytest.raises(errors.ConfigError, match="reserved"):
        mw.WriterConfig(writer_id=wid, lock=_lock())


# -- issue 56, 1: links inside .hoodie -------------------------------------------------------------


def _tree_hash(root, skip) -> str:
    """A digest of every name, file content and link target under ``root``, ``skip`` left out
    (read from the file system directly, links never followed)."""
    import hashlib

    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if os.path.join(dirpath, d) != str(skip))
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            h.update(os.path.relpath(full, root).encode() + b"\0")
            if os.path.islink(full):
                h.update(b"link " + os.readlink(full).encode())
            else:
                with open(full, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


@pytest.mark.parametrize("linked", [".hoodie/.heartbeat", ".hoodie/.temp", ".hoodie/metadata/files",
                                    ".hoodie/timeline", ".hoodie", ".hoodie/.locks", "other .hoodie"])
def test_a_folder_of_hoodie_linked_out_of_the_table_is_never_written_through(tmp_path, linked):
    """Someone who can write inside the table replaces one of its ``.hoodie`` folders (or
    ``.hoodie`` itself, also by table B's) with a link to a folder outside holding a copy: the
    writer's heartbeats, markers, metadata logs, instant files and lock object would land there.
    Every local write refuses the link, naming it; nothing outside the table changes."""
    import shutil

    table = _create(str(tmp_path / "trips"), metadata=True)
    lock = mw.StorageLock() if linked == ".hoodie/.locks" else _lock()
    cfg = mw.WriterConfig(writer_id="w", lock=lock, executor="driver", heartbeat_interval_s=HB,
                          heartbeat_tolerable_misses=MISSES)
    mw.write(trips(range(3)), table.path, cfg)
    if linked == "other .hoodie":
        other = _create(str(tmp_path / "b"))
        mw.write(trips(range(10, 12)), other.path, _cfg("other"))
        linked, target = ".hoodie", tmp_path / "b" / ".hoodie"
    else:
        target = tmp_path / "outside" / "copy"
        os.makedirs(tmp_path / "trips" / linked, exist_ok=True)
        shutil.copytree(tmp_path / "trips" / linked, target, symlinks=True)
    shutil.rmtree(tmp_path / "trips" / linked)
    os.symlink(target, tmp_path / "trips" / linked)
    before = _tree_hash(tmp_path, tmp_path / "trips")

    with pytest.raises(errors.UnsafePathError, match=f"{linked} is a symbolic link") as e:
        mw.write(trips(range(2, 6)), table.path, cfg)
    assert e.value.path == linked
    assert _tree_hash(tmp_path, tmp_path / "trips") == before, "a file outside the table was written"


def test_storage_writes_refuse_links_and_write_through_plain_folders(tmp_path):
    root = tmp_path / "t"
    (root / "a").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "out", root / "a" / "l")
    s = Storage(str(root))
    calls = [lambda: s.write_bytes("a/l/x", b"1"), lambda: s.put_if_absent("a/l/x", b"1"),
             lambda: s.put_if_absent("a/l/x", b""), lambda: s.makedirs("a/l/y"), lambda: s.makedirs("a/l"),
             lambda: s.staging_dir("a/l/z"), lambda: s.open_output("a/l/x").close(),
             lambda: s.publish("a/staged", "a/l/x")]
    (root / "a" / "staged").write_bytes(b"s")
    for call in calls:
        with pytest.raises(errors.UnsafePathError, match="a/l is a symbolic link"):
            call()
    # the file itself linked out: replaced by a rename or refused by O_NOFOLLOW, never written through
    os.symlink(tmp_path / "out" / "f", root / "a" / "f")
    with pytest.raises(errors.UnsafePathError, match="a/f is a symbolic link"):
        s.open_output("a/f").close()
    with pytest.raises(errors.FileExists):
        s.put_if_absent("a/f", b"1")
    s.write_bytes("a/f", b"mine")
    assert os.listdir(tmp_path / "out") == [] and (root / "a" / "f").read_bytes() == b"mine"
    # plain folders, created as needed
    s.write_bytes("b/c/x", b"1")
    with s.open_output("d/e/y") as f:
        f.write(b"22")
    s.put_if_absent("d/e/z", b"")
    assert (root / "b" / "c" / "x").read_bytes() == b"1" and (root / "d" / "e" / "y").read_bytes() == b"22"
