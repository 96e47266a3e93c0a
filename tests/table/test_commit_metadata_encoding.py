"""Commit metadata encodes to the bytes fastavro writes for the plain record (the union values
are only tagged with their branch to skip fastavro's search for it; commits go through the
compiled encoder of :mod:`multiwriter.format.avro`, which fastavro checks here)."""
from __future__ import annotations

import io

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiwriter.table import metadata
from multiwriter.format import avro
from multiwriter.table.metadata import COMMIT_SCHEMA, REPLACE_COMMIT_SCHEMA, CommitMetadata, ReplaceCommitMetadata, WriteStat


def _stats() -> dict[str, list[WriteStat]]:
    return {f"2024-01-0{i}": [WriteStat(file_id=f"f{i}", path=f"2024-01-0{i}/f{i}_0-0-0_1.parquet", partition_path=f"2024-01-0{i}",
                                        num_writes=10 + i, num_inserts=i, total_write_bytes=100 * i, file_size=100 * i,
                                        prev_base_file=None if i % 2 else "old.parquet", create_time_ms=i)]
            for i in range(1, 4)}


def _plain(meta: CommitMetadata) -> dict:
    rec = {"partitionToWriteStats": {p: [s.to_avro() for s in ss] for p, ss in meta.partition_to_write_stats.items()},
           "compacted": meta.compacted, "extraMetadata": dict(meta.extra_metadata), "version": 1,
           "operationType": meta.operation_type}
    if isinstance(meta, ReplaceCommitMetadata):
        rec["partitionToReplaceFileIds"] = {p: list(ids) for p, ids in meta.partition_to_replace_file_ids.items()}
    return rec


def test_encoded_record_is_fastavros_encoding_of_the_plain_record():
    for meta, schema in ((CommitMetadata(_stats(), {"schema": "{}", "w": "x"}, "INSERT"), COMMIT_SCHEMA),
                         (ReplaceCommitMetadata(_stats(), {"schema": "{}"}, "INSERT_OVERWRITE",
                                                partition_to_replace_file_ids={"2024-01-01": ["g1"]}), REPLACE_COMMIT_SCHEMA)):
        ours = meta.to_bytes()
        datum = io.BytesIO()
        fastavro.schemaless_writer(datum, fastavro.parse_schema(schema, named_schemas={}), _plain(meta))
        assert datum.getvalue() in ours  # the container's one record, byte for byte
        plain = io.BytesIO()
        fastavro.writer(plain, fastavro.parse_schema(schema, named_schemas={}), [_plain(meta)])
        assert list(fastavro.reader(io.BytesIO(ours))) == list(fastavro.reader(io.BytesIO(plain.getvalue())))
        back = type(meta).from_bytes(ours, source="t")
        assert [(s.file_id, s.path, s.num_writes, s.file_size) for s in back.all_stats()] == \
            [(s.file_id, s.path, s.num_writes, s.file_size) for s in meta.all_stats()]


_text = st.text(max_size=12)
_long = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_stat = st.builds(WriteStat, file_id=_text, path=_text, partition_path=_text, prev_commit=_text, num_writes=_long,
                  num_inserts=_long, num_update_writes=_long, num_deletes=_long, total_write_bytes=_long, file_size=_long,
                  prev_base_file=st.none() | _text, total_write_errors=_long, create_time_ms=_long)


@settings(max_examples=60, deadline=None)
@given(stats=st.dictionaries(_text, st.lists(_stat, max_size=3), max_size=4),
       extra=st.dictionaries(_text, _text, max_size=3), op=_text)
def test_compiled_commit_encoding_is_fastavros_for_any_stats(stats, extra, op):
    meta = CommitMetadata(stats, extra, op)
    ours = meta.to_bytes()
    datum = io.BytesIO()
    fastavro.schemaless_writer(datum, fastavro.parse_schema(COMMIT_SCHEMA, named_schemas={}), _plain(meta))
    assert datum.getvalue() in ours
    assert list(fastavro.reader(io.BytesIO(ours))) == [fastavro.schemaless_reader(
        io.BytesIO(datum.getvalue()), fastavro.parse_schema(COMMIT_SCHEMA, named_schemas={}))]


def test_commits_use_the_compiled_encoder_and_other_schemas_do_not_compile():
    assert "commit" in metadata._WRITERS
    assert avro.compile_schema({"type": "enum", "name": "e", "symbols": ["A"]}) is None
    assert avro.compile_schema({"type": "record", "name": "r", "fields": [{"name": "x", "type": "double"}]}) is None
    assert avro.compile_schema(["null", "long", "string"]) is not None


@pytest.mark.parametrize("num_writes", ["many", 2**63, -(2**63) - 1])
def test_a_value_the_compiled_encoder_refuses_goes_to_fastavro(num_writes):
    """A long given as a string, or beyond 64 bits: fastavro, not a TypeError of ours (nor
    bytes no reader could decode), says what is wrong."""
    meta = CommitMetadata({"p": [WriteStat(file_id="f", path="p/f", partition_path="p", num_writes=num_writes)]}, {}, "INSERT")
    with pytest.raises(ValueError, match="numWrites"):
        meta.to_bytes()


def test_cdc_stats_round_trip_as_hudis_map():
    """``HoodieWriteStat.cdcStats`` (path from the table root -> size) of a merge that wrote a CDC log
    file (``HoodieCDCLogger.getCDCWriteStats``): in the Avro record, in the task rows, and left out
    (null) when the write had none."""
    cdc = "p1/.f1_20250101000000001.log.1_0-0-0.cdc"
    stat = WriteStat(file_id="f1", path="p1/f1_0-0-0_20250101000000001.parquet", partition_path="p1",
                     num_writes=3, num_update_writes=1, cdc_files=(cdc,), cdc_sizes=(321,))
    assert stat.to_avro()["cdcStats"] == {cdc: 321}
    assert "cdcStats" not in WriteStat(file_id="f", path="p/f", partition_path="p").to_avro()
    back = CommitMetadata.from_bytes(CommitMetadata({"p1": [stat]}, {}, "UPSERT").to_bytes(), source="t")
    assert back.all_stats()[0].cdc_stats == {cdc: 321}
    assert WriteStat.from_row(stat.to_row()) == stat
    with pytest.raises(TypeError, match="cdcStats"):
        WriteStat.from_avro({**stat.to_avro(), "cdcStats": {cdc: "321"}}, "p1")
