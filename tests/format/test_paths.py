"""The path rule and the name rule as pure functions, with literal cases."""
from __future__ import annotations

import pytest

from multiwriter.errors import ConfigError, UnsafePathError
from multiwriter.format import names, paths

SRC = ".hoodie/timeline/x.rollback.requested"


@pytest.mark.parametrize("t", ["20240101000000000", "20240101000000"])
def test_instant_times_pass(t):
    assert paths.instant_time(t, source=SRC) == t


@pytest.mark.parametrize("t", ["../../..", "", None, "2024010100000000", "202401010000000000", "/etc", "2024010100000000a",
                               "٢٠٢٤٠١٠١٠٠٠٠٠٠٠٠٠"])
def test_other_instant_times_are_refused_naming_the_file(t):
    with pytest.raises(UnsafePathError, match=SRC) as e:
        paths.instant_time(t, source=SRC)
    assert e.value.source == SRC


@pytest.mark.parametrize("p", ["", "2024-01-01", "date=2024-01-01/h=3", "a..b"])
def test_partitions_pass(p):
    assert paths.partition(p, source=SRC) == p


@pytest.mark.parametrize("p", ["..", "../x", "a/../../b", "/abs", ".hoodie", "a/.hoodie/b", "a//b", "a\\b", "a\x00b",
                               "a\nb", "s3://bucket/x", 7])
def test_other_partitions_are_refused(p):
    with pytest.raises(UnsafePathError, match="partition path"):
        paths.partition(p, source=SRC)


def test_data_file_paths():
    base = "2024-01-01/f1-0_0-0-0_20240101000000000.parquet"
    log = "2024-01-01/.f1-0_20240101000000000.log.1_0-0-0"
    assert paths.data_file(base, source=SRC) == base
    assert paths.data_file(log, source=SRC) == log
    for bad in ("../outside.parquet", "../f1-0_0-0-0_20240101000000000.parquet", "2024-01-01/notes.txt",
                "/abs/f1-0_0-0-0_20240101000000000.parquet", ".hoodie/f1-0_0-0-0_20240101000000000.parquet"):
        with pytest.raises(UnsafePathError, match="data file path"):
            paths.data_file(bad, source=SRC)


@pytest.mark.parametrize(("value", "ok"), [("timeline", True), ("history", True), ("a/b", True), ("..", False),
                                           ("../../victim", False), ("/abs", False), ("a/../b", False), ("", False),
                                           ("a//b", False), ("./a", False), ("a\nb", False)])
def test_hoodie_subdirs(value, ok):
    if ok:
        assert paths.hoodie_subdir("hoodie.timeline.path", value, source=SRC) == value
    else:
        with pytest.raises(UnsafePathError, match="hoodie.timeline.path"):
            paths.hoodie_subdir("hoodie.timeline.path", value, source=SRC)


@pytest.mark.parametrize(("name", "ok"), [("00000000000000000_00000000000000001_0.parquet", True), ("..", False),
                                          (".", False), ("../x", False), ("a/b", False), ("", False), (3, False)])
def test_plain_names(name, ok):
    if ok:
        assert paths.plain_name(name, source=SRC) == name
    else:
        with pytest.raises(UnsafePathError):
            paths.plain_name(name, source=SRC)


@pytest.mark.parametrize(("name", "partition", "problem"), [
    ("date", True, None), ("event.date", True, None), ("a/b", False, None),
    ("../../escaped", True, "'.'"), (".hoodie/timeline/x", True, "'.'"), ("a/b", True, "'/'"), ("a=b", True, "'='"),
    ("a\nb", False, "newline"), ("x\x00y", False, "NUL"), ("", False, "empty"), ("x" * 256, False, "255 bytes"),
])
def test_column_names(name, partition, problem):
    got = names.column_problem(name, partition=partition)
    assert (got is None) if problem is None else (problem in got)


@pytest.mark.parametrize(("name", "ok"), [("trips", True), ("my-table.v2", True), ("trips\x00", False), ("a\nb", False),
                                          ("../x", False), ("..", False), ("a/b", False), ("", False)])
def test_table_names(name, ok):
    assert (names.table_name_problem(name) is None) is ok


def test_check_names_partition_columns_first():
    with pytest.raises(ConfigError, match=r"here: partition column '\.\./p'"):
        names.check(error=ConfigError, where="here", table_name="a\nb", columns=["c\n"], partition_columns=["../p"])
