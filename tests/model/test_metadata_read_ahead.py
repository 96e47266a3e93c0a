"""Every interleaving of the model of how a commit writes the metadata table beside writers
frozen past their fence (tests/model/metadata_read_ahead.py), and the order of those steps in the
real commit.

Listed once the decision log's listing is in (the code) or right before the deltacommit, the
files partition compacted only once the commit is decided, and a pending compaction undone only
once a newer one completed (the code): no decided commit is built on a listing that misses one
decided before it, none drops out of the newest slice, and the newest completed compaction
always has its base. Listed beside the decision log as the lock is taken (as the code first
did) or before the lock, compacted before the deltacommit as Hudi's writer does (as the code
first did: a writer that then loses its decision leaves a compaction timed after a commit
decided meanwhile), or every pending compaction undone before its own (as the code first did:
a decided writer paused inside its compaction completes it after its base was deleted), the
explorer finds a trace that breaks one. The counterexamples print with ``-s``."""
from __future__ import annotations

import pytest

import multiwriter as mw
from multiwriter import transaction
from multiwriter.table import decisions, metadata_files
from tests.conftest import TRIPS_SCHEMA, trips
from tests.model.metadata_read_ahead import Config, check

SOUND = {
    "two writers": Config(writers=2, pauses=1),
    "three writers": Config(writers=3, pauses=1),
    "listed after the fence, two writers": Config(writers=2, pauses=1, listing="after-fence"),
}


@pytest.mark.parametrize("name", list(SOUND))
def test_every_decided_commit_is_built_on_every_earlier_one_and_stays_in_the_newest_slice(name):
    res = check(SOUND[name])
    print(f"\n{name}: {res.states} states, {res.transitions} transitions, {res.final_states} quiescent, "
          f"{res.seconds:.2f}s")
    assert res.violation is None, str(res.violation)
    assert not res.deadlocks
    assert res.final_states > 0


@pytest.mark.parametrize("cfg,broken", [
    (Config(writers=2, listing="beside-log-read"), "decided from a complete listing"),
    (Config(writers=2, listing="before-lock"), "decided from a complete listing"),
    (Config(writers=2, compaction="before-deltacommit"), "decided commits stay visible"),
    (Config(writers=2, listing="after-fence", compaction="before-deltacommit"), "decided commits stay visible"),
    (Config(writers=2, undo="before-own"), "the newest base exists"),
], ids=["listed-beside-the-log-read", "listed-before-the-lock", "compacted-before-the-decision",
        "listed-after-the-fence-compacted-before-the-decision", "pending-compactions-undone-before-its-own"])
def test_without_the_guarding_step_a_decided_commit_is_built_on_or_left_out_of_a_stale_listing(cfg, broken):
    res = check(cfg)
    assert res.violation is not None, f"no counterexample in {res.states} states"
    assert res.violation.invariant == broken, str(res.violation)
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
