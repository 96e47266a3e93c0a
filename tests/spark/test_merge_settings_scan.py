"""The Spark scan honours the table's merge settings as our reader and compaction do
(docs/merge-settings.md), on a Merge-on-Read table whose log files are JVM-like
(tests/table/jvm_style.py), and refuses a setting it does not merge by, naming it."""
from __future__ import annotations

import pytest

from multiwriter.table import properties
from multiwriter.table.merge_config import PAYLOAD_STRATEGY
from multiwriter.table.properties import COMMIT_TIME_STRATEGY
from tests.table.jvm_style import at, bucket_group, deltacommit, keys_in_bucket

M = "org.apache.hudi.common.model."
K = keys_in_bucket(3, 1)[0]
GROUP = bucket_group(3)

CASES = {
    # v8 upgraded from 0.x with OverwriteWithLatestAvroPayload: the later version wins whatever
    # its ts (BufferedRecordMergerFactory.CommitTimeRecordMerger)
    "commit time with an ordering field": (
        {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
         "hoodie.compaction.payload.class": M + "OverwriteWithLatestAvroPayload",
         "hoodie.record.merge.strategy.id": COMMIT_TIME_STRATEGY},
        [(5, 1.0), (3, 2.0)], (3, 2.0)),
    # ts ties, value decides (OrderingValues.create, ArrayComparable.compareTo)
    "several ordering fields": (
        {"hoodie.table.version": "9", "hoodie.table.ordering.fields": "ts,value"},
        [(5, 9.0), (5, 1.0)], (5, 9.0)),
    # the winner's null takes the loser's value (PartialUpdateHandler.reconcileDefaultValues)
    "IGNORE_DEFAULTS": (
        {"hoodie.table.version": "9", "hoodie.table.ordering.fields": "ts",
         "hoodie.table.partial.update.mode": "IGNORE_DEFAULTS"},
        [(1, 1.0), (2, None)], (2, 1.0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_spark_scan_merges_as_hudi(sp, mor_table, table_path, case):
    settings, versions, expected = CASES[case]
    properties.modify(mor_table.storage, lambda p: {**p, **settings})
    for i, (ts, value) in enumerate(versions):
        deltacommit(mor_table, at(2 * i + 1), at(2 * i + 2), GROUP, upserts=[(K, ts, value)])
    got = [(r["id"], r["ts"], r["value"]) for r in sp.read.format("multiwriter").load(table_path).collect()]
    assert got == [(K, *expected)]


def test_the_spark_scan_refuses_a_payload_it_does_not_merge_by(sp, mor_table, table_path):
    properties.modify(mor_table.storage, lambda p: {
        **p, "hoodie.record.merge.mode": "CUSTOM", "hoodie.compaction.payload.class": M + "AWSDmsAvroPayload",
        "hoodie.record.merge.strategy.id": PAYLOAD_STRATEGY})
    deltacommit(mor_table, at(1), at(2), GROUP, upserts=[(K, 5, 1.0)])
    with pytest.raises(Exception, match="AWSDmsAvroPayload"):
        sp.read.format("multiwriter").load(table_path).collect()
