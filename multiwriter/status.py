"""What an operator of a long-running table needs on one screen (``multiwriter status``):
writers (live registrations, checkpoints), instants in flight and whether their owners still
beat, pending table services, per-partition file health, timeline sizes, and what the cleaner
did last. Read-only: it takes no lock and writes nothing."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from . import checkpoint as ckpt
from .redact import redact
from .format import instant as inst
from .format.instant import Instant
from .table.table import Table
from .table.timeline import Timeline


@dataclass
class InFlight:
    instant: str
    action: str
    state: str
    writer: str | None
    heartbeat_age_s: float | None  # by this host's wall clock (informational: skew distorts it)
    verdict: str  # alive | lapsed | undecided (see multiwriter.heartbeat.judge)
    bound_s: float | None = None  # the bound it was judged by
    bound_from: str | None = None  # "writer" (recorded in its beats) or "judge" (the status defaults)
    unchanged_s: float | None = None  # how long status watched the current beat without a new one
    skew_s: float | None = None  # writer's clock minus this host's, when a new beat was seen


@dataclass
class WriterStatus:
    writer_id: str
    last_batch: int
    last_commit: str | None  # requested time of its newest own commit on the active timeline
    last_commit_completed: str | None
    live: bool | None  # registered live (None: unknown without ZooKeeper)
    query_id: str | None = None  # the streaming query that sent the last batch (None: not recorded)


@dataclass
class TableStatus:
    table: str
    path: str
    version: int
    live_writers: list[str] | None
    writers: list[WriterStatus]
    retired_writers: dict[str, str]
    in_flight: list[InFlight]
    pending_rollbacks: list[str]
    pending_clusterings: list[str]
    partitions: list[dict[str, Any]]
    live_files: int
    small_files: int
    active_instants: int
    archived_instants: int
    cleaner_last: dict[str, Any] = field(default_factory=dict)
    table_type: str = "COPY_ON_WRITE"
    pending_compactions: list[str] = field(default_factory=list)
    #: Merge-on-Read: per partition, log files and deltacommits since the last compaction
    uncompacted: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. clock skew between writers and this host
    #: Hudi's metadata table: the partitions the properties name, and the files partition's slice
    metadata: dict[str, Any] = field(default_factory=dict)
    #: the storage lock object (``.hoodie/.locks/table_lock.json``) when there is one: owner, holder, expiry
    storage_lock: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)


def collect(
    table: Table,
    *,
    live_writers: list[str] | None = None,
    heartbeat_interval_s: float = 10.0,
    heartbeat_tolerable_misses: int = 2,
    small_file_bytes: int | None = None,
    observe_s: float = 10.0,
    skew_warn_s: float | None = None,
) -> TableStatus:
    """Gather the status from one timeline load and one listing of the table.

    Whether the owner of an in-flight instant is alive is judged by watching its heartbeat for
    up to ``observe_s`` seconds (:mod:`multiwriter.heartbeat.judge`): alive once a new beat
    appears, lapsed once none appeared for the writer's bound (the ``heartbeat_*`` settings
    judge beats that record none), undecided when the observation ended first."""
    from .cleaner.archive import load_history
    from .cleaner.clustering import ClusteringConfig, health
    from .table.snapshot import Snapshot, log_health

    tl = table.timeline()
    small = small_file_bytes if small_file_bytes is not None else ClusteringConfig().small_file_bytes
    snap = Snapshot.build(table.storage, tl)
    parts = health(snap, small)
    pending = tl.pending()
    in_flight, warnings = _judge_in_flight(table, pending, heartbeat_interval_s, heartbeat_tolerable_misses,
                                           observe_s, skew_warn_s)
    return TableStatus(
        table=table.name,
        path=redact(table.path),  # shown (text and --json): never a credential of the URI
        version=table.config.version,
        live_writers=sorted(live_writers) if live_writers is not None else None,
        writers=_writers(tl, live_writers),
        retired_writers=ckpt.retired(table.storage),
        in_flight=in_flight,
        pending_rollbacks=[i.requested_time for i in pending if i.action == inst.ROLLBACK],
        pending_clusterings=[i.requested_time for i in pending if i.action == inst.CLUSTERING],
        partitions=[asdict(h) for _, h in sorted(parts.items())],
        live_files=sum(h.file_groups for h in parts.values()),
        small_files=sum(h.small_files for h in parts.values()),
        active_instants=len(tl.latest_states()),
        archived_instants=len(load_history(table)),
        cleaner_last=_cleaner_last(table, tl),
        table_type=table.config.table_type,
        pending_compactions=[i.requested_time for i in pending if i.action == inst.COMPACTION],
        uncompacted=[asdict(h) for _, h in sorted(log_health(snap).items())],
        warnings=warnings + _narrow_log_columns(table, tl, snap),
        metadata=_metadata(table),
        storage_lock=_storage_lock(table),
    )


def _narrow_log_columns(table: Table, tl: Timeline, snap: Any) -> list[str]:
    """Merge-on-Read log files not yet compacted that hold a column in a narrower type than the
    table's (int32 under int64, float under double, a smaller decimal): hudi-rs cannot read some
    such slices until compaction rewrites them (docs/schema-evolution.md). From the commit
    metadata of the deltacommits those log files came from; no data file is read."""
    if not table.config.merge_on_read:
        return []
    from .format.schema import avro_to_arrow

    times = {lf.instant_time for fs in snap.files() for lf in fs.logs}
    if not times:
        return []
    current = table.schema(tl)
    out = []
    for i in tl.completed_writes():
        if i.requested_time not in times:
            continue
        recorded = tl.commit_metadata(i).extra_metadata.get("schema")
        if not recorded:
            continue
        old = avro_to_arrow(recorded, source=tl.path_of(i))
        narrow = [f"{f.name} as {f.type} (table: {current.field(f.name).type})" for f in old
                  if current.get_field_index(f.name) >= 0 and not f.type.equals(current.field(f.name).type)]
        if narrow:
            out.append(f"log files of deltacommit {i.requested_time} hold {', '.join(narrow)}: hudi-rs may not read "
                       "their file slices until they are compacted (multiwriter compact)")
    return out


def _metadata(table: Table) -> dict[str, Any]:
    from .table import metadata_files as mf

    listed = [p for p in table.config.raw.get(mf.PARTITIONS_KEY, "").split(",") if p.strip()]
    if not mf.enabled(table.config):
        return {"partitions": listed}
    base, base_t, logs = mf.MetadataTable(table.storage, table.config).latest_slice()
    return {"partitions": listed, "files_base": base, "files_base_instant": base_t, "files_log_files": len(logs),
            "compacts_after": mf.MAX_DELTA_COMMITS}


def _storage_lock(table: Table) -> dict[str, Any] | None:
    """Who holds the table's storage lock object and until when (one read; None without one)."""
    import time

    from .errors import ConfigError, LockError
    from .lock.storage import read_lock

    try:
        obj = read_lock(table.storage)
    except ConfigError:
        return None  # a store the storage lock does not support: there is no such object
    except (LockError, OSError) as e:
        return {"error": str(e)}
    if obj is None:
        return None
    left = obj.valid_until_ms / 1000.0 - time.time()
    state = "released" if obj.expired else ("held" if not obj.is_free(time.time()) else "lease ran out")
    return {"state": state, "owner": obj.owner, "holder": obj.holder or None,
            "valid_until_ms": obj.valid_until_ms, "seconds_left": round(left, 3), "description": obj.describe()}


def _writers(tl: Timeline, live: list[str] | None) -> list[WriterStatus]:
    commits = ckpt.last_commits(tl)
    out = []
    for w, entry in sorted(ckpt.carried_entries(tl).items()):
        i = commits.get(w)
        out.append(WriterStatus(w, entry.batch_id, i.requested_time if i else None, i.completion_time if i else None,
                                (w in live) if live is not None else None, entry.query_id))
    return out


def _judge_in_flight(
    table: Table, pending: list[Instant], interval: float, misses: int, observe_s: float, skew_warn_s: float | None
) -> tuple[list[InFlight], list[str]]:
    from .heartbeat.client import heartbeat_age_s
    from .heartbeat.judge import DEFAULT_SKEW_WARN_S, HeartbeatJudge, skew_beyond

    threshold = DEFAULT_SKEW_WARN_S if skew_warn_s is None else skew_warn_s
    judge = HeartbeatJudge(table.storage, interval_s=interval, tolerable_misses=misses, max_observe_s=observe_s,
                           skew_warn_s=threshold, name="multiwriter status")
    obs = judge.decide(i.requested_time for i in pending)
    out = []
    warnings = []
    for i in pending:
        o = obs[i.requested_time]
        age = heartbeat_age_s(table.storage, i.requested_time)
        writer = o.beat.writer_id
        out.append(InFlight(i.requested_time, i.action, i.state, writer, None if age is None else round(age, 1),
                            o.verdict, round(o.bound_s, 3), o.bound_from, round(o.unchanged_s, 1),
                            None if o.skew_s is None else round(o.skew_s, 1)))
        # the estimate is taken up to one poll after the beat was written
        if skew_beyond(o.skew_s, threshold, judge.poll_s):
            warnings.append(f"clock skew: writer {writer or '?'} (instant {i.requested_time}) beats with a clock "
                            f"{o.skew_s:+.1f}s from this host's (warning above {threshold:g}s); liveness is judged "
                            "by observed beats, but instant times from these hosts disagree")
    return out, warnings


def _cleaner_last(table: Table, tl: Timeline) -> dict[str, Any]:
    """The newest completed rollback, clean and clustering, and the newest archive batch."""
    from .cleaner.archive import batch_files
    from .format import lsm_timeline as lsm

    out: dict[str, Any] = {}
    for action in (inst.ROLLBACK, inst.CLEAN):
        done = tl.completed(frozenset({action}))
        if done:
            out[action] = {"requested": done[-1].requested_time, "completed": done[-1].completion_time}
    clusterings = [i for i in tl.completed(frozenset({inst.REPLACE_COMMIT}))
                   if tl.commit_metadata(i).operation_type == "CLUSTER"]
    if clusterings:
        i = clusterings[-1]
        out["clustering"] = {"requested": i.requested_time, "completed": i.completion_time,
                             "replaced_file_groups": len(tl.commit_metadata(i).replaced_file_groups())}
    listed = [name for name, _ in lsm.manifest_files(table.storage, table.config.history_dir)]
    batches = [rel.rsplit("/", 1)[-1] for rel in batch_files(table)]
    if listed or batches:
        newest = max(listed, key=lambda n: (n.split("_")[1], n), default=None) or sorted(batches)[-1]
        out["archive"] = {"newest_batch": newest, "history_files": len(listed) + len(batches)}
    return out


def render(s: TableStatus) -> str:
    """The status as one screen of text."""
    lines = [f"table {s.table} ({s.table_type}, version {s.version}) at {s.path}"]
    live = "unknown (pass --zk)" if s.live_writers is None else (", ".join(s.live_writers) or "none")
    lines.append(f"live writers: {live}")
    lines.append("writers with a checkpoint:" if s.writers else "writers with a checkpoint: none")
    for w in s.writers:
        state = "" if w.live is None else (" live" if w.live else " stopped")
        lines.append(f"  {w.writer_id:<24} batch {w.last_batch:<8} query {w.query_id or '(not recorded)':<36} "
                     f"last commit {w.last_commit or '(archived)'}{state}")
    if s.retired_writers:
        lines.append("retired: " + ", ".join(f"{w} (at {t})" for w, t in sorted(s.retired_writers.items())))
    lines.append(f"in flight: {len(s.in_flight)}" if s.in_flight else "in flight: none")
    for f in s.in_flight:
        age = "no heartbeat" if f.heartbeat_age_s is None else f"heartbeat {f.heartbeat_age_s:.1f}s ago"
        how = "" if f.bound_s is None else f" (unchanged {f.unchanged_s:.1f}s of {f.bound_from}'s bound {f.bound_s:g}s)"
        lines.append(f"  {f.instant} {f.action:<13} {f.state:<9} {f.writer or '?':<20} {age}: {f.verdict}{how}")
    lines.append(f"pending rollbacks: {', '.join(s.pending_rollbacks) or 'none'}; "
                 f"pending clusterings: {', '.join(s.pending_clusterings) or 'none'}")
    lines.append(f"files: {s.live_files} live file groups, {s.small_files} small")
    for p in s.partitions:
        lines.append(f"  {p['partition'] or '(table root)':<30} {p['file_groups']:>6} groups {p['small_files']:>6} small "
                     f"{p['bytes']:>14,} bytes")
    if s.table_type == "MERGE_ON_READ":
        lines.append(f"pending compactions: {', '.join(s.pending_compactions) or 'none'}")
        lines.append("log files not yet compacted:" if s.uncompacted else "log files not yet compacted: none")
        for u in s.uncompacted:
            lines.append(f"  {u['partition'] or '(table root)':<30} {u['log_files']:>6} logs {u['log_bytes']:>14,} bytes "
                         f"up to {u['delta_commits']} delta commits per file group, oldest {u['oldest_log']}")
    lines.append(f"timeline: {s.active_instants} active instants, {s.archived_instants} archived")
    md = s.metadata
    if md.get("files_base_instant"):
        lines.append(f"metadata table: {', '.join(md['partitions'])}; files partition based at "
                     f"{md['files_base_instant']} with {md['files_log_files']} log files "
                     f"(compacted at {md['compacts_after']})")
    else:
        lines.append(f"metadata table: {'none' if not md.get('partitions') else ', '.join(md['partitions'])}")
    if s.cleaner_last:
        done = "; ".join(f"{k} {v.get('requested') or v.get('newest_batch')}" for k, v in sorted(s.cleaner_last.items()))
        lines.append(f"cleaner last: {done}")
    else:
        lines.append("cleaner last: nothing yet")
    if s.storage_lock is not None:
        lk = s.storage_lock
        lines.append(f"storage lock: {lk['error']}" if "error" in lk else
                     f"storage lock: {lk['state']} ({lk['description']}; {lk['seconds_left']:+.1f}s left)")
    lines.extend(f"WARNING: {w}" for w in s.warnings)
    return "\n".join(lines)
