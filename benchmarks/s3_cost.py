"""What an operation costs on object storage (issue 57): requests by kind and seconds per
operation on moto's S3 server (127.0.0.1) behind :class:`testbed.moto_s3.CountingLatency`, which
counts every request and answers each one ``s3_cost_latency_ms`` later, as a real store would.
moto runs in a process of its own (``MotoS3(counted=...)``): in the measuring process, its
Python would take turns at the interpreter lock with a Python client's threads (about 2 ms of
it per request), a cost no real store puts on its clients and one that a Rust client
(deltalake) waiting outside the lock does not pay.

On the same batches, interleaved in one process (who goes first rotates), with string and
integer keys: multiwriter Copy-on-Write and Merge-on-Read (bucket index) and deltalake, each
loaded with the same rows, then upserts (half updates, half new keys, over every partition), an
insert of new keys, a delete of existing keys, a snapshot read and an incremental read (rows
checked against the expected table), the companion job's run (multiwriter) and a storage-lock
acquire and release; then all of it again at ``s3_cost_slow_latency_ms`` (50 ms), a slower store.

Beside each count, the physical minimum of the operation (objects that must be read and written,
one request each): found by listing the bucket before and after the operation (outside the
count), so it follows what the operation actually produced:

* a write: one LIST of the timeline, one GET of the file listing (the metadata table), a GET of
  each base file it rewrote, a PUT of each new data file and one PUT of the commit;
* a snapshot read: one LIST, one GET of the listing and one GET of each live data file (its size
  is known from the listing: a ranged read needs no HEAD); an incremental read: the same over
  the files its commits wrote;
* the companion job: one LIST of the timeline, one LIST of the heartbeats, one GET of the
  listing, a GET of each file it merged, a PUT of each object it left behind, a GET of each
  instant it archived (the history holds its metadata) and a DELETE of each, one after another
  (Hudi's ``TimelineArchiverV2`` deletes archived completed instants oldest first, one by one: a
  hole in the active timeline misleads readers, HUDI-7207), and one DELETE request per 1,000
  other objects it removed. It runs in the writers' process (as ``Cleaner.start`` runs in the
  writers' Spark application), so what they wrote there is not read back. Then a run with
  nothing due, in that process and in a process of its own (every cache of this process
  dropped first: what a companion job started on its own pays on each trigger at first): its
  minimum is the LIST of the timeline, the LIST of the heartbeats and the GET of the listing;
* a lock acquire: one conditional PUT (the lock free); a release: one.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import multiwriter as mw

from . import data, goals

KINDS = ("LIST", "HEAD", "GET", "PUT", "MULTIPART", "DELETE", "other")
SYSTEMS = ("multiwriter Copy-on-Write", "multiwriter Merge-on-Read", "deltalake")
OPERATIONS = ("upsert", "insert", "delete", "snapshot read", "incremental read", "companion job run",
              "companion run, nothing due", "companion run, nothing due, new process", "lock acquire",
              "lock release")


def _days(n: int) -> np.ndarray:
    return np.array([str(d) for d in np.datetime64("2024-01-01") + np.arange(n)])


class Batches:
    """The initial rows and the batches, with string (``k000000042``) or int64 keys."""

    def __init__(self, int_keys: bool, rows: int, partitions: int, batch: int, batches: int) -> None:
        self.schema = data.EVENT_SCHEMA if int_keys else data.SCHEMA
        self.make = data.event_rows if int_keys else data.rows
        self.days = _days(partitions)
        self.n = rows
        ids = np.arange(rows)
        self.initial = self.make(ids, self.days[ids % partitions], 0, 1)
        self.upserts = []
        for b in range(batches):
            rng = np.random.default_rng(100 + b)
            upd = np.unique(rng.choice(rows, batch // 2, replace=False))
            new = rows + b * batch + np.arange(batch - len(upd))
            ids = np.concatenate([upd, new])
            self.upserts.append(self.make(ids, self.days[ids % partitions], b + 1, 200 + b))
        ids = rows + batches * batch + np.arange(batch)
        self.insert = self.make(ids, self.days[ids % partitions], batches + 1, 300)
        # a delete of existing keys spread over every partition (a tenth of a batch)
        gone = np.unique(np.random.default_rng(400).choice(rows, batch // 10, replace=False))
        self.delete = self.make(gone, self.days[gone % partitions], batches + 2, 400)


class Multiwriter:
    def __init__(self, uri: str, schema: pa.Schema, **table) -> None:
        self.uri = uri
        mw.Table.create(uri, name="bench", schema=schema, record_key="id", partition_by=["date"], ordering_field="ts",
                        metadata=True, **table)
        self.lock = mw.InProcessLock()
        # long-lived writers, as the streaming sink keeps one per table
        self.writer = mw.Writer(mw.Table.open(uri), mw.WriterConfig(writer_id="bench", executor="driver", lock=self.lock))
        self.inserter = mw.Writer(mw.Table.open(uri), mw.WriterConfig(writer_id="bench-insert", executor="driver",
                                                                      lock=self.lock, operation="insert"))
        self.deleter = mw.Writer(mw.Table.open(uri), mw.WriterConfig(writer_id="bench-delete", executor="driver",
                                                                     lock=self.lock, operation="delete"))
        self.completions: list[str] = []

    def _done(self, r) -> None:
        self.completions.append(r.instant.completion_time)

    def load(self, t: pa.Table) -> None:
        self._done(self.writer.write(t))

    upsert = load

    def insert(self, t: pa.Table) -> None:
        self._done(self.inserter.write(t))

    def delete(self, t: pa.Table) -> None:
        self._done(self.deleter.write(t))

    def read(self) -> pa.Table:
        return mw.Table.open(self.uri).read(columns=["id", "ts", "amount"])

    def incremental(self) -> pa.Table:
        """The rows of the last upsert and the insert (the delete after them is not in the range)."""
        return mw.Table.open(self.uri).read_incremental(self.completions[-4], self.completions[-2])

    def companion(self) -> None:
        cleaner = mw.Cleaner(self.uri, lock=self.lock, retain_commits=2, archive_keep_min=4, archive_keep_max=6)
        try:
            report = cleaner.run_once()
        finally:
            cleaner.close()
        self.report = report


class DeltaLake:
    def __init__(self, uri: str, schema: pa.Schema) -> None:
        self.uri = uri
        self.versions: list[int] = []

    def _done(self) -> None:
        from deltalake import DeltaTable

        self.versions.append(DeltaTable(self.uri).version())

    def load(self, t: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, t, partition_by=["date"], mode="append",
                        configuration={"delta.enableChangeDataFeed": "true"})
        self._done()

    def upsert(self, t: pa.Table) -> None:
        from deltalake import DeltaTable

        (DeltaTable(self.uri).merge(t, predicate="s.id = t.id AND s.date = t.date", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())

    def insert(self, t: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, t, partition_by=["date"], mode="append")

    def delete(self, t: pa.Table) -> None:
        from deltalake import DeltaTable

        (DeltaTable(self.uri).merge(t, predicate="s.id = t.id AND s.date = t.date", source_alias="s", target_alias="t")
         .when_matched_delete().execute())

    def read(self) -> pa.Table:
        from deltalake import DeltaTable

        return DeltaTable(self.uri).to_pyarrow_table(columns=["id", "ts", "amount"])


def _without(b: Batches, gone: pa.Table) -> tuple:
    """The checksum of the table after the upserts and the insert, less the keys ``gone`` deletes."""
    import pyarrow.compute as pc

    t = b.initial
    for batch in [*b.upserts, b.insert]:
        t = pa.concat_tables([t.filter(pc.invert(pc.is_in(t["id"], value_set=batch["id"]))), batch])
    return goals.checksum(t.filter(pc.invert(pc.is_in(t["id"], value_set=gone["id"]))))


def _objects(client, bucket: str, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def _data(keys) -> list[str]:
    """Data files (base Parquet files and log files) among object keys."""
    return [k for k in keys if "/.hoodie/" not in k and "/_delta_log/" not in k and not k.endswith("/")
            and (k.endswith(".parquet") or ".log." in k)]


def _file_id(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    return name.lstrip(".").split("_", 1)[0]


def _write_minimum(before: dict, after: dict, log_files_read: bool = False) -> int:
    """LIST timeline + GET listing + GET per base file rewritten + PUT per new data file + PUT commit."""
    new = _data(set(after) - set(before))
    old_groups = {_file_id(k) for k in _data(before) if k.endswith(".parquet")}
    rewritten = sum(1 for k in new if k.endswith(".parquet") and _file_id(k) in old_groups)
    return 2 + rewritten + len(new) + 1


def _live_minimum(after: dict, live: int) -> int:
    return 2 + live


def _live_hudi(objs) -> list[str]:
    """The live data files of a Hudi table among its objects: the newest base file of each file
    group and the log files written after it (``<id>_<token>_<T>.parquet``, ``.<id>_<T>.log.<n>_<token>``)."""
    groups: dict[str, list[tuple[str, str, bool]]] = {}
    for k in _data(objs):
        name = k.rsplit("/", 1)[-1]
        if name.endswith(".parquet"):
            fid, _, rest = name.partition("_")
            groups.setdefault(k.rsplit("/", 1)[0] + "/" + fid, []).append((rest.split("_")[1].split(".")[0], k, True))
        else:
            fid, _, rest = name.lstrip(".").partition("_")
            groups.setdefault(k.rsplit("/", 1)[0] + "/" + fid, []).append((rest.split(".log.")[0], k, False))
    live = []
    for files in groups.values():
        base = max((t for t, _, is_base in files if is_base), default="")
        live += [k for t, k, is_base in files if (is_base and t == base) or (not is_base and t > base)]
    return live


class Round:
    """One key type: the three systems on one bucket, the counter, the operations."""

    def __init__(self, s3, counter, batches: Batches, buckets: int) -> None:
        self.s3, self.counter, self.b = s3, counter, batches
        self.bucket = s3.bucket()
        base = self.bucket
        self.systems = {
            SYSTEMS[0]: Multiwriter(f"{base}/cow", batches.schema),
            SYSTEMS[1]: Multiwriter(f"{base}/mor", batches.schema, table_type="MERGE_ON_READ", num_buckets=buckets),
            SYSTEMS[2]: DeltaLake(f"{base}/delta", batches.schema),
        }
        self.prefix = {SYSTEMS[0]: "cow/", SYSTEMS[1]: "mor/", SYSTEMS[2]: "delta/"}
        self.out: dict = {op: {s: [] for s in SYSTEMS} for op in OPERATIONS}
        self.minimum: dict = {op: {s: [] for s in SYSTEMS} for op in OPERATIONS}
        self.written: dict[str, list[int]] = {s: [] for s in SYSTEMS}
        self.logs: dict = {}

    def snapshot(self, system: str) -> dict[str, int]:
        got = _objects(self.s3.client, self.bucket.removeprefix("s3://"), self.prefix[system])
        self.counter.take()
        return got

    def measure(self, system: str, op: str, fn, minimum=None):
        before = self.snapshot(system) if minimum else None
        self.counter.take()
        t0 = time.perf_counter()
        got = fn()
        secs = time.perf_counter() - t0
        self.logs[(op, system)] = list(self.counter.requests)
        mdt = sum(1 for _, _, path in self.counter.requests if "/.hoodie/metadata/" in path or "%2Fmetadata%2F" in path)
        counts = self.counter.take()
        self.out[op][system].append({"requests": counts, "s": secs, "metadata_table": mdt})
        if minimum:
            after = self.snapshot(system)
            self.minimum[op][system].append(minimum(before, after))
            if op in ("upsert", "insert"):  # what an incremental read of the last two writes must read
                self.written[system].append(len(_data(set(after) - set(before))))
        return got

    def run(self) -> None:
        names = list(self.systems)
        for name in names:  # the initial load, not measured
            self.systems[name].load(self.b.initial)
        for i, batch in enumerate(self.b.upserts):
            for name in names[i % 3:] + names[:i % 3]:
                self.measure(name, "upsert", lambda s=self.systems[name], t=batch: s.upsert(t), _write_minimum)
        for name in names:
            self.measure(name, "insert", lambda s=self.systems[name]: s.insert(self.b.insert), _write_minimum)
        for name in names[2:] + names[:2]:
            self.measure(name, "delete", lambda s=self.systems[name]: s.delete(self.b.delete), _write_minimum)
        want = _without(self.b, self.b.delete)
        live: dict[str, int] = {}
        for name in names[1:] + names[:1]:
            objs = self.snapshot(name)
            live[name] = self._live_files(name, objs)
            got = self.measure(name, "snapshot read", self.systems[name].read,
                               lambda before, after, n=live[name]: _live_minimum(after, n))
            if goals.checksum(got) != want:
                raise AssertionError(f"{name}: snapshot rows/checksum {goals.checksum(got)} != {want}")
        want_inc = goals.expected_upserts(self.b.upserts[-1].slice(0, 0), [self.b.upserts[-1], self.b.insert])
        for name in names[1:2] + names[:1]:  # deltalake's change feed is not the same read
            files = sum(self.written[name][-2:])
            got = self.measure(name, "incremental read", self.systems[name].incremental,
                               lambda before, after, n=files: 2 + n)
            if goals.checksum(got.select(["id", "ts", "amount"])) != want_inc:
                raise AssertionError(f"{name}: incremental rows/checksum {goals.checksum(got)} != {want_inc}")
        for name in names[:2]:
            self.measure(name, "companion job run", self.systems[name].companion, self._companion_minimum(name))
        for name in names[:2]:
            self.measure(name, "companion run, nothing due", self.systems[name].companion, lambda before, after: 3)
        for name in names[:2]:
            _forget_process_caches()
            self.measure(name, "companion run, nothing due, new process", self.systems[name].companion,
                         lambda before, after: 3)
        got = self.systems[names[0]].read()
        if goals.checksum(got) != want:
            raise AssertionError(f"after the companion job: {goals.checksum(got)} != {want}")
        from multiwriter.storage import Storage

        lock = mw.StorageLock(validity_s=30, renew_interval_s=5).for_table("bench", Storage(self.systems[names[0]].uri))
        for _ in range(3):
            self.measure(names[0], "lock acquire", lock.acquire, lambda before, after: 1)
            self.measure(names[0], "lock release", lock.release, lambda before, after: 1)

    def _live_files(self, name: str, objs: dict) -> int:
        if name == SYSTEMS[2]:
            from deltalake import DeltaTable

            return len(DeltaTable(self.systems[name].uri).file_uris())
        return len(_live_hudi(objs))

    def _companion_minimum(self, name: str):
        def minimum(before: dict, after: dict) -> int:
            r = self.systems[name].report
            merged = r.compacted_file_groups + r.compacted_log_files + r.clustered_file_groups
            removed = len(set(before) - set(after)) - r.archived
            return 3 + merged + len(set(after) - set(before)) + 2 * r.archived + -(-removed // 1000)
        return minimum


def _forget_process_caches() -> None:
    """What this process keeps of the tables it read and wrote (decoded metadata-table files,
    parsed commit files and timeline listings, history files it wrote, Parquet objects read,
    its own last decision): dropped, as a new process starts without them."""
    from multiwriter.format import lsm_timeline
    from multiwriter.s3_store import S3Handler
    from multiwriter.table import decisions, metadata_files, timeline

    metadata_files.forget_decoded()
    timeline.forget_cache()
    lsm_timeline.forget_published()
    S3Handler.forget_recent()
    decisions.forget_mine()


def _med(runs: list[dict]) -> dict:
    if not runs:
        return {}
    return {"s": statistics.median(r["s"] for r in runs),
            "requests": {k: statistics.median(r["requests"][k] for r in runs) for k in KINDS},
            "metadata_table": statistics.median(r.get("metadata_table", 0) for r in runs),
            "total": statistics.median(sum(r["requests"].values()) for r in runs), "runs": len(runs)}


def cost(size: dict, work: Path, spark=None, *, log: bool = False) -> dict:
    """The section; ``log=True`` also returns the requests of each operation's last run."""
    from testbed.moto_s3 import MotoS3

    latency = size["s3_cost_latency_ms"] / 1000
    holder: dict = {}
    out: dict = {"latency_ms": size["s3_cost_latency_ms"], "rows": size["s3_cost_rows"],
                 "partitions": size["s3_cost_partitions"], "batch_rows": size["s3_cost_batch"],
                 "upserts": size["s3_cost_batches"], "buckets": size["s3_cost_buckets"], "keys": {},
                 "store": "moto in a process of its own"}
    # each request kept: the metadata table's share of an operation is counted from them
    with MotoS3(prefix="bench", counted=(latency, True)) as s3:
        holder["c"] = s3.counter
        out["keys"] = _rounds(s3, holder, size, out if log else None)
        slow = size.get("s3_cost_slow_latency_ms")
        if slow:  # the same rounds on a slower store: what each sequential request costs shows
            holder["c"].latency_s = slow / 1000
            out["slow"] = {"latency_ms": slow, "keys": _rounds(s3, holder, size, None)}
    return out


def _rounds(s3, holder: dict, size: dict, log_into: dict | None) -> dict:
    """Both key shapes, each on fresh tables: per operation and system, the median requests,
    seconds and minimum."""
    out: dict = {}
    for keys in ("string keys", "integer keys"):
        b = Batches(keys == "integer keys", size["s3_cost_rows"], size["s3_cost_partitions"], size["s3_cost_batch"],
                    size["s3_cost_batches"])
        r = Round(s3, holder["c"], b, size["s3_cost_buckets"])
        r.run()
        if log_into is not None:
            log_into.setdefault("log", {})[keys] = {f"{op} / {s}": v for (op, s), v in r.logs.items()}
        out[keys] = {op: {s: {**_med(r.out[op][s]),
                              "minimum": statistics.median(r.minimum[op][s]) if r.minimum[op][s] else None}
                          for s in SYSTEMS if r.out[op][s]} for op in OPERATIONS}
    return out


def render(r: dict) -> list[str]:
    out = [f"## What an operation costs on S3 (moto on 127.0.0.1, {r['latency_ms']} ms added to each request; "
           f"{r['rows']:,} rows over {r['partitions']} partitions, {r['upserts']} upserts of {r['batch_rows']:,} rows "
           f"(half updates), an insert of {r['batch_rows']:,}, a delete of {r['batch_rows'] // 10:,} keys; Merge-on-Read "
           f"with {r['buckets']} buckets per "
           "partition; median requests and seconds per operation)", "",
           "| keys | operation | system | LIST | HEAD | GET | PUT | MULTIPART | DELETE | requests | minimum | s |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for keys, ops in r["keys"].items():
        for op, systems in ops.items():
            for s, d in systems.items():
                q = d["requests"]
                m = "" if d.get("minimum") is None else f"{d['minimum']:.0f}"
                out.append(f"| {keys} | {op} | {s} | {q['LIST']:.0f} | {q['HEAD']:.0f} | {q['GET']:.0f} | "
                           f"{q['PUT']:.0f} | {q['MULTIPART']:.0f} | {q['DELETE']:.0f} | {d['total']:.0f} | {m} | "
                           f"{d['s']:.2f} |")
    out += ["", "minimum: objects the operation must read and write, one request each (see "
            "`benchmarks/s3_cost.py`). A ZooKeeper lock acquire makes no S3 request (one ZooKeeper round trip to "
            "create its node, one to release it).", ""]
    first = next(iter(r["keys"].values()), {})
    mdt = [(op, s, d["metadata_table"]) for op in ("upsert", "insert", "delete", "companion job run")
           for s, d in first.get(op, {}).items() if "metadata_table" in d and s != SYSTEMS[2]]
    if mdt:
        out += ["Of which the metadata table's (its deltacommit: the listings of its timeline and files partition, "
                "the log file and its three instant files; the companion job's also its compaction; "
                f"{next(iter(r['keys']))}):", "",
                "| operation | system | metadata-table requests |", "| --- | --- | ---: |",
                *[f"| {op} | {s} | {n:.0f} |" for op, s, n in mdt], ""]
    slow = r.get("slow")
    if slow:
        out += [f"The same operations at {slow['latency_ms']} ms per request (requests, seconds; ours against "
                "deltalake's where it has the operation):", "",
                "| keys | operation | Copy-on-Write | Merge-on-Read | deltalake |", "| --- | --- | ---: | ---: | ---: |"]
        for keys, ops in slow["keys"].items():
            for op, systems in ops.items():
                cells = [f"{systems[s]['total']:.0f} ({systems[s]['s']:.2f} s)" if s in systems else "" for s in SYSTEMS]
                out.append(f"| {keys} | {op} | " + " | ".join(cells) + " |")
        out.append("")
    return out
