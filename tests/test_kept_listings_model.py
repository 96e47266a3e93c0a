"""Kept listings (``Storage.listings_kept`` / ``listings_fresh``) against a model, over every
interleaving Hypothesis finds of: listings of the data timeline and of other folders, writes
and deletes of this process, writes of another process, and blocks opened and closed.

What a cleaner run relies on when it plans between its lock holds:

* a listing is a snapshot of the folder as it was when it was last read from storage, and that
  read came after this process's own last write there (its own writes always show);
* inside a fresh block every listing is read from storage;
* no listing of a file folder is older than the data timeline's listing handed out before it
  (the ``anchor``): a plan made on a timeline and a listing of files, caught up under the lock
  with the commits completed after that timeline, never misses a commit in between.

The real storage on a local disk; the model is a clock, each folder's contents at every tick,
and the time of each read from storage.
"""
from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from multiwriter.storage import Storage

TIMELINE = ".hoodie/timeline"
FOLDERS = (TIMELINE, "p1", ".hoodie/metadata/files")


class KeptListings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.root = tempfile.mkdtemp(prefix="mw-kept-")
        self.s = Storage(self.root)
        for f in FOLDERS:
            self.s.makedirs(f)
        self.clock = 0
        self.names = itertools.count()
        self.history: dict[str, list[tuple[int, frozenset[str]]]] = {f: [(0, frozenset())] for f in FOLDERS}
        self.own_write: dict[str, int] = {f: -1 for f in FOLDERS}
        self.block_read: dict[str, int] = {}  # folder -> tick of its last read from storage inside a block
        self.blocks: list[tuple[object, bool]] = []
        self.reads: list[str] = []
        self.timeline_read = -1  # the read time of the last timeline listing handed out
        real = Storage._list_dir

        def counted(storage: Storage, rel: str, *a, **k):
            self.reads.append(rel.rstrip("/"))
            return real(storage, rel, *a, **k)

        self._real = real
        Storage._list_dir = counted  # restored in teardown

    def teardown(self) -> None:
        Storage._list_dir = self._real
        for cm, _ in reversed(self.blocks):
            cm.__exit__(None, None, None)
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _now(self, folder: str) -> frozenset[str]:
        return self.history[folder][-1][1]

    def _at(self, folder: str, t: int) -> frozenset[str]:
        return [names for tick, names in self.history[folder] if tick <= t][-1]

    def _changed(self, folder: str, names: frozenset[str]) -> None:
        self.history[folder].append((self._tick(), names))

    @rule(folder=st.sampled_from(FOLDERS))
    def own_write(self, folder: str) -> None:
        name = f"f{next(self.names)}"
        self.s.write_bytes(f"{folder}/{name}", b"x")
        self._changed(folder, self._now(folder) | {name})
        self.own_write[folder] = self.clock

    @rule(folder=st.sampled_from(FOLDERS), data=st.data())
    def own_delete(self, folder: str, data) -> None:
        if not self._now(folder):
            return
        name = data.draw(st.sampled_from(sorted(self._now(folder))))
        self.s.delete(f"{folder}/{name}")
        self._changed(folder, self._now(folder) - {name})
        self.own_write[folder] = self.clock

    @rule(folder=st.sampled_from(FOLDERS))
    def other_process_write(self, folder: str) -> None:
        import os

        name = f"o{next(self.names)}"
        with open(os.path.join(self.root, folder, name), "wb") as f:
            f.write(b"y")
        self._changed(folder, self._now(folder) | {name})

    @rule(fresh=st.booleans())
    @precondition(lambda self: len(self.blocks) < 4)
    def open_block(self, fresh: bool) -> None:
        cm = self.s.listings_fresh() if fresh else self.s.listings_kept()
        cm.__enter__()
        self.blocks.append((cm, fresh))

    @rule()
    @precondition(lambda self: self.blocks)
    def close_block(self) -> None:
        cm, _ = self.blocks.pop()
        cm.__exit__(None, None, None)
        if not self.blocks:
            self.block_read.clear()
            self.timeline_read = -1

    @rule(folder=st.sampled_from(FOLDERS))
    def list_folder(self, folder: str) -> None:
        now = self._tick()
        self.reads.clear()
        got = frozenset(e.path.rsplit("/", 1)[-1] for e in
                        self.s.list_dir(folder, files_only=True, anchor=folder == TIMELINE))
        read = bool(self.reads)
        if self.blocks and self.blocks[-1][1]:
            assert read, f"{folder}: listed from what was kept inside a fresh block"
        if read:
            t_read = now
            if self.blocks:
                self.block_read[folder] = now
        else:
            assert self.blocks and folder in self.block_read, f"{folder}: served from nothing read"
            t_read = self.block_read[folder]
        assert got == self._at(folder, t_read), f"{folder}: not the folder as it was at its read ({t_read})"
        assert t_read > self.own_write[folder], f"{folder}: kept from before this process's own write"
        if folder == TIMELINE:
            self.timeline_read = t_read
        elif self.blocks:
            assert t_read >= self.timeline_read, \
                f"{folder}: listed at {t_read}, before the timeline handed out (read at {self.timeline_read})"

    @invariant()
    def outside_blocks_nothing_is_kept(self) -> None:
        if not self.blocks:
            assert not self.s.keeps_listings()


KeptListings.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_kept_listings_model = KeptListings.TestCase
