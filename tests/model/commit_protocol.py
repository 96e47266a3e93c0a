"""A model of the multi-writer commit protocol (the decision log), for :mod:`tests.model.explorer`.

What it covers
--------------
Storage: the timeline (pending files ``T.requested`` of writes and rollback plans, completed files
``T_C.action``), each write instant's data files (one slice of one file group), and the decision
log ``decisions/<seq>`` (create-if-absent; ``{complete, T, C}`` or ``{rollback, T}``; the newest
is the largest seq present).

Lock: a lease with one holder. Any of our writers (and the cleaner) may *pause*: its heartbeat
lapses and, if it holds the lock, the lease expires and the lock is free for another actor, while
the paused actor keeps its local state and later carries on as if it still held the lock (its
release is then a no-op). Each actor pauses at most ``pauses`` times.

Actors, each step one atomic read or write of shared storage:

* our writer ``W`` per batch: begin (lock, issue ``T`` above every time on the timeline, write
  ``T.requested``, release), write data files, lock, read the decision log (newest ``N``, roll
  ``D_N`` forward when its completed file is missing), read the timeline and check conflicts (a
  completed write on its file group with a completion time above its base) and the fence (``T``
  still pending, no rollback plan targets ``T``), issue ``C`` above every time seen, create
  ``decisions/<N+1>``, list decisions above ``N+1`` (when there are some: decided if ``T_C``
  exists, because a later holder read ours as the newest and rolled it forward; else the slot had
  been pruned: delete the stray, lost; ``rolled_forward_wins=False`` is the rule as first written,
  "any decision above means lost", which the model refutes), write ``T_C``, release and
  acknowledge. Losing or conflicting aborts the batch (data and pending files
  deleted, lock released) and the writer goes on with its next batch.
* a Hudi JVM writer: the same without the decision log (no roll-forward, no fence: it completes
  right after its conflict check). It never pauses: Hudi has the same windows when it does, and
  they are Hudi's, not ours.
* the cleaner, one run: lock, read the log and roll forward, read the timeline; roll back one
  pending write whose writer's heartbeat lapsed (it paused, crashed, or went on to another batch):
  rollback plan, ``decisions/<N+1> = {rollback, T}`` (on failure: re-read the log, roll forward,
  delete the plan), delete ``T``'s data and pending files, complete the rollback instant through
  the log (``{complete, R, C_R}``, then its completed file). Then clean (retention 1: the data of
  every slice that a newer completed write on the same group replaced), prune the decision log
  (every decision but the newest) and release.
* a consumer: each read takes the completed writes with a completion time in
  ``(offset, latest completion on the timeline]`` and moves its offset to that latest completion.
* crashes: up to ``crashes`` times, a writer or the cleaner loses its local state at any step
  (its files stay; the lease expires).

* data files: with ``files=2`` a batch writes two, each after the liveness check of
  ``multiwriter.write.guard``: the timeline listed at the first file (``T`` pending), the
  heartbeat client's own check at every file (it fails once the writer paused). A data file of an
  instant whose pending file a rollback deleted must never be written.

Mutants (``Config.mutant``): ``no-liveness-check`` and ``listing-once-without-client`` (the
timeline listed at the first file, the client never asked) need ``files=2``; ``no-decision`` (complete without the decision log), ``withdraw``
(the old protocol: no log; after the completed file re-list, and withdraw it when another
completion appeared), ``no-roll-forward`` (a holder ignores an unmaterialised newest decision),
``rollback-without-decision`` (the cleaner rolls back without deciding), ``ahead-after-release``
(with ``begin_ahead``: the next instant issued after the release, from the view of the hold).

* begin ahead (``begin_ahead``): the writer's acknowledging step also begins its next batch,
  in the same hold, before the release. The real writer does so only after a commit that
  rewrote no file group; the model does it after every commit, a superset of its behaviours.

What it abstracts
-----------------
* Times are logical integers, "above every time seen" is ``max + 1``: no clock, so the model
  assumes nothing about clocks (the real clock only adds wall time, and skew makes it no better).
* ``begin`` is one step (no pause inside it), a data write is one step, a listing is atomic
  (one consistent snapshot), requested and inflight are one pending file.
* A file group holds the rows of its slice: a write's slice is its own batch's rows merged onto
  the latest completed slice of the group when it began (copy-on-write); no keys, no updates, so
  every acknowledged batch's rows must stay in the snapshot.
* A heartbeat is "lapsed" for the cleaner from the moment its writer pauses (even when it has
  since resumed): the protocol must be safe whatever the cleaner believes.
* The consumer records which commits it delivered, not their files (its reads of replaced
  slices are a retention question, not modelled).
* Times: each process's clock never repeats a time, and with ``unique_times`` times carry their
  issuer (``SLOTS``); without it a lapsed actor can issue a time issued meanwhile by another
  (``unique_times=False`` shows it).
* A Hudi JVM writer is only safe next to ours when ours never pauses and never crashes between its
  decision and its completed file (the JVM writer does not read the log): the tests keep both
  counterexamples.
* Quiescence: every writer and the cleaner are done or crashed; there, any later lock holder
  would roll the newest decision forward, and the consumer reads once more.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional

MUTANTS = ("no-decision", "withdraw", "no-roll-forward", "rollback-without-decision", "no-liveness-check",
           "listing-once-without-client", "ahead-after-release")

WRITE, ROLLBACK = "commit", "rollback"
SLOTS = 10
CLEANER = "cleaner"


@dataclass(frozen=True)
class WriterSpec:
    kind: str = "ours"  # "ours" or "jvm"
    groups: tuple[str, ...] = ("g",)  # one file group per batch
    pauses: int = 1


@dataclass(frozen=True)
class Config:
    writers: tuple[WriterSpec, ...] = (WriterSpec(), WriterSpec())
    cleaner: bool = True
    cleaner_pauses: int = 1
    consumer_reads: int = 1
    crashes: int = 1
    prune: bool = True
    mutant: Optional[str] = None
    # times tagged with their issuer (see Model.issue); without it a lapsed actor can issue a time
    # that another actor issued meanwhile (the lock alone makes times unique)
    unique_times: bool = True
    # the decided check after creating decisions/<N+1>: when decisions above N+1 exist, the writer
    # lost only if its completed file is missing (nobody rolled its decision forward). Without it
    # (the brief as written: any decision above N+1 means lost), a writer whose decision a later
    # holder rolled forward and built on withdraws a visible commit.
    rolled_forward_wins: bool = True
    # data files per batch, each written after the liveness check (``multiwriter.write.guard``):
    # with 2, a writer may pause between its files
    files: int = 1
    # ``WriterConfig.begin_ahead_s``: after its completed file, still in the commit's lock hold,
    # a writer of ours begins its next batch's instant (``Transaction._begin_next``)
    begin_ahead: bool = False

    def __post_init__(self) -> None:
        assert self.mutant is None or self.mutant in MUTANTS, self.mutant


class Info(NamedTuple):
    """What an instant's files say (the requested file's plan, the data files' rows), plus, as a
    ghost for the invariants, which completed writes it saw when it began."""

    kind: str  # WRITE or ROLLBACK
    owner: int  # the actor's index
    group: Optional[str] = None
    row: Optional[tuple] = None  # the row its batch adds
    rows: frozenset = frozenset()  # the rows of its slice
    base: frozenset = frozenset()  # completed writes on the timeline at its begin
    target: Optional[int] = None  # a rollback's target


class Writer(NamedTuple):
    pc: str = "idle"
    batch: int = 0
    t: int = 0
    base_ct: int = 0
    n: int = 0
    seen_max: int = 0
    c: int = 0
    seen: frozenset = frozenset()  # completed writes at the check (the withdraw mutant)
    pauses: int = 0
    paused: bool = False
    clock: int = 0  # the last time it issued (a process's clock never repeats a time)
    files: int = 0  # data files of this batch written so far
    confirmed: bool = False  # the liveness check saw T pending on the timeline with sound beats


class Cleaner(NamedTuple):
    pc: str = "start"
    n: int = 0
    seen_max: int = 0
    target: int = 0
    r: int = 0
    pauses: int = 0
    paused: bool = False


class Consumer(NamedTuple):
    offset: int = 0
    reads: int = 0
    delivered: tuple = ()  # requested times of the commits delivered, in delivery order


class State(NamedTuple):
    pending: frozenset  # (t, kind) pending files on the timeline
    completed: frozenset  # (t, kind, completion) completed files
    data: frozenset  # t whose data files exist
    decisions: frozenset  # (seq, decision): ("complete", t, c) or ("rollback", t)
    lock: Optional[int]  # holder's actor index (the cleaner is len(writers))
    writers: tuple
    cleaner: Cleaner
    consumer: Consumer
    crashes: int
    info: tuple  # Info per time (index = t), None for completion-only times
    acked: frozenset  # ghost: requested times of acknowledged batches
    ever: frozenset  # ghost: every completed file that ever existed
    duplicate: bool = False  # ghost: a time was issued twice
    late: frozenset = frozenset()  # ghost: times a data file was written for after their rollback


# -- storage helpers ------------------------------------------------------------------------------

def max_time(s: State) -> int:
    m = 0
    for t, _ in s.pending:
        m = max(m, t)
    for t, _, c in s.completed:
        m = max(m, t, c)
    return m


def completion_of(s: State, t: int) -> Optional[int]:
    for u, _, c in s.completed:
        if u == t:
            return c
    return None


def completed_writes(s: State) -> list[tuple[int, int]]:
    return [(t, c) for t, k, c in s.completed if k == WRITE]


def is_pending(s: State, t: int) -> bool:
    return any(u == t for u, _ in s.pending) and completion_of(s, t) is None


def rollback_targets(s: State) -> set[int]:
    """Targets of rollback instants on the timeline, pending or completed (read from their plans)."""
    rb = {t for t, k in s.pending if k == ROLLBACK} | {t for t, k, _ in s.completed if k == ROLLBACK}
    return {s.info[r].target for r in rb}


def newest(s: State) -> tuple[int, Optional[tuple]]:
    if not s.decisions:
        return 0, None
    return max(s.decisions)


def latest_slice(s: State, group: str) -> Optional[int]:
    """The write whose slice is the group's snapshot: the completed write with the largest
    completion time (ties broken by requested time)."""
    best = None
    for t, c in completed_writes(s):
        if s.info[t].group == group and (best is None or (c, t) > best):
            best = (c, t)
    return None if best is None else best[1]


def roll_forward(s: State) -> State:
    """Materialise the newest decision when it is a completion whose completed file is missing."""
    _, d = newest(s)
    if d is not None and d[0] == "complete" and completion_of(s, d[1]) is None:
        t, c = d[1], d[2]
        return s._replace(completed=s.completed | {(t, s.info[t].kind, c)})
    return s


def release(s: State, actor: int) -> State:
    return s._replace(lock=None) if s.lock == actor else s


class InfoTable(tuple):
    """``Info`` per time, hashed once (a state's hash would otherwise walk it every time)."""

    def __hash__(self) -> int:
        try:
            return self.__dict__["_h"]
        except KeyError:
            h = self.__dict__["_h"] = tuple.__hash__(self)
            return h


def add_info(s: State, t: int, info: Info) -> State:
    rows = list(s.info) + [None] * (t + 1 - len(s.info))
    dup = rows[t] is not None
    rows[t] = info if not dup else rows[t]
    return s._replace(info=InfoTable(rows), duplicate=s.duplicate or dup)


def delete_instant(s: State, t: int) -> State:
    """Delete an instant's data files and its pending files (never its completed file)."""
    return s._replace(data=s.data - {t}, pending=frozenset(p for p in s.pending if p[0] != t))


# -- the model ------------------------------------------------------------------------------------

class Model:
    def __init__(self, config: Config):
        self.cfg = config
        self.m = config.mutant
        self.cleaner_id = len(config.writers)

    def issue(self, above: int, actor: int) -> int:
        """A time above ``above``: plain ``above + 1``, or, with ``unique_times``, the next multiple of
        ``SLOTS`` plus the issuer's index (two actors never issue the same time)."""
        if self.cfg.unique_times:
            return (above // SLOTS + 1) * SLOTS + actor
        return above + 1

    def initial(self) -> State:
        return State(
            pending=frozenset(), completed=frozenset(), data=frozenset(), decisions=frozenset(), lock=None,
            writers=tuple(Writer(pauses=w.pauses if w.kind == "ours" else 0) for w in self.cfg.writers),
            cleaner=Cleaner(pc="start" if self.cfg.cleaner else "done", pauses=self.cfg.cleaner_pauses),
            consumer=Consumer(reads=self.cfg.consumer_reads), crashes=self.cfg.crashes, info=InfoTable((None,)),
            acked=frozenset(), ever=frozenset(),
        )

    def name(self, i: int) -> str:
        if i == self.cleaner_id:
            return CLEANER
        return f"{'J' if self.cfg.writers[i].kind == 'jvm' else 'W'}{i + 1}"

    # every enabled step of every actor
    def successors(self, s: State) -> Iterator[tuple[str, State]]:
        for i, w in enumerate(s.writers):
            for label, nxt in self.writer_steps(s, i, w):
                yield f"{self.name(i)} {label}", self.ghost(nxt)
        for label, nxt in self.cleaner_steps(s, s.cleaner):
            yield f"cleaner {label}", self.ghost(nxt)
        if s.consumer.reads > 0:
            label, nxt = self.consume(s)
            yield label, nxt

    def ghost(self, s: State) -> State:
        if not s.completed <= s.ever:
            s = s._replace(ever=s.ever | s.completed)
        return s

    def consume(self, s: State) -> tuple[str, State]:
        cons = s.consumer
        writes = completed_writes(s)
        latest = max([c for _, c in writes], default=0)
        new = sorted((c, t) for t, c in writes if cons.offset < c <= latest)
        delivered = cons.delivered + tuple(t for _, t in new)
        offset = max(cons.offset, latest)
        label = f"consumer reads {[t for _, t in new]} up to {latest}"
        return label, s._replace(consumer=cons._replace(offset=offset, reads=cons.reads - 1, delivered=delivered))

    # -- writers ----------------------------------------------------------------------------------
    def set_writer(self, s: State, i: int, w: Writer) -> State:
        return s._replace(writers=s.writers[:i] + (w,) + s.writers[i + 1:])

    def next_batch(self, s: State, i: int, w: Writer) -> State:
        return self.set_writer(s, i, Writer(pc="idle", batch=w.batch + 1, pauses=w.pauses, clock=w.clock))

    def writer_steps(self, s: State, i: int, w: Writer) -> Iterator[tuple[str, State]]:
        spec = self.cfg.writers[i]
        if w.pc in ("done", "crashed"):
            return
        if w.pc != "idle":
            if s.crashes > 0:
                yield f"crashes at {w.pc}", self.set_writer(
                    release(s, i)._replace(crashes=s.crashes - 1), i, Writer(pc="crashed"))
            if w.pauses > 0 and (s.lock == i or self.cfg.cleaner):
                yield f"pauses at {w.pc} (heartbeat{' and lease' if s.lock == i else ''} lapse)", self.set_writer(
                    release(s, i), i, w._replace(pauses=w.pauses - 1, paused=True))
        step = getattr(self, f"w_{w.pc}")
        out = step(s, i, w, spec)
        if out is not None:
            yield out

    def w_idle(self, s: State, i: int, w: Writer, spec: WriterSpec):
        if w.batch >= len(spec.groups):
            return "is done", self.set_writer(s, i, Writer(pc="done"))
        if s.lock is not None:
            return None
        return self.begin(s, i, w, spec, max_time(s))

    def begin(self, s: State, i: int, w: Writer, spec: WriterSpec, seen_max: int):
        """Issue ``T`` above ``seen_max`` (and the writer's clock), write ``T.requested``; the
        base is what is completed now (under the lock nothing completes between the look and
        the issue, which is what makes ``seen_max`` current)."""
        group = spec.groups[w.batch]
        t = self.issue(max(seen_max, w.clock), i)
        writes = completed_writes(s)
        base_ct = max([c for _, c in writes], default=0)
        base_slice = latest_slice(s, group)
        rows = frozenset({(i, w.batch)}) | (s.info[base_slice].rows if base_slice is not None else frozenset())
        info = Info(WRITE, i, group, (i, w.batch), rows, frozenset(t2 for t2, _ in writes))
        s = add_info(s._replace(pending=s.pending | {(t, WRITE)}), t, info)
        return f"begins batch {w.batch} as T={t} on {group} (base {base_ct})", self.set_writer(
            s, i, w._replace(pc="write", t=t, base_ct=base_ct, clock=t, seen_max=0))

    def w_write(self, s: State, i: int, w: Writer, spec: WriterSpec):
        """One data file after the liveness check (``guard.check_alive``): the real check lists
        the timeline (``T`` pending) at the first file only, then asks the heartbeat client, which
        fails once the writer paused (a lapse: the cleaner may have rolled ``T`` back meanwhile).
        A failed check aborts the batch."""
        if not self.alive(s, w):
            return f"fails the liveness check before a data file of T={w.t}", self.set_writer(
                s, i, w._replace(pc="abort"))
        # with one file the check is abstracted away (the fence decides): only batches of two
        # files are judged by the no-late-file invariant
        late = s.late | ({w.t} if self.cfg.files > 1 and (w.t, WRITE) not in s.pending else frozenset())
        s = s._replace(data=s.data | {w.t}, late=late)
        files = w.files + 1
        nxt = "lock" if files >= self.cfg.files else "write"
        return f"writes data file {files} of T={w.t}", self.set_writer(
            s, i, w._replace(pc=nxt, files=files, confirmed=True))

    def alive(self, s: State, w: Writer) -> bool:
        if self.cfg.files <= 1 or self.m == "no-liveness-check":
            return True  # one file: the model abstracts the check away (the fence decides)
        pending = (w.t, WRITE) in s.pending
        if self.m == "listing-once-without-client":
            return w.confirmed or pending
        return not w.paused and (w.confirmed or pending)

    def w_lock(self, s: State, i: int, w: Writer, spec: WriterSpec):
        if s.lock is not None:
            return None
        nxt = "check" if spec.kind == "jvm" or self.m in ("no-decision", "withdraw") else "log"
        return "acquires the lock", self.set_writer(s._replace(lock=i), i, w._replace(pc=nxt))

    def w_log(self, s: State, i: int, w: Writer, spec: WriterSpec):
        n, d = newest(s)
        if self.m != "no-roll-forward":
            s = roll_forward(s)
        dc = d[2] if d is not None and d[0] == "complete" else 0
        return f"reads the decision log: newest {n} = {d}", self.set_writer(s, i, w._replace(pc="check", n=n, seen_max=dc))

    def w_check(self, s: State, i: int, w: Writer, spec: WriterSpec):
        group = s.info[w.t].group
        for t, c in completed_writes(s):
            if t != w.t and s.info[t].group == group and c > w.base_ct:
                return f"conflicts with T={t} (completed {c} > base {w.base_ct})", self.set_writer(s, i, w._replace(pc="abort"))
        if spec.kind == "ours" and (not is_pending(s, w.t) or w.t in rollback_targets(s)):
            return f"is fenced (T={w.t} no longer pending or targeted by a rollback)", self.set_writer(
                s, i, w._replace(pc="abort"))
        c = self.issue(max(max_time(s), w.seen_max, w.clock), i)
        if spec.kind == "jvm" or self.m == "no-decision":
            nxt = "complete"
        elif self.m == "withdraw":
            nxt = "complete"
        else:
            nxt = "decide"
        seen = frozenset(t for t, _ in completed_writes(s)) if self.m == "withdraw" else frozenset()
        return f"checks: no conflict, completion C={c}", self.set_writer(
            s, i, w._replace(pc=nxt, c=c, seen=seen, base_ct=0, seen_max=0, clock=c))

    def w_abort(self, s: State, i: int, w: Writer, spec: WriterSpec):
        return f"aborts T={w.t} (deletes its files, releases)", self.next_batch(release(delete_instant(s, w.t), i), i, w)

    def w_decide(self, s: State, i: int, w: Writer, spec: WriterSpec):
        seq = w.n + 1
        if any(q == seq for q, _ in s.decisions):
            return f"loses: decisions/{seq} exists", self.set_writer(s, i, w._replace(pc="abort"))
        s = s._replace(decisions=s.decisions | {(seq, ("complete", w.t, w.c))})
        nxt = "verify" if self.cfg.prune else "complete"
        return f"creates decisions/{seq} = complete T={w.t} C={w.c}", self.set_writer(s, i, w._replace(pc=nxt))

    def w_verify(self, s: State, i: int, w: Writer, spec: WriterSpec):
        if self.cfg.rolled_forward_wins and completion_of(s, w.t) is not None:
            return f"finds its completed file T={w.t} (rolled forward by a later holder): decided", self.set_writer(
                s, i, w._replace(pc="complete", n=0))
        if any(q > w.n + 1 for q, _ in s.decisions):
            return f"finds decisions above {w.n + 1} (its slot was pruned): lost", self.set_writer(
                s, i, w._replace(pc="stray"))
        return f"finds no decision above {w.n + 1}: decided", self.set_writer(s, i, w._replace(pc="complete", n=0))

    def w_stray(self, s: State, i: int, w: Writer, spec: WriterSpec):
        s = s._replace(decisions=s.decisions - {(w.n + 1, ("complete", w.t, w.c))})
        return f"deletes its stray decisions/{w.n + 1}", self.set_writer(s, i, w._replace(pc="abort"))

    def w_complete(self, s: State, i: int, w: Writer, spec: WriterSpec):
        s = s._replace(completed=s.completed | {(w.t, WRITE, w.c)})
        nxt = "relist" if self.m == "withdraw" and spec.kind == "ours" else "ack"
        return f"writes completed file T={w.t} C={w.c}", self.set_writer(s, i, w._replace(pc=nxt))

    def w_relist(self, s: State, i: int, w: Writer, spec: WriterSpec):
        raced = [t for t, _ in completed_writes(s) if t not in w.seen and t != w.t]
        if raced:
            s = delete_instant(s._replace(completed=s.completed - {(w.t, WRITE, w.c)}), w.t)
            return f"re-lists, sees T={raced[0]}: withdraws its completed file T={w.t}", self.next_batch(
                release(s, i), i, w)
        return "re-lists: no race", self.set_writer(s, i, w._replace(pc="ack"))

    def w_ack(self, s: State, i: int, w: Writer, spec: WriterSpec):
        ahead = self.cfg.begin_ahead and spec.kind == "ours" and w.batch + 1 < len(spec.groups)
        if ahead and self.m != "ahead-after-release":
            # the next batch's instant, begun in this hold (the writer may have paused past its
            # lease: the real writer's lock.is_held() cannot always tell, so it begins anyway;
            # its heartbeat starts then, as a begin's does)
            nxt = Writer(pc="idle", batch=w.batch + 1, pauses=w.pauses, clock=w.clock)
            label, s = self.begin(s, i, nxt, spec, max_time(s))
            s = release(s, i)._replace(acked=s.acked | {w.t})
            return f"begins ahead: {label}; releases, acknowledges T={w.t}", s
        s = release(s, i)._replace(acked=s.acked | {w.t})
        if ahead:  # the mutant: the next instant issued after the release, from the view of the hold
            return f"releases, acknowledges T={w.t}", self.set_writer(
                s, i, Writer(pc="ahead", batch=w.batch + 1, pauses=w.pauses, clock=w.clock, seen_max=max_time(s)))
        return f"releases, acknowledges T={w.t}", self.next_batch(s, i, w)

    def w_ahead(self, s: State, i: int, w: Writer, spec: WriterSpec):
        label, s = self.begin(s, i, w, spec, w.seen_max)
        return f"(no lock) {label}", s

    # -- cleaner ----------------------------------------------------------------------------------
    def set_cleaner(self, s: State, c: Cleaner) -> State:
        return s._replace(cleaner=c)

    def heartbeat_lapsed(self, s: State, t: int) -> bool:
        info = s.info[t]
        w = s.writers[info.owner]
        return w.pc in ("crashed", "done") or w.t != t or w.paused

    def cleaner_steps(self, s: State, c: Cleaner) -> Iterator[tuple[str, State]]:
        if c.pc in ("done", "crashed"):
            return
        me = self.cleaner_id
        if c.pc != "start":
            if s.crashes > 0:
                yield f"crashes at {c.pc}", self.set_cleaner(release(s, me)._replace(crashes=s.crashes - 1),
                                                             Cleaner(pc="crashed"))
            if c.pauses > 0:
                yield f"pauses at {c.pc} (lease{' lapses' if s.lock == me else ''})", self.set_cleaner(
                    release(s, me), c._replace(pauses=c.pauses - 1, paused=True))
        yield from getattr(self, f"c_{c.pc}")(s, c)

    def c_start(self, s: State, c: Cleaner):
        if s.lock is None:
            yield "acquires the lock", self.set_cleaner(s._replace(lock=self.cleaner_id), c._replace(pc="log"))

    def c_log(self, s: State, c: Cleaner):
        n, d = newest(s)
        if self.m != "no-roll-forward":
            s = roll_forward(s)
        dc = d[2] if d is not None and d[0] == "complete" else 0
        yield f"reads the decision log: newest {n} = {d}", self.set_cleaner(s, c._replace(pc="scan", n=n, seen_max=dc))

    def c_scan(self, s: State, c: Cleaner):
        seen_max = max(max_time(s), c.seen_max)
        yield "finds nothing to roll back", self.set_cleaner(s, c._replace(pc="clean", n=0, seen_max=0))
        targeted = rollback_targets(s)
        for t, k in sorted(s.pending):
            if k == WRITE and is_pending(s, t) and t not in targeted and self.heartbeat_lapsed(s, t):
                yield f"finds T={t} pending with a lapsed heartbeat", self.set_cleaner(
                    s, c._replace(pc="plan", target=t, seen_max=seen_max))

    def c_plan(self, s: State, c: Cleaner):
        r = self.issue(c.seen_max, self.cleaner_id)
        s = add_info(s._replace(pending=s.pending | {(r, ROLLBACK)}), r, Info(ROLLBACK, self.cleaner_id, target=c.target))
        nxt = "delete" if self.m == "rollback-without-decision" else "decide"
        yield f"writes rollback plan R={r} targeting T={c.target}", self.set_cleaner(
            s, c._replace(pc=nxt, r=r, seen_max=r))

    def c_decide(self, s: State, c: Cleaner):
        seq = c.n + 1
        if any(q == seq for q, _ in s.decisions):
            yield f"cannot create decisions/{seq}", self.set_cleaner(s, c._replace(pc="abandon"))
        else:
            s = s._replace(decisions=s.decisions | {(seq, ("rollback", c.target))})
            yield f"creates decisions/{seq} = rollback T={c.target}", self.set_cleaner(s, c._replace(pc="delete", n=seq))

    def c_abandon(self, s: State, c: Cleaner):
        n, d = newest(s)
        if self.m != "no-roll-forward":
            s = roll_forward(s)
        s = s._replace(pending=s.pending - {(c.r, ROLLBACK)})
        yield f"re-reads the log (newest {n} = {d}), rolls forward, deletes plan R={c.r}", self.set_cleaner(
            s, c._replace(pc="clean", n=0, target=0, r=0, seen_max=0))

    def c_delete(self, s: State, c: Cleaner):
        s = delete_instant(s, c.target)
        nxt = "rcomplete" if self.m == "rollback-without-decision" else "rdecide"
        yield f"deletes data and pending files of T={c.target}", self.set_cleaner(s, c._replace(pc=nxt))

    def c_rdecide(self, s: State, c: Cleaner):
        seq = c.n + 1
        cr = self.issue(c.seen_max, self.cleaner_id)
        if any(q == seq for q, _ in s.decisions):
            n, d = newest(s)
            if self.m != "no-roll-forward":
                s = roll_forward(s)
            yield f"cannot create decisions/{seq} (newest {n} = {d}): R={c.r} stays pending", self.set_cleaner(
                s, c._replace(pc="clean", n=0, target=0, r=0, seen_max=0))
        else:
            s = s._replace(decisions=s.decisions | {(seq, ("complete", c.r, cr))})
            yield f"creates decisions/{seq} = complete R={c.r} C={cr}", self.set_cleaner(
                s, c._replace(pc="rcomplete", seen_max=cr))

    def c_rcomplete(self, s: State, c: Cleaner):
        cr = self.issue(c.seen_max, self.cleaner_id) if self.m == "rollback-without-decision" else c.seen_max
        s = s._replace(completed=s.completed | {(c.r, ROLLBACK, cr)})
        yield f"completes rollback R={c.r} C={cr}", self.set_cleaner(
            s, c._replace(pc="clean", n=0, target=0, r=0, seen_max=0))

    def c_clean(self, s: State, c: Cleaner):
        writes = completed_writes(s)
        groups = {s.info[t].group for t, _ in writes}
        keep = {latest_slice(s, g) for g in groups}
        gone = sorted(t for t, _ in writes if t not in keep and t in s.data)
        s = s._replace(data=s.data - set(gone))
        nxt = "prune" if self.cfg.prune else "release"
        yield f"cleans replaced slices {gone}", self.set_cleaner(s, c._replace(pc=nxt))

    def c_prune(self, s: State, c: Cleaner):
        n, _ = newest(s)
        gone = sorted(q for q, _ in s.decisions if q < n)
        s = s._replace(decisions=frozenset(d for d in s.decisions if d[0] >= n))
        yield f"prunes decisions {gone}", self.set_cleaner(s, c._replace(pc="release"))

    def c_release(self, s: State, c: Cleaner):
        yield "releases", self.set_cleaner(release(s, self.cleaner_id), Cleaner(pc="done"))

    # -- invariants -------------------------------------------------------------------------------
    def is_final(self, s: State) -> bool:
        return all(w.pc in ("done", "crashed") for w in s.writers) and s.cleaner.pc in ("done", "crashed")

    def invariants(self):
        return [
            ("instant times unique", self.inv_unique),
            ("visible commit never disappears", self.inv_never_disappears),
            ("acknowledged batch not lost", self.inv_acked),
            ("completed commit's files exist", self.inv_files),
            ("conflict rule", self.inv_conflict),
            ("consumer offset", self.inv_consumer),
            ("decided commit not undone", self.inv_decided),
            ("no data file after its instant's rollback", self.inv_no_late_file),
        ]

    def final_checks(self):
        return [("exactly-once delivery at quiescence", self.final_exactly_once)]

    def inv_no_late_file(self, s: State) -> Optional[str]:
        return f"a data file of T={min(s.late)} was written after its rollback" if s.late else None

    def inv_unique(self, s: State) -> Optional[str]:
        return "two instants were issued the same requested time" if s.duplicate else None

    def inv_never_disappears(self, s: State) -> Optional[str]:
        gone = s.ever - s.completed
        return f"completed file(s) {sorted(gone)} deleted" if gone else None

    def snapshot_rows(self, s: State, group: str) -> frozenset:
        t = latest_slice(s, group)
        return s.info[t].rows if t is not None else frozenset()

    def inv_acked(self, s: State) -> Optional[str]:
        for t in s.acked:
            if completion_of(s, t) is None:
                return f"acknowledged T={t} has no completed file"
            info = s.info[t]
            own = info.row
            if own not in self.snapshot_rows(s, info.group):
                return f"acknowledged T={t}'s rows are not in the snapshot of {info.group}"
        return None

    def inv_files(self, s: State) -> Optional[str]:
        for t, c in completed_writes(s):
            if t in s.data:
                continue
            g = s.info[t].group
            if not any(s.info[u].group == g and (c2, u) > (c, t) for u, c2 in completed_writes(s)):
                return f"data files of completed T={t} (C={c}) are gone and no newer slice replaced it"
        return None

    def inv_conflict(self, s: State) -> Optional[str]:
        writes = sorted(completed_writes(s))
        for x, (a, _) in enumerate(writes):
            for b, _ in writes[x + 1:]:
                ia, ib = s.info[a], s.info[b]
                if ia.group == ib.group and a not in ib.base and b not in ia.base:
                    return f"T={a} and T={b} both completed on {ia.group}, neither saw the other"
        return None

    def inv_consumer(self, s: State) -> Optional[str]:
        d = s.consumer.delivered
        if len(set(d)) != len(d):
            return f"consumer delivered a commit twice: {d}"
        for t, c in completed_writes(s):
            if c <= s.consumer.offset and t not in d:
                return f"T={t} completed at {c}, at or below the consumer's offset {s.consumer.offset}: missed"
        return None

    def inv_decided(self, s: State) -> Optional[str]:
        n, d = newest(s)
        if d is not None and d[0] == "complete" and s.info[d[1]].kind == WRITE:
            t = d[1]
            if completion_of(s, t) is None and (t not in s.data or not any(p[0] == t for p in s.pending)):
                return f"newest decision {n} completes T={t} but its files were deleted before it was materialised"
        return None

    def final_exactly_once(self, s: State) -> Optional[str]:
        if self.m not in ("no-decision", "withdraw"):
            s = roll_forward(s)
        if s.consumer.reads == 0:
            s = s._replace(consumer=s.consumer._replace(reads=1))
        _, s = self.consume(s)
        d = s.consumer.delivered
        writes = sorted(t for t, _ in completed_writes(s))
        if sorted(d) != writes:
            return f"at quiescence the consumer delivered {sorted(d)}, the completed writes are {writes}"
        return self.inv_consumer(s)


def check(config: Config, max_states: int = 3_000_000, only: Optional[str] = None):
    """Explore every interleaving of the model under ``config`` (``only``: check just that invariant)."""
    from tests.model.explorer import explore

    model = Model(config)
    invariants = [(n, f) for n, f in model.invariants() if only is None or n == only]
    finals = model.final_checks() if only is None else []
    return explore(model.initial(), model.successors, invariants, finals,
                   is_final=model.is_final, max_states=max_states)
