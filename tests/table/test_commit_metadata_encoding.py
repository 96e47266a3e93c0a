"""Commit metadata encodes to the bytes fastavro writes for the plain record (the union values
are only tagged with their branch to skip fastavro's search for it)."""
from __future__ import annotations

import io

import fastavro

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
