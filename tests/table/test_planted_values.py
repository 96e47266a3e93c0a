"""Values planted in a table's files by someone who can write inside it (issue 56, 7): a
checkpoint map of ``1e999`` or deep nesting, a history ``_version_`` of 5,000 digits, JSON
history batches of earlier releases with nested JSON, lists or ``../..`` times. Each gives a
``TableFormatError`` naming the file (or, for another tool's checkpoint values, is skipped with
a warning), never an untyped ``OverflowError``/``RecursionError``/``ValueError``, and nothing
outside the table changes."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

import multiwriter as mw
from multiwriter import checkpoint as ckpt
from multiwriter import errors
from multiwriter.table import history
from multiwriter.format import lsm_timeline as lsm
from multiwriter.table.metadata import CommitMetadata, decode_commit_metadata
from multiwriter.table.timeline import Timeline
from tests.conftest import TRIPS_SCHEMA, trips

DEEP = "[" * 200_000 + "]" * 200_000


def _table(tmp_path) -> mw.Table:
    path = str(tmp_path / "t")
    mw.Table.create(path, name="trips", schema=TRIPS_SCHEMA, record_key="id", ordering_field="ts",
                    partition_by=["date"])
    mw.write(trips(range(3)), path, mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="driver"))
    (tmp_path / "beside.txt").write_text("sentinel")
    return mw.Table.open(path)


def _outside(tmp_path) -> str:
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(tmp_path):
        dirs[:] = sorted(d for d in dirs if os.path.join(dirpath, d) != str(tmp_path / "t"))
        for f in sorted(files):
            full = os.path.join(dirpath, f)
            h.update(full.encode())
            with open(full, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


@pytest.mark.parametrize("planted, read", [
    ('{"s": 1e999, "t": "7"}', {"t": 7}),
    ('{"s": 1e300, "t": 7}', {"t": 7}),  # a float read as an id would make every later batch of s a replay
    ('{"s": "' + "9" * 5000 + '", "t": "-1"}', {"t": -1}),
    (DEEP, {}),
    ('{"s": ' + DEEP + "}", {}),
])
def test_a_planted_checkpoint_map_is_skipped_not_an_untyped_error(tmp_path, planted, read, caplog):
    table = _table(tmp_path)
    tl = Timeline.load(table.storage, table.config)
    last = tl.completed()[-1]
    rel = tl.path_of(last)
    meta = decode_commit_metadata(last.action, table.storage.read_bytes(rel), source=rel)
    meta.extra_metadata[ckpt.CHECKPOINT_KEY] = planted
    meta.extra_metadata[ckpt.QUERIES_KEY] = DEEP
    table.storage.write_bytes(rel, meta.to_bytes())
    assert ckpt.parse(CommitMetadata(extra_metadata={ckpt.CHECKPOINT_KEY: planted})) == read
    assert ckpt.last(Timeline.load(table.storage, table.config), "s") is None
    assert "checkpoint map" in caplog.text
    mw.write(trips(range(2, 5)), table.path, mw.WriterConfig(writer_id="w2", lock=mw.InProcessLock(),
                                                               executor="driver"))
    assert table.read().num_rows == 5


@pytest.mark.parametrize("version", [b"9" * 5000, b"1" * 20])
def test_a_history_version_of_too_many_digits_is_a_format_error_naming_it(tmp_path, version):
    table = _table(tmp_path)
    hist = table.config.history_dir
    table.storage.write_bytes(f"{hist}/{lsm.VERSION_FILE}", version)
    with pytest.raises(errors.TableFormatError, match=f"{hist}/{lsm.VERSION_FILE}: the snapshot number has"):
        history.load(table.storage, hist)


@pytest.mark.parametrize("doc, why", [
    (DEEP, "not a readable multiwriter archive batch"),
    ("[]", "not a readable multiwriter archive batch"),
    ('{"format": "multiwriter-archive", "instants": {"a": 1}}', "instants is not a list"),
    ('{"format": "multiwriter-archive", "instants": [[1, 2]]}', "not a readable multiwriter archive batch"),
    ('{"format": "multiwriter-archive", "instants": [{"requested_time": "../..", "action": "commit"}]}',
     "is not a 14- or 17-digit instant time"),
    ('{"format": "multiwriter-archive", "instants": [{"requested_time": "20240101000000000", '
     '"completion_time": "../../../beside.txt", "action": "commit"}]}', "is not a 14- or 17-digit instant time"),
    ('{"format": "multiwriter-archive", "instants": [{"requested_time": "20240101000000000", '
     '"action": "../x"}]}', "is not a Hudi action"),
    ('{"format": "multiwriter-archive", "instants": [{"requested_time": "20240101000000000", '
     '"action": "commit", "files": ["a"]}]}', "files is not a map"),
    ('{"format": "multiwriter-archive", "instants": [{"requested_time": "20240101000000000", '
     '"action": "commit", "files": {"a": ' + DEEP + "}}]}", "not a readable multiwriter archive batch"),
])
def test_a_planted_json_history_batch_is_a_format_error_naming_it(tmp_path, doc, why):
    table = _table(tmp_path)
    hist = table.config.history_dir
    rel = f"{hist}/20240101000000000{history.LEGACY_SUFFIX}"
    table.storage.write_bytes(rel, doc.encode())
    before = _outside(tmp_path)
    with pytest.raises(errors.TableFormatError, match=rel) as e:
        history.load(table.storage, hist)
    assert why in str(e.value) and len(str(e.value)) < 2000
    with mw.Cleaner(table.path, lock=mw.InProcessLock(), clustering=None) as cleaner:  # the job's migration step
        report = cleaner.run_once(raise_errors=False)
    assert any(rel in err for err in report.errors), report.errors
    assert table.storage.exists(rel), "the batch was kept for a person to look at"
    assert _outside(tmp_path) == before
    assert table.read().num_rows == 3
    json.dumps(report.errors)
