"""A model of how a commit writes the metadata table beside writers frozen past their fence, for
:mod:`tests.model.explorer`: where it lists the metadata table (``metadata_files.read_ahead``),
and when it compacts the files partition (``metadata_files.after_decided``).

A commit writes its metadata-table deltacommit, and when due a compaction of the files
partition, from a listing of the metadata table. A compaction gets a time; a reader takes the
newest base and the logs that completed at or after its time, so a log older than the newest
base that the base did not merge is in no slice a reader takes. A writer frozen past its fence
(its lease lapsed) may thaw and write either while another writer holds the lock.

What it covers
--------------
Storage: the metadata table as its writes in order: logs (one per deltacommit: its writer,
its completion time, the listing it was written from) and compactions (their writer, time, and
the deltacommits merged into the base); the decision log as who decided each sequence number
(create-if-absent) and their completion times.

Lock: a lease with one holder. A writer may *pause* while it believes it holds the lock: the
lease lapses and another writer may take the lock, while the paused writer later carries on as
if it still held it (past its fence, it writes its deltacommit and tries to decide).

Times: a completion is issued above the completion of every decision its writer read (the
floor), either just above it or at the wall clock, which has moved past every time issued so
far (both are explored: a writer that thaws issues its time late).

Each writer commits one batch, each step one atomic action: take the lock; read the decision
log; list the metadata table (where, by ``Config.listing``); the fence (the lock still ours,
probed on the server); issue its completion and write its deltacommit (a compaction first, with
``compaction="before-deltacommit"``, at its completion time); create ``decisions/<N+1>`` (lost
if it exists: it aborts, and what it wrote stays); then, decided, compact at its completion
time (``compaction="after-decision"``, the code) and release. Every commit compacts (as if
always due: the worst case).

``Config.listing``: ``after-log-read`` (the code: sent once the decision log's listing is in,
beside the data timeline's), ``after-fence`` (right before the deltacommit, as first written).
Mutants: ``listing="beside-log-read"`` (sent as the lock is taken, beside the decision log's
listing, so either may be answered first: a writer past its fence whose lease lapsed can write
its deltacommit and decide between the two), ``listing="before-lock"``, and
``compaction="before-deltacommit"`` (as Hudi's writer compacts: a writer that then loses its
decision leaves a compaction, timed after a commit decided meanwhile, that leaves that
commit's log out), and ``undo="before-own"`` (every pending compaction undone before planning
one's own: a decided writer paused between planning its compaction and completing it then
completes one whose base is gone, the newest until the undoer completes its own).

A compaction is three steps: plan it and write its base (none when one at the same time is
pending), complete it (whatever happened meanwhile), then undo the pending compactions older
than it (``undo="after-own"``, the code): a late completion of one of those is never the
newest.

Invariants: a decided commit's deltacommit was written from a listing that holds the
deltacommit of every commit decided before it; every decided commit's deltacommit is in the
newest slice (merged into its base or on top of it); the newest completed compaction has its
base.

What it abstracts
-----------------
One batch per writer, no crash (a crash is a pause that never resumes: its effects are a
subset), no cleaner (it takes the lock and writes the metadata table as any writer does), no
Hudi JVM writer (it does not read the decision log: a writer of ours pausing past its fence
beside one is the limit ``commit_protocol.py`` already records). A compaction stays below a
pending data instant whose deltacommit is listed (``compaction_time``): not modelled, it only
makes compactions older. A settings change under the lock (a metadata partition dropped)
discards the listing in the code and is not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional

from tests.model import explorer

LISTINGS = ("after-log-read", "after-fence", "beside-log-read", "before-lock")
COMPACTIONS = ("after-decision", "before-deltacommit", "none")
UNDOS = ("after-own", "before-own")


@dataclass(frozen=True)
class Config:
    writers: int = 2
    pauses: int = 1  # pauses per writer
    listing: str = "after-log-read"
    compaction: str = "after-decision"
    undo: str = "after-own"

    def __post_init__(self) -> None:
        assert self.listing in LISTINGS, self.listing
        assert self.compaction in COMPACTIONS, self.compaction
        assert self.undo in UNDOS, self.undo


class Writer(NamedTuple):
    pc: str = "idle"  # idle, locked, fenced, timed, written, decided, compacting, completed, compacted, done, aborted
    listing: Optional[int] = None  # how many metadata-table writes its listing saw (a prefix)
    n: Optional[int] = None  # the newest decision it read
    c: int = 0  # its completion time, once issued
    pauses: int = 0


class Entry(NamedTuple):
    kind: str  # "log" or "compaction"
    who: int
    time: int
    saw: frozenset  # a log: the deltacommits its listing held; a compaction: what its base merged


class State(NamedTuple):
    lock: Optional[int]
    mdt: tuple  # Entry, in write order
    decided: tuple  # decided[seq - 1] = (writer, completion) of decisions/<seq>
    clock: int  # the latest time issued (the wall clock is past it)
    writers: tuple
    pending: frozenset = frozenset()  # (writer, time) of compactions planned, their base written, not completed
    deleted: frozenset = frozenset()  # times of compactions whose base an undo deleted


def initial(cfg: Config) -> State:
    return State(lock=None, mdt=(), decided=(), clock=0, writers=tuple(Writer() for _ in range(cfg.writers)))


def _set(s: State, i: int, w: Writer, **kw) -> State:
    ws = list(s.writers)
    ws[i] = w
    return s._replace(writers=tuple(ws), **kw)


def _slice(entries: tuple) -> tuple[int, frozenset]:
    """The newest slice of ``entries``: its base's time (0 without one) and the deltacommits it
    holds (the base's merged ones, the logs at or after its time)."""
    bases = [e for e in entries if e.kind == "compaction"]
    base = max(bases, key=lambda e: e.time, default=None)
    t, merged = (0, frozenset()) if base is None else (base.time, base.saw)
    return t, merged | frozenset(e.who for e in entries if e.kind == "log" and e.time >= t)


def _logs(entries: tuple) -> frozenset:
    return frozenset(e.who for e in entries if e.kind == "log")


def _compaction(s: State, i: int, w: Writer) -> Entry:
    """A compaction at ``w``'s completion time of the newest slice its listing shows: the base
    and the logs that completed before that time (a log at or after it stays on top)."""
    assert w.listing is not None
    seen = s.mdt[:w.listing]
    base_t, _ = _slice(seen)
    bases = [e for e in seen if e.kind == "compaction"]
    merged = max(bases, key=lambda e: e.time).saw if bases else frozenset()
    merged |= frozenset(e.who for e in seen if e.kind == "log" and base_t <= e.time < w.c)
    return Entry("compaction", i, w.c, merged)


def successors(cfg: Config, s: State) -> Iterator[tuple[str, State]]:
    for i, w in enumerate(s.writers):
        yield from _steps(cfg, s, i, w)


def _steps(cfg: Config, s: State, i: int, w: Writer) -> Iterator[tuple[str, State]]:
    name = f"W{i}"
    if w.pc in ("done", "aborted"):
        return
    compacting = ("decided", "compacting", "completed") if cfg.compaction == "after-decision" else ()
    if (w.pc not in ("idle", "decided", "compacted") or w.pc in compacting) and s.lock == i and w.pauses < cfg.pauses:
        yield f"{name} pauses: its lease lapses", _set(s, i, w._replace(pauses=w.pauses + 1), lock=None)
    listed = len(s.mdt)
    if w.pc == "idle":
        if cfg.listing == "before-lock" and w.listing is None:
            yield f"{name} lists the metadata table (before the lock)", _set(s, i, w._replace(listing=listed))
            return
        if s.lock is None:
            yield f"{name} takes the lock", _set(s, i, w._replace(pc="locked"), lock=i)
        return
    if w.pc == "locked":
        if w.listing is None and (cfg.listing == "beside-log-read" or cfg.listing == "after-log-read" and w.n is not None):
            yield f"{name} lists the metadata table", _set(s, i, w._replace(listing=listed))
        if w.n is None:
            yield f"{name} reads the decision log", _set(s, i, w._replace(n=len(s.decided)))
        if w.n is not None and (w.listing is not None or cfg.listing == "after-fence"):
            if s.lock == i:
                yield f"{name} passes the fence", _set(s, i, w._replace(pc="fenced"))
            else:
                yield f"{name} fails the fence: aborts", _set(s, i, w._replace(pc="aborted"))  # not its lock
        return
    if w.pc == "fenced":
        if cfg.listing == "after-fence" and w.listing is None:
            yield f"{name} lists the metadata table", _set(s, i, w._replace(listing=listed))
            return
        assert w.n is not None
        floor = max((c for _, c in s.decided[:w.n]), default=0) + 1
        for c in sorted({floor, s.clock + 1}):
            yield (f"{name} issues its completion {c}",
                   _set(s, i, w._replace(pc="timed", c=c), clock=max(s.clock, c)))
        return
    if w.pc == "timed":
        assert w.listing is not None
        mdt = s.mdt
        if cfg.compaction == "before-deltacommit":
            mdt += (_compaction(s, i, w),)
        yield (f"{name} writes its deltacommit" + (" after a compaction" if len(mdt) > len(s.mdt) else "")
               + f" from a listing of the first {w.listing} writes",
               _set(s, i, w._replace(pc="written"), mdt=mdt + (Entry("log", i, w.c, _logs(s.mdt[:w.listing])),)))
        return
    if w.pc == "written":
        assert w.n is not None
        if len(s.decided) == w.n:
            yield (f"{name} creates decisions/{w.n + 1}",
                   _set(s, i, w._replace(pc="decided"), decided=s.decided + ((i, w.c),)))
        else:
            yield (f"{name} finds decisions/{w.n + 1} taken: lost, aborts",
                   _set(s, i, w._replace(pc="aborted"), lock=None if s.lock == i else s.lock))
        return
    if w.pc == "decided" and cfg.compaction == "after-decision":
        if any(t == w.c for _, t in s.pending):  # a compaction at this very time is under way: none now
            yield f"{name} finds a compaction at {w.c} pending: compacts nothing", _set(s, i, w._replace(pc="compacted"))
            return
        deleted, pending = s.deleted, s.pending
        if cfg.undo == "before-own":  # every pending compaction undone first, as the code first did
            deleted |= {t for _, t in pending}
            pending = frozenset()
        yield (f"{name} plans its compaction at {w.c} and writes its base"
               + (" after undoing the pending ones" if pending != s.pending else ""),
               _set(s, i, w._replace(pc="compacting"), pending=pending | {(i, w.c)}, deleted=deleted))
        return
    if w.pc == "compacting":  # completes it whatever happened meanwhile (its base may be gone)
        entry = _compaction(s, i, w)
        yield (f"{name} completes its compaction at {w.c}",
               _set(s, i, w._replace(pc="completed"), mdt=s.mdt + (entry,), pending=s.pending - {(i, w.c)}))
        return
    if w.pc == "completed":
        older = {(who, t) for who, t in s.pending if t < w.c} if cfg.undo == "after-own" else set()
        yield (f"{name} undoes the pending compactions older than its own",
               _set(s, i, w._replace(pc="compacted"), pending=s.pending - older,
                    deleted=s.deleted | {t for _, t in older}))
        return
    if w.pc in ("decided", "compacted"):
        yield f"{name} releases", _set(s, i, w._replace(pc="done"), lock=None if s.lock == i else s.lock)


def decided_from_a_complete_listing(s: State) -> Optional[str]:
    listings = {e.who: e.saw for e in s.mdt if e.kind == "log"}
    for seq, (who, _) in enumerate(s.decided):
        missed = {w for w, _ in s.decided[:seq]} - listings[who]
        if missed:
            return (f"W{who} was decided (decisions/{seq + 1}) with a deltacommit written from a listing "
                    f"missing the deltacommit of {sorted(f'W{m}' for m in missed)}, decided before it")
    return None


def decided_commits_stay_visible(s: State) -> Optional[str]:
    lost = {w for w, _ in s.decided} - _slice(s.mdt)[1]
    if lost:
        return (f"the deltacommit of {sorted(f'W{w}' for w in lost)}, decided, is in no slice a reader takes: "
                "a compaction from a listing without it has a later time")
    return None


def newest_base_exists(s: State) -> Optional[str]:
    bases = [e for e in s.mdt if e.kind == "compaction"]
    newest = max(bases, key=lambda e: e.time, default=None)
    if newest is not None and newest.time in s.deleted:
        return f"the newest completed compaction, W{newest.who}'s at {newest.time}, has no base: an undo deleted it"
    return None


def quiescent(s: State) -> bool:
    return all(w.pc in ("done", "aborted") for w in s.writers)


def someone_decided(s: State) -> Optional[str]:
    return None if s.decided or any(w.pauses for w in s.writers) else "no pause, yet nothing was decided"


def check(cfg: Config, max_states: int = 1_000_000) -> explorer.Result:
    return explorer.explore(initial(cfg), lambda s: successors(cfg, s),
                            invariants=[("decided from a complete listing", decided_from_a_complete_listing),
                                        ("decided commits stay visible", decided_commits_stay_visible),
                                        ("the newest base exists", newest_base_exists)],
                            final=[("progress", someone_decided)], is_final=quiescent, max_states=max_states)
