"""Our reader reads the tables Hudi on Spark wrote, and agrees with hudi-rs."""
from __future__ import annotations

import pytest

import multiwriter as mw
from tests.oracle import FIXTURES, hudi_read, rows, unzip_fixture

pytestmark = pytest.mark.needs_fixtures

# What the .sql files produce: the second INSERT upserts Alice (isActive -> false) and adds Diana.
EXPECTED = [(1, "Alice", False), (2, "Bob", False), (3, "Carol", True), (4, "Diana", True)]
NON_EMPTY = ["v6_nonpartitioned", "v6_simplekeygen_nonhivestyle", "v8_complexkeygen_hivestyle",
             "v8_nonpartitioned", "v8_simplekeygen_nonhivestyle"]


@pytest.mark.parametrize("name", NON_EMPTY)
def test_reads_spark_written_fixture(name, tmp_path):
    path = unzip_fixture(name, tmp_path)
    t = mw.Table.open(str(path))
    got = t.read()
    assert rows(got, ["id", "name", "isActive"]) == EXPECTED
    assert rows(hudi_read(str(path)), ["id", "name", "isActive"]) == EXPECTED
    assert len(t.timeline().completed()) == 2


@pytest.mark.parametrize("name", NON_EMPTY)
def test_as_of_first_commit_matches_hudi_rs(name, tmp_path):
    path = unzip_fixture(name, tmp_path)
    t = mw.Table.open(str(path))
    first = t.timeline().completed()[0].requested_time
    ours = rows(t.read(as_of=first), ["id", "isActive"])
    assert ours == [(1, True), (2, False), (3, True)]
    assert ours == rows(hudi_read(str(path), as_of=first), ["id", "isActive"])


def test_empty_fixture(tmp_path):
    t = mw.Table.open(str(unzip_fixture("v8_empty", tmp_path)))
    got = t.read()
    assert got.num_rows == 0
    assert got.schema.names[5:] == ["id", "name", "isActive"]
    assert t.timeline().completed() == []


def test_properties_checksum_matches_fixture(tmp_path):
    from multiwriter.table.properties import checksum

    t = mw.Table.open(str(unzip_fixture("v8_simplekeygen_nonhivestyle", tmp_path)))
    assert str(checksum(t.config.database, t.config.name)) == t.config.raw["hoodie.table.checksum"]
    assert t.config.partition_by == ("byteField",)
    assert t.config.ordering_field == "longField"


def test_commit_metadata_of_fixture_parses(tmp_path):
    t = mw.Table.open(str(unzip_fixture("v8_simplekeygen_nonhivestyle", tmp_path)))
    tl = t.timeline()
    meta = tl.commit_metadata(tl.completed()[-1])
    assert meta.operation_type in ("UPSERT", "INSERT")
    assert {s.partition_path for s in meta.all_stats()} == {"10", "30"}
    assert "schema" in meta.extra_metadata


def test_fixture_dir_exists():
    assert FIXTURES.exists(), f"{FIXTURES} missing"
