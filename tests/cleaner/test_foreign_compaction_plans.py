"""Compaction plans another writer scheduled (a JVM writer's: its plan names no cleaner of ours).

Hudi's compactor takes a requested plan with no lock and no heartbeat
(``SparkRDDTableServiceClient.compact`` via ``BaseHoodieTableServiceClient.compact``: the
requested instant is moved to inflight, ``HoodieActiveTimeline.transitionCompactionRequestedToInflight``),
and an inflight plan it did not start it rolls back and runs again
(``HoodieTable.rollbackInflightCompaction``). Nothing then fences our run of such a plan from a
JVM compactor's: by default the cleaner leaves it to its owner, and executes it only with
``CompactionConfig.execute_foreign_plans`` (the user asserts no JVM compactor runs)."""
from __future__ import annotations

import pytest

import multiwriter as mw
from multiwriter.errors import ConfigError
from multiwriter.format import instant as inst
from multiwriter.table import timeline as tlmod
from multiwriter.table.files import list_files
from tests.oracle import hudi_read, rows
from tests.table.jvm_style import at, bucket_group, deltacommit, jvm_compaction_plan, keys_in_bucket

COLS = ["id", "date", "ts", "value"]
GROUP = bucket_group(1)
A, B = keys_in_bucket(1, 2)


def _cleaner(path: str, **kw) -> mw.Cleaner:
    return mw.Cleaner(path, lock=mw.InProcessLock(), clustering=None, heartbeat_interval_s=1.0,
                      heartbeat_tolerable_misses=1, compaction=mw.CompactionConfig(delta_commits=100, **kw))


def _run(path: str, **kw) -> list[str]:
    c = _cleaner(path, **kw)
    try:
        return c.run_once().compaction_instants
    finally:
        c.close()


def _state(path: str, t: str) -> str:
    i = mw.Table.open(path).timeline().find(t, inst.COMPACTION)
    return "completed" if i is not None and not i.is_pending else i.state if i is not None else "gone"


def _jvm_plan(table: mw.Table, inflight: bool) -> str:
    log = deltacommit(table, at(1), at(2), GROUP, upserts=[(A, 1, 1.0), (B, 1, 1.0)])
    jvm_compaction_plan(table, at(3), GROUP, [log])
    if inflight:  # a JVM compactor started it (no heartbeat: Hudi's compactors beat none)
        tlmod.create_inflight(table.storage, table.config, at(3), inst.COMPACTION)
    return at(3)


@pytest.mark.parametrize("inflight", [False, True])
def test_a_foreign_plan_is_left_to_its_owner_by_default(mor_table, table_path, inflight):
    t = _jvm_plan(mor_table, inflight)
    assert _run(table_path) == []
    assert _state(table_path, t) == ("inflight" if inflight else "requested"), "neither run nor rolled back"
    bases, _ = list_files(mw.Table.open(table_path).storage)
    assert bases == [], "nothing written for it"


@pytest.mark.parametrize("inflight", [False, True])
def test_a_foreign_plan_is_executed_when_the_user_opts_in(mor_table, table_path, inflight):
    t = _jvm_plan(mor_table, inflight)
    assert _run(table_path, execute_foreign_plans=True) == [t]
    assert _state(table_path, t) == "completed"
    ours = rows(mw.Table.open(table_path).read(), COLS)
    assert ours == rows(hudi_read(table_path), COLS) and len(ours) == 2


def test_the_setting_is_a_bool():
    with pytest.raises(ConfigError, match="execute_foreign_plans"):
        mw.CompactionConfig(execute_foreign_plans="yes")
