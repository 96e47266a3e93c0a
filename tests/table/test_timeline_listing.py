"""A timeline load starts from this process's previous listing of the timeline: it must show
exactly what a load from scratch shows after any change other processes make in between
(instants requested, completed, rolled back, archived; other files)."""
from __future__ import annotations

import os
import random

import multiwriter as mw
from multiwriter.format import instant as inst
from multiwriter.format.instant import Instant
from multiwriter.table import timeline as tlmod
from multiwriter.table.metadata import CommitMetadata


def _time(n: int) -> str:
    return f"2025{n:013d}"


class _Other:
    """Another process's hand on the timeline directory, with the truth of what it holds."""

    def __init__(self, table: mw.Table) -> None:
        self.dir = os.path.join(table.path, table.config.timeline_dir)
        self.files: dict[str, str] = {}  # name -> marker in a completed write's metadata ('' otherwise)
        for name in os.listdir(self.dir):
            self.files[name] = ""
        self.n = 0

    def _put(self, i: Instant, marker: str = "") -> None:
        name = i.file_name()
        data = CommitMetadata(extra_metadata={"marker": marker}).to_bytes() if marker else b""
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)
        self.files[name] = marker

    def _drop(self, name: str) -> None:
        os.remove(os.path.join(self.dir, name))
        del self.files[name]

    def request(self, t: str | None = None, action: str = inst.COMMIT) -> None:
        if t is None:
            self.n += 2
            t = _time(self.n)
        self._put(Instant(t, action, inst.REQUESTED))
        self._put(Instant(t, action, inst.INFLIGHT))

    def request_late(self, rng: random.Random) -> None:
        """A writer whose clock is behind: a requested time below others already listed, now
        and then one that another action holds already."""
        self.request(_time(rng.randrange(1, self.n + 2)), rng.choice([inst.COMMIT, inst.CLEAN]))

    def pending(self) -> list[Instant]:
        done = {i.requested_time for i in self.instants() if i.is_completed}
        return [i for i in self.instants() if i.state == inst.INFLIGHT and i.requested_time not in done]

    def complete(self, rng: random.Random, i: Instant | None = None) -> None:
        if self.pending():
            i = i or rng.choice(self.pending())
            self._put(Instant(i.requested_time, i.action, inst.COMPLETED, _time(self.n + 1)), marker=f"m{rng.random()}")

    def roll_back(self, rng: random.Random, i: Instant | None = None) -> None:
        if self.pending():
            t = (i or rng.choice(self.pending())).requested_time
            for name in [n for n in self.files if n.startswith(t)]:
                self._drop(name)

    def archive(self) -> None:
        done = [i for i in self.instants() if i.is_completed]
        if done:
            for name in [n for n in self.files if n.startswith(done[0].requested_time)]:
                self._drop(name)

    def stray(self, rng: random.Random) -> None:
        name = f"stray-{rng.randrange(1000)}.tmp"
        with open(os.path.join(self.dir, name), "wb"):
            pass
        self.files[name] = ""

    def instants(self) -> list[Instant]:
        decoded = (inst.decode_file_name(n) for n in self.files)
        return sorted((i for i in decoded if i is not None), key=lambda i: (i.requested_time, i.state))

    def check(self, tl: tlmod.Timeline) -> None:
        assert tl.instants == self.instants()
        # the views carried from listing to listing are the ones worked out from the instants
        fresh = tlmod.Timeline(tl.storage, tl.config, self.instants())
        assert tl.latest_states() == fresh.latest_states() and tl.pending() == fresh.pending()
        assert tl.completed() == fresh.completed() and tl.completed_writes() == fresh.completed_writes()
        assert tl.max_time() == fresh.max_time() and tl.last_completed_write() == fresh.last_completed_write()
        assert tl.earliest_time() == fresh.earliest_time()
        for i in fresh.latest_states():
            assert tl.find(i.requested_time, i.action) == fresh.find(i.requested_time, i.action)
            assert tl.find(i.requested_time) == fresh.find(i.requested_time)
            assert tl.completed_after(i.completion_time) == [
                j for j in fresh.completed() if i.completion_time is None or
                (j.completion_time or j.requested_time) > i.completion_time]
        # parsed up front: the completed writes listed, no archived or rolled back one
        assert set(tl._meta_cache) == {tl.path_of(i) for i in tl.completed_writes()}
        for i in tl.completed_writes():
            want = self.files[i.file_name()]
            assert tl.commit_metadata(i).extra_metadata.get("marker", "") == want, i


def test_loads_follow_every_change_another_process_makes(trips_table):
    rng = random.Random(7)
    other = _Other(trips_table)
    steps = [other.request, lambda: other.complete(rng), lambda: other.roll_back(rng), other.archive,
             lambda: other.stray(rng), lambda: other.request_late(rng)]
    for _ in range(300):
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            rng.choices(steps, weights=[4, 4, 1, 1, 1, 1])[0]()
        other.check(trips_table.timeline())
    assert tlmod._CACHE.listing(trips_table.storage, trips_table.config) is not None


def test_a_pending_instant_completes_or_vanishes_between_loads(trips_table):
    other = _Other(trips_table)
    other.request()
    other.request()
    first, second = other.pending()
    assert trips_table.timeline().pending() == [first, second]
    other.complete(random.Random(0), first)
    other.roll_back(random.Random(0), second)
    tl = trips_table.timeline()
    other.check(tl)
    assert tl.find(first.requested_time).is_completed and tl.find(second.requested_time) is None
    assert tl.commit_metadata(tl.find(first.requested_time)).extra_metadata["marker"]


def test_a_listing_is_kept_only_while_the_cache_keeps_anything(trips_table, monkeypatch):
    """A cache of size 0 (a test standing in for a new process) keeps no listing either."""
    monkeypatch.setattr(tlmod, "_CACHE", tlmod._MetadataCache(0))
    trips_table.timeline()
    assert tlmod._CACHE.listing(trips_table.storage, trips_table.config) is None
