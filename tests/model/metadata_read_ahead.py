"""A model of where a commit lists the metadata table (``metadata_files.read_ahead``), for
:mod:`tests.model.explorer`.

A commit writes its metadata-table deltacommit from a listing of the metadata table (which
deltacommits and log files exist: what to write next, what to compact, what the index
partitions hold). On an object store that listing is sent early in the lock hold, beside other
requests, rather than right before the deltacommit (a round of requests less in the hold). A
deltacommit written from a listing that misses another commit's deltacommit is sound only if
that other commit is never decided before it.

What it covers
--------------
Storage: the metadata table as the deltacommits written so far, each recording the listing it
was written from (the deltacommits it saw); the decision log as its newest sequence number and
who decided each (create-if-absent).

Lock: a lease with one holder. A writer may *pause* while it believes it holds the lock: the
lease lapses and another writer may take the lock, while the paused writer later carries on as
if it still held it (past its fence, it writes its deltacommit and tries to decide).

Each writer commits one batch, each step one atomic action: take the lock; read the decision
log; list the metadata table (where, by ``Config.listing``); the fence (the lock still ours,
probed on the server); write its deltacommit from its listing; create ``decisions/<N+1>``
(lost if it exists); release. A writer that fails the fence or loses the decision aborts (its
deltacommit, if any, belongs to an instant never decided).

``Config.listing``: ``after-log-read`` (the code: sent once the decision log's listing is in,
beside the data timeline's), ``after-fence`` (right before the deltacommit, as first written).
Mutants: ``beside-log-read`` (sent as the lock is taken, beside the decision log's listing, so
either may be answered first: a writer past its fence whose lease lapsed can write its
deltacommit and decide between the two), and ``before-lock``. (The fence is not what guards
this: with the listing after the log's, a commit decided after it takes the slot this commit
needs, fence or not.)

Invariant: a decided commit's deltacommit was written from a listing that holds the deltacommit
of every commit decided before it.

What it abstracts
-----------------
One batch per writer, no crash (a crash is a pause that never resumes: its effects are a
subset), no cleaner (it takes the lock and writes the metadata table as any writer does), no
Hudi JVM writer (it does not read the decision log: a writer of ours pausing past its fence
beside one is the limit ``commit_protocol.py`` already records). A settings change under the
lock (a metadata partition dropped) discards the listing in the code and is not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional

from tests.model import explorer

LISTINGS = ("after-log-read", "after-fence", "beside-log-read", "before-lock")


@dataclass(frozen=True)
class Config:
    writers: int = 2
    pauses: int = 1  # pauses per writer
    listing: str = "after-log-read"

    def __post_init__(self) -> None:
        assert self.listing in LISTINGS, self.listing


class Writer(NamedTuple):
    pc: str = "idle"  # idle, locked, fenced, written, decided, done, aborted
    listing: Optional[frozenset] = None  # the deltacommits (writer ids) its listing saw
    n: Optional[int] = None  # the newest decision it read
    pauses: int = 0


class State(NamedTuple):
    lock: Optional[int]
    mdt: tuple  # (writer, listing it was written from), in write order
    decided: tuple  # decided[seq - 1] = the writer that created decisions/<seq>
    writers: tuple


def initial(cfg: Config) -> State:
    return State(lock=None, mdt=(), decided=(), writers=tuple(Writer() for _ in range(cfg.writers)))


def _set(s: State, i: int, w: Writer, **kw) -> State:
    ws = list(s.writers)
    ws[i] = w
    return s._replace(writers=tuple(ws), **kw)


def _listed(s: State) -> frozenset:
    return frozenset(who for who, _ in s.mdt)


def successors(cfg: Config, s: State) -> Iterator[tuple[str, State]]:
    for i, w in enumerate(s.writers):
        yield from _steps(cfg, s, i, w)


def _steps(cfg: Config, s: State, i: int, w: Writer) -> Iterator[tuple[str, State]]:
    name = f"W{i}"
    if w.pc in ("done", "aborted"):
        return
    if w.pc not in ("idle", "decided") and s.lock == i and w.pauses < cfg.pauses:
        yield f"{name} pauses: its lease lapses", _set(s, i, w._replace(pauses=w.pauses + 1), lock=None)
    if w.pc == "idle":
        if cfg.listing == "before-lock" and w.listing is None:
            yield f"{name} lists the metadata table (before the lock)", _set(s, i, w._replace(listing=_listed(s)))
            return
        if s.lock is None:
            yield f"{name} takes the lock", _set(s, i, w._replace(pc="locked"), lock=i)
        return
    if w.pc == "locked":
        if w.listing is None and (cfg.listing == "beside-log-read" or cfg.listing == "after-log-read" and w.n is not None):
            yield f"{name} lists the metadata table", _set(s, i, w._replace(listing=_listed(s)))
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
            yield f"{name} lists the metadata table", _set(s, i, w._replace(listing=_listed(s)))
            return
        yield (f"{name} writes its deltacommit from a listing of {sorted(w.listing)}",
               _set(s, i, w._replace(pc="written"), mdt=s.mdt + ((i, w.listing),)))
        return
    if w.pc == "written":
        assert w.n is not None
        if len(s.decided) == w.n:
            yield f"{name} creates decisions/{w.n + 1}", _set(s, i, w._replace(pc="decided"), decided=s.decided + (i,))
        else:
            yield (f"{name} finds decisions/{w.n + 1} taken: lost, aborts",
                   _set(s, i, w._replace(pc="aborted"), lock=None if s.lock == i else s.lock))
        return
    if w.pc == "decided":
        yield f"{name} releases", _set(s, i, w._replace(pc="done"), lock=None if s.lock == i else s.lock)


def decided_from_a_complete_listing(s: State) -> Optional[str]:
    listings = {who: listing for who, listing in s.mdt}
    for seq, who in enumerate(s.decided):
        missed = set(s.decided[:seq]) - listings[who]
        if missed:
            return (f"W{who} was decided (decisions/{seq + 1}) with a deltacommit written from a listing "
                    f"missing the deltacommit of {sorted(f'W{m}' for m in missed)}, decided before it")
    return None


def quiescent(s: State) -> bool:
    return all(w.pc in ("done", "aborted") for w in s.writers)


def someone_decided(s: State) -> Optional[str]:
    return None if s.decided or any(w.pauses for w in s.writers) else "no pause, yet nothing was decided"


def check(cfg: Config, max_states: int = 200_000) -> explorer.Result:
    return explorer.explore(initial(cfg), lambda s: successors(cfg, s),
                            invariants=[("decided from a complete listing", decided_from_a_complete_listing)],
                            final=[("progress", someone_decided)], is_final=quiescent, max_states=max_states)
