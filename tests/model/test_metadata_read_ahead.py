"""Every interleaving of the metadata-table listing model (tests/model/metadata_read_ahead.py),
and the order of those steps in the real commit.

Listed once the decision log's listing is in (the code) or right before the deltacommit, no
decided commit is built on a listing that misses one decided before it. Listed beside the
decision log as the lock is taken (as the code first did), or before the lock, the explorer finds
a trace where one is: a writer past its fence whose lease lapsed writes its deltacommit and
decides after the listing and before the decision log is read. The counterexamples print with
``-s``."""
from __future__ import annotations

import pytest

import multiwriter as mw
from multiwriter import transaction
from multiwriter.table import decisions, metadata_files
from tests.conftest import TRIPS_SCHEMA, trips
from tests.model.metadata_read_ahead import Config, check

SOUND = {
    "after the log read, two writers": Config(writers=2, pauses=1),
    "after the log read, three writers pausing twice": Config(writers=3, pauses=2),
    "after the fence, three writers pausing twice": Config(writers=3, pauses=2, listing="after-fence"),
}


@pytest.mark.parametrize("name", list(SOUND))
def test_every_decided_commit_is_built_on_what_was_decided_before_it(name):
    res = check(SOUND[name])
    print(f"\n{name}: {res.states} states, {res.transitions} transitions, {res.final_states} quiescent, "
          f"{res.seconds:.2f}s")
    assert res.violation is None, str(res.violation)
    assert not res.deadlocks
    assert res.final_states > 0


@pytest.mark.parametrize("cfg", [Config(writers=2, listing="beside-log-read"), Config(writers=2, listing="before-lock")],
                         ids=["listed-beside-the-log-read", "listed-before-the-lock"])
def test_without_the_guarding_step_a_commit_is_decided_on_a_stale_listing(cfg):
    res = check(cfg)
    assert res.violation is not None, f"no counterexample in {res.states} states"
    assert res.violation.invariant == "decided from a complete listing"
    print(f"\n{res.violation}")


def test_the_commit_lists_the_metadata_table_after_the_decision_log_and_before_the_fence(tmp_path, monkeypatch):
    """The model's order, in the real commit: the lock taken, the decision log's listing in, then
    the metadata table listed, the fence, the deltacommit from that listing, the decision."""
    path = str(tmp_path / "t")
    mw.Table.create(path, name="t", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"], ordering_field="ts",
                    properties={"hoodie.metadata.enable": "true"})
    cfg = mw.WriterConfig(writer_id="w", lock=mw.InProcessLock(), executor="driver")
    mw.write(trips(["a"]), path, cfg)  # the metadata table exists from here on
    steps: list[str] = []

    def record(name, real, after=False):
        def step(*a, **kw):
            if not after:
                steps.append(name)
            got = real(*a, **kw)
            if after:
                steps.append(name)
            return got
        return step

    tx = transaction.Transaction
    monkeypatch.setattr(tx, "_acquire", record("lock", tx._acquire))
    monkeypatch.setattr(decisions.DecisionLog, "_seqs", record("decision log listed", decisions.DecisionLog._seqs,
                                                                after=True))
    monkeypatch.setattr(metadata_files, "read_ahead", record("list ahead", metadata_files.read_ahead))
    monkeypatch.setattr(tx, "_fence", record("fence", tx._fence))
    monkeypatch.setattr(metadata_files, "on_completed", record("deltacommit", metadata_files.on_completed))
    monkeypatch.setattr(decisions.DecisionLog, "decide", record("decide", decisions.DecisionLog.decide))
    mw.write(trips(["b"]), path, cfg)
    i = steps.index("list ahead")
    assert "lock" in steps[:i] and steps[i - 1] == "decision log listed", steps
    later = [s for s in steps[i + 1:] if s in ("fence", "deltacommit", "decide", "lock")]
    assert later[:3] == ["fence", "deltacommit", "decide"], steps
