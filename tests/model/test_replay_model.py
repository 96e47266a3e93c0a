"""Exactly-once batches under crashes after the commit decision: a Hypothesis state machine against
the real writer, table and decision log (local disk, in-process lock).

Writer ``w`` delivers batches 0, 1, 2, ... as a streaming driver does: it moves to the next batch
only when a write returns (committed or skipped as a replay). It may die right after deciding a
batch, before its completed file (the driver then replays that batch), and restart at any time
(its first look at its checkpoint is then whatever the timeline shows). Writer ``x`` commits its
own batches in between, rolling forward what ``w`` decided. In every state, each of ``w``'s
batches is held by at most one commit, and every batch ``w`` moved past by at least one. The
oracle reads the Avro commit files directly.

Without the check of the checkpoint carried to a commit's base (``carried`` in
``transaction._check_duplicate``), the machine finds a batch committed twice."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import fastavro
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import multiwriter as mw
from multiwriter.table import decisions
from multiwriter.format import instant as inst
from multiwriter.format.instant import Instant
from tests.conftest import TRIPS_SCHEMA, trips


def cfg(writer: str) -> mw.WriterConfig:
    return mw.WriterConfig(writer_id=writer, lock=mw.InProcessLock(), executor="driver")


def commits_by_batch(path: str, writer: str) -> dict[int, int]:
    """How many completed commits of ``writer`` hold each of its batches (their own checkpoint)."""
    out: dict[int, int] = {}
    for f in Path(path, ".hoodie", "timeline").glob("*_*.commit"):
        with open(f, "rb") as fh:
            extra = next(iter(fastavro.reader(fh))).get("extraMetadata") or {}
        if extra.get("multiwriter.writer_id") == writer:
            b = int(json.loads(extra["_hudi_streaming_sink_checkpoint"])[writer])
            out[b] = out.get(b, 0) + 1
    return out


class Replays(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mw-replay-")
        self.path = f"{self.dir}/t"
        mw.Table.create(self.path, name="t", schema=TRIPS_SCHEMA, record_key="id", partition_by=["date"],
                        ordering_field="ts")
        self.w = mw.Writer(mw.Table.open(self.path), cfg("w"))
        self.w_next = 0  # the driver's next batch of w
        self.x_next = 0

    def _w_rows(self, batch: int):
        return trips([f"w{batch}"], ts=batch, value=float(batch))

    @rule()
    def w_writes(self) -> None:
        self.w.write(self._w_rows(self.w_next), batch_id=self.w_next)
        self.w_next += 1

    @rule()
    def w_decides_and_dies(self) -> None:
        """The batch is decided, its completed file never written, the process gone: the driver
        restarts and replays the batch."""
        real = decisions.write_completed

        def dies(storage, config, instant_time, completion, action, data):
            return Instant(instant_time, action, inst.COMPLETED, completion)  # nothing written

        decisions.write_completed = dies
        try:
            self.w.write(self._w_rows(self.w_next), batch_id=self.w_next)
        finally:
            decisions.write_completed = real
        self.w_restarts_and_looks()  # a restarted driver reads its checkpoint first

    @rule()
    def w_restarts_and_looks(self) -> None:
        self.w = mw.Writer(mw.Table.open(self.path), cfg("w"))
        self.w.last_checkpoint()

    @rule()
    def x_writes(self) -> None:
        mw.write(trips([f"x{self.x_next}"], ts=self.x_next, value=-1.0), self.path, cfg("x"), batch_id=self.x_next)
        self.x_next += 1

    @invariant()
    def each_batch_once(self) -> None:
        held = commits_by_batch(self.path, "w")
        assert all(n == 1 for n in held.values()), f"a batch of w committed more than once: {held}"
        missing = [b for b in range(self.w_next) if b not in held]
        assert not missing, f"batches {missing} of w were passed but never committed: {held}"

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


Replays.TestCase.settings = settings(max_examples=80, stateful_step_count=6, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
test_each_batch_commits_once_through_crashes_after_the_decision = Replays.TestCase
