"""CDC log files (``HoodieCDCLogger``, ``HoodieCDCDataBlock``, ``HoodieCDCUtils``): names, record
schemas per supplemental logging mode, and blocks, byte for byte."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from multiwriter.errors import TableFormatError
from multiwriter.format import cdc_log as cl
from multiwriter.format import log_file as lf
from multiwriter.format.schema import arrow_to_avro

T1 = "20250101000000001"
DATA = pa.schema([pa.field("id", pa.string()), pa.field("n", pa.int64())])
TABLE_SCHEMA = arrow_to_avro(DATA, "trips")
IMAGE = pa.struct(list(DATA))


def test_name_is_a_log_name_with_hudi_suffix() -> None:
    name = cl.cdc_log_name("fg1-0", T1, "0-1-0")
    assert name == f".fg1-0_{T1}.log.1_0-1-0.cdc"
    parsed = cl.parse_cdc_log_file(name)
    assert parsed is not None and (parsed.file_id, parsed.instant_time, parsed.version) == ("fg1-0", T1, 1)
    assert lf.parse_log_file(name) is None  # never taken for a data log of the slice
    assert cl.parse_cdc_log_file(name[: -len(".cdc")]) is None


def test_op_key_only_block_bytes() -> None:
    """Framing as any block, type 6 (``CDC_DATA_BLOCK``), headers INSTANT_TIME and SCHEMA, then
    the Avro data block content: version 3, one record, its length and body."""
    block = cl.encode_cdc_block(pa.table({"op": ["u"], "record_key": ["k1"]}), cl.OP_KEY_ONLY, TABLE_SCHEMA,
                                instant_time=T1)
    schema = b'{"type":"record","name":"Record","fields":[{"name":"op","type":["string","null"]},' \
             b'{"name":"record_key","type":["string","null"]}]}'
    content = bytes.fromhex("00000003" "00000001" "00000007" "00" "0275" "00" "046b31")
    body = (bytes.fromhex("00000001" "00000006" "00000002")
            + bytes.fromhex("00000000" "00000011") + T1.encode()
            + bytes.fromhex("00000002") + len(schema).to_bytes(4, "big") + schema
            + len(content).to_bytes(8, "big") + content + bytes.fromhex("00000000"))
    expected = b"#HUDI#" + (len(body) + 8).to_bytes(8, "big") + body + (6 + 8 + len(body)).to_bytes(8, "big")
    assert block == expected
    assert len(block) == 228
    assert cl.read_cdc_records(block).to_pylist() == [{"op": "u", "record_key": "k1"}]


def test_before_after_schema_shares_the_image_record() -> None:
    s = cl.cdc_record_schema(cl.DATA_BEFORE_AFTER, TABLE_SCHEMA)
    assert [f["name"] for f in s["fields"]] == ["op", "ts_ms", "before", "after"]
    assert s["name"] == "CDC" and s["namespace"] == TABLE_SCHEMA["namespace"]
    before, after = s["fields"][2]["type"], s["fields"][3]["type"]
    assert before[0] == "null" and before[1]["type"] == "record"
    assert after == ["null", f"{TABLE_SCHEMA['namespace']}.{TABLE_SCHEMA['name']}"]  # a named reference
    assert all(f["default"] is None for f in s["fields"])


def test_images_drop_meta_fields() -> None:
    with_meta = dict(TABLE_SCHEMA, fields=[{"name": "_hoodie_commit_time", "type": ["null", "string"]},
                                           *TABLE_SCHEMA["fields"]])
    s = cl.cdc_record_schema(cl.DATA_BEFORE, with_meta)
    assert [f["name"] for f in s["fields"]] == ["op", "record_key", "before"]
    assert [f["name"] for f in s["fields"][2]["type"][1]["fields"]] == ["id", "n"]


@pytest.mark.parametrize("mode", cl.MODES)
def test_round_trip_per_mode(mode: str) -> None:
    before = pa.array([None, {"id": "a", "n": 1}, {"id": "b", "n": 2}], IMAGE)
    after = pa.array([{"id": "c", "n": 3}, {"id": "a", "n": 5}, None], IMAGE)
    cols = {"op": pa.array(["i", "u", "d"]), "ts_ms": pa.array([T1] * 3), "record_key": pa.array(["c", "a", "b"]),
            "before": before, "after": after}
    records = pa.table({c: cols[c] for c in cl.cdc_columns(mode)})
    block = cl.encode_cdc_block(records, mode, TABLE_SCHEMA, instant_time=T1)
    (read,) = lf.read_log_blocks(block)
    assert read.kind == lf.CDC and read.block_type == lf.BlockType.CDC_DATA and read.instant_time == T1
    assert json.loads(read.header["SCHEMA"]) == cl.cdc_record_schema(mode, TABLE_SCHEMA)
    assert cl.read_cdc_records(block + block).to_pylist() == records.to_pylist() * 2


def test_a_file_with_other_blocks_is_refused() -> None:
    data = lf.encode_rollback_block(instant_time=T1, target_instant_time=T1)
    with pytest.raises(TableFormatError, match="x.cdc: block at offset 0 is a command block"):
        cl.read_cdc_records(data, source="x.cdc")


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="WITH_BEFORE"):
        cl.cdc_record_schema("WITH_BEFORE", TABLE_SCHEMA)
