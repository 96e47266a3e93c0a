"""The active timeline: load instants, order completed ones by completion time, write instant
files atomically (create fails if the file exists, never overwrites).

Loading lists the timeline directory and then reads the metadata of every completed write
instant, so a loaded view answers from one listing. The cleaner archives instants concurrently
(it deletes their files after recording them in history); a file that vanishes between the
listing and the read makes the load list again, a bounded number of times. Instant files are
immutable, so their parsed metadata is shared between loads (keyed by path, size and mtime).
"""
from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from collections import Counter, OrderedDict
from functools import cached_property

from ..errors import InstantExistsError, TableFormatError
from ..storage import FileEntry, FileExists, Storage
from ..format import instant as inst
from . import metadata_files
from ..format.instant import Instant
from .metadata import CommitMetadata, decode_commit_metadata
from .properties import WRITE_VERSIONS, TableConfig
from ..threads import renew_in_child

log = logging.getLogger(__name__)

#: listings tried before a load gives up on a timeline that keeps changing under it
LOAD_ATTEMPTS = 8
_CACHE_SIZE = 2048


class Timeline:
    """An immutable view of the timeline at load time; load again for a fresh view."""

    def __init__(self, storage: Storage, config: TableConfig, instants: list[Instant]) -> None:
        self.storage = storage
        self.config = config
        self._instants = instants
        self._meta_cache: dict[str, CommitMetadata] = {}

    @classmethod
    def load(cls, storage: Storage, config: TableConfig) -> Timeline:
        """List the timeline and read every completed write's metadata from that listing;
        list again when archival removed a file in between (bounded by ``LOAD_ATTEMPTS``).
        Only what changed since this process's previous listing of the timeline is parsed,
        stat'ed and read (:class:`_Listing`)."""
        vanished = ""
        for attempt in range(1, LOAD_ATTEMPTS + 1):
            listing, vanished = _Listing.load(storage, config, _CACHE.listing(storage, config))
            if listing is not None:
                _CACHE.keep_listing(storage, config, listing)
                return cls._of(storage, config, listing)
            log.info("timeline load %d: %s vanished after listing (archived meanwhile); listing again", attempt, vanished)
        raise TableFormatError(
            f"{vanished}: instant files kept vanishing while loading the timeline ({LOAD_ATTEMPTS} listings); "
            "another process is deleting instants faster than they can be read: check that only the cleaner archives"
        )

    @classmethod
    def _of(cls, storage: Storage, config: TableConfig, listing: _Listing) -> Timeline:
        """The view of one listing, with the views it worked out (shared, never changed)."""
        tl = cls(storage, config, list(listing.instants))
        tl._meta_cache = dict(listing.meta)
        views = listing.views
        tl.__dict__.update(_state_by_time=views.state, _completed_all=views.done, _max_time=views.top,
                           _earliest=listing.instants[0].requested_time if listing.instants else None)
        return tl

    # -- views ---------------------------------------------------------------
    @property
    def instants(self) -> list[Instant]:
        return list(self._instants)

    @cached_property
    def _state_by_time(self) -> dict[tuple[str, str], Instant]:
        """Per (time, action), the most advanced state seen (a completed replacecommit completes
        the pending clustering of the same time: :func:`~.instant.instant_action`)."""
        return _latest_by_time(self._instants)

    @cached_property
    def _completed_all(self) -> list[Instant]:
        return _completed_of(self._state_by_time)

    @cached_property
    def _latest(self) -> list[Instant]:
        return sorted(self._state_by_time.values(), key=lambda i: i.requested_time)

    @cached_property
    def _max_time(self) -> str:
        return _max_time_of(self._instants)

    def latest_states(self) -> list[Instant]:
        return list(self._latest)

    def completed(self, actions: frozenset[str] | None = None) -> list[Instant]:
        """Completed instants ordered by completion time (requested time for version 6)."""
        done = self._completed_all
        return list(done) if actions is None else [i for i in done if i.action in actions]

    def completed_writes(self) -> list[Instant]:
        return self.completed(inst.WRITE_ACTIONS)

    def pending(self, actions: frozenset[str] | None = None) -> list[Instant]:
        return [
            i
            for i in self._latest
            if i.is_pending and (actions is None or i.action in actions)
        ]

    def pending_times(self) -> set[str]:
        """Requested times of the instants pending here (what
        :func:`~.metadata_files.pending_data_instants` lists)."""
        done = {i.requested_time for i in self._latest if i.is_completed}
        return {i.requested_time for i in self._latest if i.is_pending and i.requested_time not in done}

    def last_completed_write(self) -> Instant | None:
        for i in reversed(self._completed_all):
            if i.action in inst.WRITE_ACTIONS:
                return i
        return None

    def completed_write_times(self) -> dict[str, Instant]:
        return {i.requested_time: i for i in self.completed_writes()}

    def find(self, requested_time: str, action: str | None = None) -> Instant | None:
        if action is not None:  # one (time, action) holds one instant
            return self._state_by_time.get((requested_time, inst.instant_action(action)))
        cands = [i for (t, _), i in self._state_by_time.items() if t == requested_time]
        return cands[0] if cands else None

    def max_time(self) -> str:
        """The greatest requested or completion time on the timeline ('' if empty)."""
        return self._max_time

    def earliest_time(self) -> str | None:
        return self._earliest

    @cached_property
    def _earliest(self) -> str | None:
        return min((i.requested_time for i in self._instants), default=None)

    def as_of_completion(self, completion_time: str | None) -> Timeline:
        """The completed instants that had finished by ``completion_time`` (None: none), as a
        timeline: the base another process began from, rebuilt from a later listing."""
        kept = [i for i in self._instants
                if i.is_completed and completion_time is not None and (i.completion_time or i.requested_time) <= completion_time]
        view = Timeline(self.storage, self.config, kept)
        view._meta_cache = self._meta_cache  # the same files: share what was read
        return view

    def with_completed(self, i: Instant, meta: CommitMetadata) -> Timeline:
        """This view with ``i``, one of its pending instants, completed with ``meta``: what the
        completer itself would list next while it still holds the lock (no other instant can
        complete meanwhile), without listing again."""
        own = self.find(i.requested_time, i.action)
        if not i.is_completed or own is None or not own.is_pending:
            raise ValueError(f"{i} is not a pending instant of this timeline, completed")
        instants = list(self._instants)
        bisect.insort(instants, i, key=_order)
        view = Timeline(self.storage, self.config, instants)
        view._meta_cache = {**self._meta_cache, self.path_of(i): meta}
        state = dict(self._state_by_time)
        state[(i.requested_time, inst.instant_action(i.action))] = i
        done = list(self._completed_all)
        bisect.insort(done, i, key=_completion_order)
        view.__dict__.update(_state_by_time=state, _completed_all=done,
                             _max_time=max(self._max_time, i.completion_time or ""),
                             _earliest=self.earliest_time())
        return view

    def completed_after(self, completion_time: str | None) -> list[Instant]:
        """Completed instants that finished strictly after ``completion_time``."""
        done = self._completed_all
        if completion_time is None:
            return list(done)
        return done[bisect.bisect_right(done, completion_time, key=_finished):]

    # -- files ---------------------------------------------------------------
    def path_of(self, i: Instant) -> str:
        return _path_of(self.config, i)

    def read_bytes(self, i: Instant) -> bytes:
        return self.storage.read_bytes(self.path_of(i))

    def commit_metadata(self, i: Instant) -> CommitMetadata:
        key = self.path_of(i)
        if key not in self._meta_cache:
            try:
                data = self.storage.read_bytes(key)
            except FileNotFoundError as e:
                raise TableFormatError(f"{key}: instant file vanished while reading the timeline") from e
            self._meta_cache[key] = decode_commit_metadata(i.action, data, source=key)
        return self._meta_cache[key]


def _scan(storage: Storage, config: TableConfig, sized: Callable[[str], bool] | None = None) -> list[tuple[Instant, FileEntry]]:
    """The timeline's instants with their files, in order; ``sized``: the names whose size and
    mtime a local disk must stat (by default the completed instants', the metadata cache's key)."""
    out = []
    for e in storage.list_dir(config.timeline_dir, files_only=True, sized=sized or _completed_name):
        i = _instant_of(e.path.rsplit("/", 1)[-1], config.version)
        if i is not None:
            out.append((i, e))
    out.sort(key=lambda ie: _order(ie[0]))
    return out


def _instant_of(name: str, version: int) -> Instant | None:
    """The instant a timeline file name stands for (None: no instant's file); version 6 names
    carry no completion time."""
    i = inst.decode_file_name(name)
    if i is not None and version < 8 and i.is_completed:
        i = Instant(i.requested_time, i.action, i.state, None)
    return i


def _order(i: Instant) -> tuple[str, str]:
    return i.requested_time, i.state


def _completed_name(name: str) -> bool:
    """Whether a timeline file name may be a completed instant's (cheap: no parse; a version 6
    completed file has no state suffix)."""
    return not (name.endswith(".requested") or name.endswith(".inflight"))


def _no_name(name: str) -> bool:
    return False


def list_instants(storage: Storage, config: TableConfig) -> list[Instant]:
    """The instants one listing of the timeline shows, no file read (and no stat): the
    completion step's fresh look right before and right after it writes its completed file."""
    return [i for i, _ in _scan(storage, config, sized=_no_name)]


_RANK = {inst.REQUESTED: 0, inst.INFLIGHT: 1, inst.COMPLETED: 2}


def _latest_by_time(instants: list[Instant]) -> dict[tuple[str, str], Instant]:
    out: dict[tuple[str, str], Instant] = {}
    for i in instants:
        k = (i.requested_time, inst.instant_action(i.action))
        if k not in out or _RANK[i.state] > _RANK[out[k].state]:
            out[k] = i
    return out


def _finished(i: Instant) -> str:
    return i.completion_time or i.requested_time


def _completion_order(i: Instant) -> tuple[str, str]:
    return _finished(i), i.requested_time


def _completed_of(state: dict[tuple[str, str], Instant]) -> list[Instant]:
    return sorted((i for i in state.values() if i.is_completed), key=_completion_order)


def _max_time_of(instants: list[Instant]) -> str:
    return max((max(i.requested_time, i.completion_time or "") for i in instants), default="")


class _Views:
    """What a listing's every view asks again: the latest state per (time, action), in the
    order of a listing's instants (:meth:`Timeline._state_by_time`), the completed ones in
    completion order, the greatest time; ``last``: the greatest requested time, ``shared``: the
    times of more than one action."""

    __slots__ = ("state", "done", "top", "last", "shared")

    def __init__(self, state: dict[tuple[str, str], Instant], done: list[Instant], top: str, last: str,
                 shared: frozenset[str]) -> None:
        self.state, self.done, self.top, self.last, self.shared = state, done, top, last, shared

    @classmethod
    def of(cls, instants: list[Instant]) -> _Views:
        state = _latest_by_time(instants)
        times = Counter(t for t, _ in state)
        return cls(state, _completed_of(state), _max_time_of(instants), max(times, default=""),
                   frozenset(t for t, n in times.items() if n > 1))

    def plus(self, new: list[Instant]) -> _Views | None:
        """These views with ``new`` instants (ordered) added, as :meth:`of` would work them out
        from the whole listing; None when that needs the whole listing: a new (time, action)
        not after every other, or a time of several actions (their order is the listing's)."""
        state, done, last = dict(self.state), list(self.done), self.last
        for i in new:
            k = (i.requested_time, inst.instant_action(i.action))
            old = state.get(k)
            if old is None:
                if i.requested_time <= last:
                    return None
                last = i.requested_time
            elif i.requested_time in self.shared:
                return None
            elif _RANK[i.state] <= _RANK[old.state]:
                continue
            state[k] = i
            if i.is_completed:
                bisect.insort(done, i, key=_completion_order)
        top = max([self.top, *(max(i.requested_time, i.completion_time or "") for i in new)])
        return _Views(state, done, top, last, self.shared)


class _Listing:
    """One load's listing of a timeline, the start of this process's next load of it.

    A timeline file's name never changes meaning (a completed instant's file is written once,
    under that name, and a pending one can only vanish): a name listed again needs no parse, no
    stat and no read. Each load still lists the directory; only names it did not show last time
    are parsed, stat'ed and, for completed writes, read; names gone since are dropped, and the
    views every load asks for (:class:`_Views`) are carried over. A writer loads the timeline
    three times per commit, and redoing all of that for hundreds of unchanged instants was a
    fifth of a small commit's CPU.
    """

    __slots__ = ("entries", "files", "instants", "meta", "views")

    def __init__(self, entries: dict[str, tuple[Instant | None, FileEntry]], files: dict[str, FileEntry],
                 instants: list[Instant], meta: dict[str, CommitMetadata], views: _Views) -> None:
        #: every listed file by path: its instant (None: not an instant's file) and entry
        self.entries = entries
        #: the same entries by file name (:meth:`Storage.list_dir`'s ``known``)
        self.files = files
        #: the listed instants, ordered by requested time and state
        self.instants = instants
        #: the metadata of the completed writes, by path
        self.meta = meta
        self.views = views

    @classmethod
    def load(cls, storage: Storage, config: TableConfig, prev: _Listing | None) -> tuple[_Listing | None, str]:
        """A fresh listing, worked out from ``prev`` (None: from scratch); (None, the path of a
        file that vanished before it was read) when archival removed it meanwhile."""
        known = prev.entries if prev is not None else {}
        files = prev.files if prev is not None else {}
        listed = {e.path: e for e in storage.list_dir(config.timeline_dir, files_only=True, sized=_completed_name,
                                                      known=files, anchor=True)}
        added = [p for p in listed if p not in known]
        removed = [p for p in known if p not in listed] if len(listed) - len(added) < len(known) else []
        if prev is not None and not added and not removed:
            return prev, ""
        entries, files = dict(known), dict(files)
        meta = dict(prev.meta) if prev is not None else {}
        for p in removed:
            i, _ = entries.pop(p)
            del files[p.rsplit("/", 1)[-1]]
            if i is not None:
                meta.pop(_path_of(config, i), None)
        new: list[Instant] = []
        parsed = [(p, _instant_of(p.rsplit("/", 1)[-1], config.version)) for p in added]
        # the commit files this process has not parsed yet are fetched side by side on S3 (a new
        # process's first load reads every completed write's: one round trip per 16, not per file)
        unread = [(p, listed[p].size) for p, i in parsed if i is not None and i.is_completed
                  and i.action in inst.WRITE_ACTIONS and not _CACHE.has(storage, listed[p])]
        with storage.read_ahead(unread if len(unread) > 1 else ()):
            for p, i in parsed:
                e = listed[p]
                entries[p], files[p.rsplit("/", 1)[-1]] = (i, e), e
                if i is None:
                    continue
                new.append(i)
                if i.is_completed and i.action in inst.WRITE_ACTIONS:
                    got = _read_metadata(storage, i, e)
                    if got is None:
                        return None, p
                    meta[_path_of(config, i)] = got
        new.sort(key=_order)
        views = None
        if prev is None or removed:
            instants = sorted((i for i, _ in entries.values() if i is not None), key=_order)
            _CACHE.retain(storage, [e for _, e in entries.values()])
        else:
            instants = list(prev.instants)
            for i in new:
                bisect.insort(instants, i, key=_order)
            views = prev.views.plus(new)
        return cls(entries, files, instants, meta, views or _Views.of(instants)), ""


def _path_of(config: TableConfig, i: Instant) -> str:
    return f"{config.timeline_dir}/{i.file_name(config.version)}"


def _read_metadata(storage: Storage, i: Instant, e: FileEntry) -> CommitMetadata | None:
    """The parsed metadata of a completed write's file (None: it vanished since it was listed)."""
    cached = _CACHE.get(storage, e)
    if cached is not None:
        return cached
    data = _CACHE.written(storage, e)
    if data is None:
        try:
            data = storage.read_bytes(e.path)
        except FileNotFoundError:
            return None
    meta = decode_commit_metadata(i.action, data, source=e.path)
    _CACHE.put(storage, e, meta)
    return meta


class _MetadataCache:
    """Parsed metadata of immutable instant files, shared by every load in this process, and
    the last listing of each timeline loaded (:class:`_Listing`, the ``tables`` most recent).

    Keyed by table root, path, size and mtime. A load lists the timeline anew but takes the
    names its previous listing had as they were (an instant file's name never changes meaning,
    and a completed one's content never changes: Hudi's writers and ours write each once), so a
    file rewritten in place after this process read it (by hand, or a test corrupting it) is
    seen by another process, or after :func:`forget_cache`. A size of 0 keeps nothing, as if
    each load ran in a new process.
    """

    def __init__(self, size: int, tables: int = 16) -> None:
        self._size = size
        self._tables = tables if size > 0 else 0
        self._items: OrderedDict[tuple[str, str, int, float], CommitMetadata] = OrderedDict()
        self._listings: OrderedDict[tuple[str, str, int], _Listing] = OrderedDict()
        #: completed instant files this process created, until a load reads them (:meth:`wrote`)
        self._written: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._mu = threading.Lock()
        renew_in_child(self)

    def __len__(self) -> int:
        return len(self._items)

    @staticmethod
    def _key(storage: Storage, e: FileEntry) -> tuple[str, str, int, float]:
        return (storage.uri, e.path, e.size, e.mtime_s)

    def get(self, storage: Storage, e: FileEntry) -> CommitMetadata | None:
        k = self._key(storage, e)
        with self._mu:
            meta = self._items.get(k)
            if meta is not None:
                self._items.move_to_end(k)
            return meta

    def put(self, storage: Storage, e: FileEntry, meta: CommitMetadata) -> None:
        with self._mu:
            self._items[self._key(storage, e)] = meta
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def listing(self, storage: Storage, config: TableConfig) -> _Listing | None:
        """The last listing of this timeline that this process loaded, if kept."""
        with self._mu:
            return self._listings.get((storage.uri, config.timeline_dir, config.version))

    def keep_listing(self, storage: Storage, config: TableConfig, listing: _Listing) -> None:
        if self._tables == 0:
            return
        k = (storage.uri, config.timeline_dir, config.version)
        with self._mu:
            self._listings[k] = listing
            self._listings.move_to_end(k)
            while len(self._listings) > self._tables:
                self._listings.popitem(last=False)

    def wrote(self, storage: Storage, rel: str, data: bytes) -> None:
        """Keep the bytes of a completed instant file this process has just created: the next
        load takes them for a listed file of that name and size instead of reading it back."""
        if self._size == 0:
            return
        with self._mu:
            self._written[(storage.uri, rel)] = data
            while len(self._written) > _WRITTEN_KEPT:
                self._written.popitem(last=False)

    def has(self, storage: Storage, e: FileEntry) -> bool:
        """Is the metadata of ``e`` parsed already, or its bytes kept since this process wrote it?"""
        with self._mu:
            return self._key(storage, e) in self._items or (storage.uri, e.path) in self._written

    def written(self, storage: Storage, e: FileEntry) -> bytes | None:
        with self._mu:
            data = self._written.pop((storage.uri, e.path), None)
        return data if data is not None and len(data) == e.size else None

    def clear(self) -> None:
        with self._mu:
            self._items.clear()
            self._listings.clear()
            self._written.clear()

    def retain(self, storage: Storage, listed: list[FileEntry]) -> None:
        """Forget this table's entries that a complete listing no longer shows (archived or
        rewritten files, never read again), so a long-lived writer's cache follows the active
        timeline instead of filling up to its bound with archived instants."""
        keep = {self._key(storage, e) for e in listed}
        with self._mu:
            gone = [k for k in self._items if k[0] == storage.uri and k not in keep]
            for k in gone:
                del self._items[k]


_CACHE = _MetadataCache(_CACHE_SIZE)
#: completed instant files kept by :meth:`_MetadataCache.wrote` at most (a writer's last few)
_WRITTEN_KEPT = 16


def wrote_completed(storage: Storage, rel: str, data: bytes) -> None:
    """This process created the completed instant file ``rel`` with ``data``: the next load of
    the timeline takes its bytes from here, not from the store (a file's content never changes
    once completed, and its listed size must match)."""
    _CACHE.wrote(storage, rel, data)


def forget_cache() -> None:
    """Drop what this process read of every timeline (the next load reads as a new process)."""
    _CACHE.clear()


# -- writing instant files -------------------------------------------------------


def _create(storage: Storage, config: TableConfig, i: Instant, data: bytes, *, durable: bool = True) -> str:
    if config.version not in WRITE_VERSIONS:
        raise TableFormatError(
            f"multiwriter writes table versions 8 and 9, not {config.version}; upgrade this table with Hudi first"
        )
    rel = f"{config.timeline_dir}/{i.file_name(config.version)}"
    try:
        storage.put_if_absent(rel, data, durable=durable)
    except FileExists as e:
        raise InstantExistsError(f"{rel} already exists; instant times must be unique") from e
    return rel


# A write's requested and inflight files are not synced: losing them in a crash loses only an
# attempt that had not committed, whose data files the markers name and the cleaner sweeps. The
# completed file is the commit point and is synced. Other actions (clean, rollback, replace)
# keep their plans durable, as their completion depends on them.


def create_requested(storage: Storage, config: TableConfig, t: str, action: str = inst.COMMIT, data: bytes = b"") -> Instant:
    i = Instant(t, action, inst.REQUESTED)
    _create(storage, config, i, data, durable=action != inst.COMMIT)
    return i


def create_inflight(storage: Storage, config: TableConfig, t: str, action: str = inst.COMMIT, data: bytes = b"") -> Instant:
    i = Instant(t, action, inst.INFLIGHT)
    _create(storage, config, i, data, durable=action != inst.COMMIT)
    return i


def create_completed(
    storage: Storage, config: TableConfig, t: str, completion_time: str, action: str = inst.COMMIT, data: bytes = b"",
    metadata: CommitMetadata | None = None,
) -> Instant:
    """Write a completed instant without deciding it: for tools and tests that set up a
    table's state. Writers and the companion job complete through the decision log
    (:func:`multiwriter.table.decisions.complete`), which this skips. ``metadata``: the commit
    metadata ``data`` encodes, when the caller has it (the metadata table then takes the files
    from it rather than decoding ``data`` again)."""
    if completion_time <= t:
        raise ValueError(f"completion time {completion_time} must be greater than requested time {t}")
    i = Instant(t, action, inst.COMPLETED, completion_time)
    upkeep = metadata_files.on_completed(storage, config, t, completion_time, action, data, metadata)
    _create(storage, config, i, data)
    metadata_files.after_decided(storage, config, upkeep)
    return i


def delete_pending(storage: Storage, config: TableConfig, t: str, action: str = inst.COMMIT) -> list[str]:
    """Delete the requested and inflight files of an instant (rollback's last step)."""
    deleted = []
    for state in (inst.INFLIGHT, inst.REQUESTED):
        rel = f"{config.timeline_dir}/{Instant(t, action, state).file_name(config.version)}"
        if storage.delete(rel):
            deleted.append(rel)
    return deleted
