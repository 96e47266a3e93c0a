"""The bootstrap index's keys and source paths: a file group's key round-trips, and no index
entry can make a reader open a file outside the bootstrap source."""
from __future__ import annotations

import pytest

from multiwriter.errors import TableFormatError
from multiwriter.format import bootstrap_index as bi
from multiwriter.table.bootstrap_index_files import relative_source, table_properties


@pytest.mark.parametrize("partition,file_id", [("date=2024-01-01", "a-0"), ("", "b-0"), ("x;y/z", "c-0")])
def test_a_file_group_key_round_trips(partition, file_id):
    key = bi.file_group_key(partition, file_id)
    assert key == f"part={partition};fileid={file_id}"
    assert bi.parse_file_group_key(key) == (partition, file_id)


@pytest.mark.parametrize("key", ["fileid=a", "part=x", "part=x;fileid=", "x=1;fileid=a"])
def test_other_keys_are_refused(key):
    with pytest.raises(ValueError):
        bi.parse_file_group_key(key)


def test_source_paths_stay_under_the_bootstrap_base_path(tmp_path):
    base = str(tmp_path / "src")
    assert relative_source(base, f"file:{base}/date=1/a.parquet") == "date=1/a.parquet"
    assert relative_source(base, f"file://{base}/a.parquet") == "a.parquet"
    assert relative_source(base, f"{base}/a.parquet") == "a.parquet"
    for uri in (f"file:{tmp_path}/other/a.parquet", f"file:{base}/../t/a.parquet", f"file:{base}x/a.parquet",
                "s3://bucket/src/a.parquet", f"file:{base}/"):
        with pytest.raises(TableFormatError, match="not under the bootstrap base path"):
            relative_source(base, uri)


def test_the_index_properties_by_table_version():
    assert table_properties(9) == {"hoodie.bootstrap.index.type": "HFILE"}
    assert table_properties(8) == {"hoodie.bootstrap.index.type": "HFILE", "hoodie.bootstrap.index.class":
                                   "org.apache.hudi.common.bootstrap.index.hfile.HFileBootstrapIndex"}
