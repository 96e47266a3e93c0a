"""Hudi's archived timeline (table version 8): an LSM tree of Parquet files under
``.hoodie/timeline/history/``, read and written the way Hudi's JVM writers do.

Layout (one directory, all names fixed by Hudi):

* ``<minInstant>_<maxInstant>_<layer>.parquet``: a batch of archived instants, one
  ``HoodieLSMTimelineInstant`` record each (``instantTime``, ``completionTime``, ``action``,
  ``metadata`` = the completed file's bytes, ``plan`` = the plan's bytes, ``version``); the names
  carry the batch's first and last requested time; archival writes layer 0.
* ``manifest_<N>``: JSON ``{"files": [{"fileName": ..., "fileLen": ...}]}``, the files of snapshot N.
* ``_version_``: the latest snapshot number as text; when absent or unreadable, the highest
  ``manifest_<N>`` counts.

A Parquet file that no manifest lists is not part of the timeline (a write that crashed before
its manifest).

Compaction (after each archival, under the table lock, as Hudi's archiver does): once a layer
holds ``COMPACTION_BATCH`` files, its oldest ones (by name, so by first instant; consecutive, at
most that many, within a size cap) are merged into one file of the next layer named
``<min of their first instants>_<max of their last instants>_<layer + 1>.parquet``, and a new
manifest lists it instead of them; the next layer is then tried the same way. Cleaning follows:
when more than ``RETAINED_MANIFESTS`` (plus one per compaction of this run) manifests exist, the
older manifests go, then every Parquet file no remaining manifest lists. Readers that read an
older manifest keep finding its files for that many versions; one that loses the race reads the
latest manifest again.
"""
from __future__ import annotations

import io
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TableFormatError
from ..storage import Storage
from . import bounds, paths
from ..threads import free_in_child

VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
MANIFEST_RE = re.compile(r"^manifest_([0-9]{1,19})\Z")
DATA_FILE_RE = re.compile(r"^([0-9]+)_([0-9]+)_([0-9]{1,9})\.parquet\Z")
#: HoodieLSMTimelineInstant's record version written by Hudi 1.x
RECORD_VERSION = 1
#: Hudi's defaults: ``hoodie.timeline.compaction.batch.size`` and
#: ``hoodie.timeline.manifest.retained.versions``
COMPACTION_BATCH = 10
RETAINED_MANIFESTS = 3
#: a compaction's inputs stop growing past this many bytes (Hudi caps the compacted file at 1 GB)
COMPACTION_MAX_BYTES = 1 << 30
#: times a reader re-reads the latest manifest when a file it lists was cleaned meanwhile
READ_ATTEMPTS = 3

#: HoodieLSMTimelineInstant as Parquet, typed as Hudi's Avro schema declares it: nullable
#: unions of null with string or bytes, and a required int version
SCHEMA = pa.schema([
    pa.field("instantTime", pa.string()),
    pa.field("completionTime", pa.string()),
    pa.field("action", pa.string()),
    pa.field("metadata", pa.binary()),
    pa.field("plan", pa.binary()),
    pa.field("version", pa.int32(), nullable=False),
])
AVRO_SCHEMA = {
    "type": "record",
    "name": "HoodieLSMTimelineInstant",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "instantTime", "type": ["null", "string"], "default": None},
        {"name": "completionTime", "type": ["null", "string"], "default": None},
        {"name": "action", "type": ["null", "string"], "default": None},
        {"name": "metadata", "type": ["null", "bytes"], "default": None},
        {"name": "plan", "type": ["null", "bytes"], "default": None},
        {"name": "version", "type": "int", "default": RECORD_VERSION},
    ],
}


@dataclass(frozen=True)
class LsmInstant:
    """One archived instant as Hudi records it."""

    instant_time: str
    completion_time: str | None
    action: str
    metadata: bytes | None = None
    plan: bytes | None = None


def data_file_name(first: str, last: str, layer: int = 0) -> str:
    if not (first.isdigit() and last.isdigit()):
        raise ValueError(f"instant times must be digits, got {first!r}, {last!r}")
    return f"{first}_{last}_{int(layer)}.parquet"


def layer_of(name: str) -> int:
    """The layer of a data file (0 for names that do not parse, as Hudi reads them)."""
    m = DATA_FILE_RE.match(name)
    return int(m.group(3)) if m else 0


def is_lsm_file(name: str) -> bool:
    """A file name of the LSM layout (data, manifest or version file)."""
    return name == VERSION_FILE or bool(MANIFEST_RE.match(name) or DATA_FILE_RE.match(name))


# -- reading ---------------------------------------------------------------------------------

#: manifests and data files this process published (a manifest naming them was written): their
#: bytes, newest last, at most _WRITTEN_BYTES in all. Once a manifest names a file it is never
#: rewritten (a new snapshot has a new manifest number), so a read of one is served from here:
#: the companion job reads back the history its archival just wrote. Object stores only (a
#: request each there; a local read costs nothing).
_WRITTEN: OrderedDict[tuple[str, str], bytes] = OrderedDict()
_WRITTEN_BYTES = 32 << 20
_WRITTEN_MU = free_in_child(threading.Lock())


def _published(storage: Storage, files: dict[str, bytes]) -> None:
    if storage.is_local:
        return
    with _WRITTEN_MU:
        for rel, data in files.items():
            _WRITTEN[(storage.uri, rel)] = data
            _WRITTEN.move_to_end((storage.uri, rel))
        total = sum(len(v) for v in _WRITTEN.values())
        while _WRITTEN and total > _WRITTEN_BYTES:
            total -= len(_WRITTEN.popitem(last=False)[1])


def forget_published() -> None:
    """Drop what this process published (reads go to storage, as a new process's do)."""
    with _WRITTEN_MU:
        _WRITTEN.clear()


def _read_published(storage: Storage, rel: str) -> bytes:
    """A manifest's or data file's bytes: what this process published, else read from storage."""
    with _WRITTEN_MU:
        data = _WRITTEN.get((storage.uri, rel))
    return data if data is not None else storage.read_bytes(rel)



#: a snapshot number has at most the digits of a Java long; more are refused before parsing
_MAX_VERSION_DIGITS = 19


def latest_version(storage: Storage, history: str) -> int:
    """The latest snapshot number, -1 when the history has none."""
    rel = f"{history}/{VERSION_FILE}"
    try:
        text = storage.read_bytes(rel).decode(errors="replace").strip()
    except FileNotFoundError:
        text = ""
    if text.isascii() and text.isdigit():
        if len(text) > _MAX_VERSION_DIGITS:
            raise TableFormatError(
                f"{rel}: the snapshot number has {len(text)} digits ({text[:20]}...): not one this history wrote; "
                "fix it to the number of its latest manifest_<n>, or remove it so that readers take the latest one")
        return int(text)
    versions = [int(m.group(1)) for e in storage.list_dir(history, files_only=True)
                if (m := MANIFEST_RE.match(e.path.rsplit("/", 1)[-1]))]
    return max(versions, default=-1)


def manifest_files(storage: Storage, history: str, version: int | None = None) -> list[tuple[str, int]]:
    """(file name, length) of every data file of a snapshot (the latest by default)."""
    v = latest_version(storage, history) if version is None else version
    if v < 0:
        return []
    rel = f"{history}/{MANIFEST_PREFIX}{v}"
    try:
        doc = json.loads(_read_published(storage, rel))
        listed = [_manifest_entry(f, rel) for f in doc.get("files") or []]
    except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise TableFormatError(
            f"{rel}: not a readable LSM timeline manifest ({e}); the archived timeline cannot be read: restore "
            f"it, or remove {history}/{VERSION_FILE} so that readers fall back to the previous manifest"
        ) from e
    # a listed name is read, and kept or deleted by the history's cleaning: one plain name in ``history``
    return [(paths.plain_name(name, source=rel, what="history file"), size) for name, size in listed]


def _span(name: str) -> tuple[str, str]:
    m = DATA_FILE_RE.match(name)
    assert m is not None  # manifest entries are checked
    return m.group(1), m.group(2)


def _covers(files: list[tuple[str, int]], older: list[tuple[str, int]]) -> str | None:
    """The first file of an older manifest whose instants ``files`` no longer hold (None when
    every one is listed, or merged into a file whose span holds it): the history only grows."""
    spans = [_span(n) for n, _ in files]
    names = {n for n, _ in files}
    for name, _ in older:
        lo, hi = _span(name)
        if name not in names and not any(a <= lo and hi <= b for a, b in spans):
            return name
    return None


def trusted_manifest(storage: Storage, history: str) -> tuple[int, list[tuple[str, int]], list[str]]:
    """(version, files, problems) of the newest snapshot that accounts for every archived
    instant: its files hold every instant of each older manifest still on storage (archival only
    appends; compaction merges files into one whose span holds theirs). A newer manifest that
    drops archived instants (an empty one planted beside a ``_version_`` pointing at it) would make
    archived commits' files look uncommitted to readers and to the failed-write sweep; it is
    passed over, and ``problems`` names it and what to do (empty when the latest is trusted)."""
    latest = latest_version(storage, history)
    if latest < 0:
        return latest, [], []
    older = [v for v in manifest_versions(storage, history) if v < latest]
    listed: dict[int, list[tuple[str, int]] | None] = {}

    def files_of(v: int) -> list[tuple[str, int]] | None:
        if v not in listed:
            try:
                listed[v] = manifest_files(storage, history, v)
            except TableFormatError:
                listed[v] = None  # an unreadable older manifest is no evidence either way
        return listed[v]

    problems: list[str] = []
    for v in [latest, *reversed(older)]:
        files = manifest_files(storage, history, v) if v == latest else files_of(v)
        if files is None:
            continue
        lost = next(((w, name) for w in older if w < v and (o := files_of(w)) is not None
                     and (name := _covers(files, o)) is not None), None)
        if lost is None:
            return v, files, problems
        problems.append(
            f"{history}/{MANIFEST_PREFIX}{v}: drops archived instants that {MANIFEST_PREFIX}{lost[0]} holds (first: "
            f"{lost[1]}); not trusted: readers and the cleaner use the newest manifest that holds them all, and the "
            f"next archival writes a manifest above it. Inspect {history}/{VERSION_FILE} and remove the bad manifest")
    return latest, manifest_files(storage, history, latest), problems


def _manifest_entry(f: dict, rel: str) -> tuple[str, int]:
    """(name, length) of one manifest entry: a data file name of this layout, nothing else (a
    foreign name would be read into the history, or break compaction; a path is refused by the
    path rule first)."""
    name, size = f["fileName"], f["fileLen"]
    if isinstance(name, str):
        paths.plain_name(name, source=rel, what="history file")
    if not isinstance(name, str) or not DATA_FILE_RE.match(name):
        raise ValueError(f"fileName {name!r:.120} is not an LSM data file name (<min>_<max>_<layer>.parquet)")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"fileLen {size!r:.40} of {name} is not a length")
    return name, size


#: the columns that say which instants completed (no metadata or plan bytes)
STATE_COLUMNS = ("instantTime", "completionTime", "action")


def read_file(storage: Storage, rel: str, *, states_only: bool = False) -> list[LsmInstant]:
    """The records of one data file; ``states_only``: without their metadata and plan bytes
    (what a reader needs to tell archived commits from failed writes, at a fraction of the read)."""
    try:
        with _WRITTEN_MU:
            published = _WRITTEN.get((storage.uri, rel))
        if published is not None:
            table = bounds.read_parquet(pa.BufferReader(published), rel)
        elif states_only:  # only those column chunks are read from storage
            with storage.fs.open_input_file(storage.abs(rel)) as f:
                pf = pq.ParquetFile(f)
                present = pf.schema_arrow.names
                wanted = [c for c in STATE_COLUMNS if c in present]
                bounds.check_parquet(pf.metadata, rel, size=f.size(), columns=wanted)
                table = pf.read(columns=wanted)
        else:
            table = bounds.read_parquet(pa.BufferReader(storage.read_bytes(rel)), rel)
    except FileNotFoundError:
        raise  # compaction's cleaning removed it: the caller reads the latest manifest again
    except (OSError, pa.ArrowInvalid) as e:
        raise TableFormatError(f"{rel}: not a readable LSM timeline file ({e}); restore it from backup") from e
    missing = {"instantTime", "action"} - set(table.column_names)
    if missing:
        raise TableFormatError(f"{rel}: LSM timeline file without columns {sorted(missing)}")
    cols = {n: table.column(n).to_pylist() if n in table.column_names else [None] * table.num_rows
            for n in ("instantTime", "completionTime", "action", "metadata", "plan")}
    return [
        LsmInstant(t, c, a, m, p)
        for t, c, a, m, p in zip(cols["instantTime"], cols["completionTime"], cols["action"], cols["metadata"],
                                 cols["plan"], strict=True)
        if t is not None and a is not None
    ]


def read_instants(storage: Storage, history: str, *, states_only: bool = False) -> list[LsmInstant]:
    """Every instant of the latest snapshot, by requested time (one record per instant and
    action; a record a crashed compaction left in two files is read once). A listed file that
    compaction's cleaning removed meanwhile makes it read the then latest snapshot.
    ``states_only``: see :func:`read_file`."""
    missing = ""
    for _ in range(READ_ATTEMPTS):
        seen: dict[tuple[str, str], LsmInstant] = {}
        try:
            for name, _size in trusted_manifest(storage, history)[1]:
                for r in read_file(storage, f"{history}/{name}", states_only=states_only):
                    seen.setdefault((r.instant_time, r.action), r)
        except FileNotFoundError as e:
            missing = str(e)
            storage.forget_listings()
            continue
        return sorted(seen.values(), key=lambda r: (r.instant_time, r.action))
    raise TableFormatError(
        f"{history}: files of the latest archived-timeline manifest kept vanishing ({missing}); another process "
        "compacts the history while this one reads: only one cleaner or archiver should run, under the table lock"
    )


# -- writing ---------------------------------------------------------------------------------


def encode(records: Iterable[LsmInstant]) -> bytes:
    rows = list(records)
    table = pa.table(
        {
            "instantTime": [r.instant_time for r in rows],
            "completionTime": [r.completion_time for r in rows],
            "action": [r.action for r in rows],
            "metadata": [r.metadata for r in rows],
            "plan": [r.plan for r in rows],
            "version": [RECORD_VERSION] * len(rows),
        },
        schema=SCHEMA.with_metadata({"parquet.avro.schema": json.dumps(AVRO_SCHEMA)}),
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="gzip")
    return buf.getvalue()


def append(storage: Storage, history: str, records: list[LsmInstant]) -> str:
    """Add a layer-0 file holding ``records`` (by requested time) and a manifest listing it.

    As Hudi's writer: a file of the same name that the latest manifest lists means this batch
    was archived already (returns its name); one that no manifest lists is a crashed write and is
    replaced. The manifest is written before ``_version_``; a reader that finds the version file
    missing takes the highest manifest."""
    if not records:
        raise ValueError("no instants to archive")
    records = sorted(records, key=lambda r: r.instant_time)
    name = data_file_name(records[0].instant_time, records[-1].instant_time)
    version = latest_version(storage, history)
    listed = trusted_manifest(storage, history)[1]
    if any(n == name for n, _ in listed):
        return name
    data = encode(records)
    storage.write_bytes(f"{history}/{name}", data)
    manifest = write_manifest(storage, history, [*listed, (name, len(data))], version)
    _published(storage, {f"{history}/{name}": data, **manifest})
    return name


def write_manifest(storage: Storage, history: str, files: list[tuple[str, int]], current: int) -> dict[str, bytes]:
    """Write manifest ``current + 1`` with ``files``, then point ``_version_`` at it; returns
    the manifest written (its path and bytes)."""
    new = 1 if current < 0 else current + 1
    doc = json.dumps({"files": [{"fileName": n, "fileLen": int(size)} for n, size in files]}).encode()
    storage.write_bytes(f"{history}/{MANIFEST_PREFIX}{new}", doc)
    storage.write_bytes(f"{history}/{VERSION_FILE}", str(new).encode())
    return {f"{history}/{MANIFEST_PREFIX}{new}": doc}


# -- compaction and cleaning ----------------------------------------------------------------


def compact_and_clean(
    storage: Storage,
    history: str,
    *,
    batch: int = COMPACTION_BATCH,
    retained: int = RETAINED_MANIFESTS,
    max_bytes: int = COMPACTION_MAX_BYTES,
) -> list[str]:
    """Compact layer after layer while one is full, then clean (call under the table lock).
    Returns the files written, lowest layer first."""
    made: list[str] = []
    while (name := _compact_layer(storage, history, len(made), batch, max_bytes)) is not None:
        made.append(name)
    clean(storage, history, retained + len(made))
    return made


def compacted_name(names: list[str]) -> str:
    """The merged file of ``names`` (all of one layer): their instant span, one layer down."""
    spans = [DATA_FILE_RE.match(n) for n in names]
    if not all(spans):
        raise ValueError(f"not LSM data files: {names}")
    first = min(m.group(1) for m in spans if m)
    last = max(m.group(2) for m in spans if m)
    return data_file_name(first, last, layer_of(names[0]) + 1)


def _candidates(files: list[tuple[str, int]], batch: int, max_bytes: int) -> list[str]:
    """The oldest consecutive files to merge: up to ``batch`` of them, stopping once their size
    passes ``max_bytes`` (a lone file past it is skipped: merging it would only copy it)."""
    out: list[str] = []
    total = 0
    for name, size in files:
        out.append(name)
        total += size
        if len(out) >= batch:
            break
        if total > max_bytes:
            if len(out) >= 2:
                break
            out, total = [], 0
    return out


def _compact_layer(storage: Storage, history: str, layer: int, batch: int, max_bytes: int) -> str | None:
    version = latest_version(storage, history)
    listed = trusted_manifest(storage, history)[1]
    files = sorted((f for f in listed if layer_of(f[0]) == layer), key=lambda f: f[0])
    if len(files) < batch:
        return None
    chosen = _candidates(files, batch, max_bytes)
    if len(chosen) < 2:
        return None
    name = compacted_name(chosen)
    data = encode([r for n in chosen for r in read_file(storage, f"{history}/{n}")])
    storage.write_bytes(f"{history}/{name}", data)  # replaces what a crashed compaction left
    keep = [f for f in listed if f[0] not in set(chosen)]
    _published(storage, {f"{history}/{name}": data, **write_manifest(storage, history, [*keep, (name, len(data))], version)})
    return name


def manifest_versions(storage: Storage, history: str) -> list[int]:
    """Every manifest number on storage, ascending."""
    names = (e.path.rsplit("/", 1)[-1] for e in storage.list_dir(history, files_only=True))
    return sorted(int(m.group(1)) for n in names if (m := MANIFEST_RE.match(n)))


def clean(storage: Storage, history: str, keep: int) -> list[str]:
    """With more than ``keep`` manifests, delete the older ones, then every Parquet file that no
    kept manifest lists (replaced inputs of compactions, files of crashed writes). Returns the
    deleted paths."""
    versions = manifest_versions(storage, history)
    if len(versions) <= keep:
        return []
    kept = versions[-keep:] if keep > 0 else []
    trusted, trusted_files, _ = trusted_manifest(storage, history)
    if trusted not in kept:
        kept.insert(0, trusted)
    live = {n for v in kept for n, _ in manifest_files(storage, history, v)} | {n for n, _ in trusted_files}
    deleted = []
    for v in (v for v in versions if v not in kept):
        rel = f"{history}/{MANIFEST_PREFIX}{v}"
        if storage.delete(rel):
            deleted.append(rel)
    for e in storage.list_dir(history, files_only=True):
        name = e.path.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and name not in live and storage.delete(e.path):
            deleted.append(e.path)
    return deleted


__all__ = [
    "LsmInstant",
    "append",
    "clean",
    "compact_and_clean",
    "compacted_name",
    "is_lsm_file",
    "latest_version",
    "manifest_files",
    "read_instants",
    "trusted_manifest",
]
