"""``s3://`` tables as a :mod:`pyarrow.fs` file system made of plain S3 requests (boto3), each
operation at the fewest requests (issue 57, measured by the ``s3_cost`` benchmark section).

pyarrow's own ``S3FileSystem`` sends three requests per written object however small (a
multipart upload's start, one part, its completion), a HEAD before every read, a HEAD and a LIST
for every missing name, a HEAD before each delete and an empty directory-marker object after it.
Here:

* a write is one ``PUT`` below :data:`MULTIPART_THRESHOLD` (the AWS SDKs switch at 8-100 MB),
  a multipart upload above it, streamed in :data:`PART_SIZE` parts;
* a read is one ``GET``: the object's last :data:`TAIL` bytes (a suffix range) come back with its
  size, so a small object arrives whole and a large one has its Parquet footer in hand; further
  ranges are ranged ``GET`` requests, never a ``HEAD``;
* no directory markers: folders exist when objects are under them (``create_dir`` is free);
* a delete is one ``DELETE`` (S3 answers 204 whether or not the object was there), a folder's
  delete a LIST and one batch ``DELETE`` per 1,000 objects, a move a server-side copy and a delete;
* files written under a *holding* folder (:meth:`S3Handler.hold`: the staged copies of data files
  before their instant is checked alive) stay in this process's memory until moved, then cost one
  PUT at their final name; one dropped costs nothing. Above the threshold they are uploaded.

Requests that do not depend on each other go out side by side, at most
:data:`REQUESTS_IN_FLIGHT` at once per process (:data:`REQUESTS`): a read names the objects it is
about to open (:meth:`S3Handler.read_ahead`) and their first GETs are sent ahead, bounded by
:data:`READ_AHEAD_BYTES`; a write's final PUTs are handed to :class:`Uploads` and waited for
together. The request count is the same either way; only the waiting overlaps. The client
(:func:`multiwriter.s3.data_client`) is thread-safe and pools connections.
"""
from __future__ import annotations

import io
import posixpath
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from . import s3
from .threads import ProcessPool, free_in_child

#: objects below this many bytes are written with one PUT
MULTIPART_THRESHOLD = 32 << 20
#: the part size of larger uploads (S3's minimum is 5 MB)
PART_SIZE = 16 << 20
#: the bytes the first GET of a read asks for, from the end of the object
TAIL = 1 << 20
#: bytes of whole Parquet objects kept after a read (a dataset scan opens each file twice: its
#: footer, then its rows); Parquet objects of a table are never rewritten under their name
IMMUTABLE_CACHE = 64 << 20
#: S3 requests in flight at once for reads ahead and uploads, per process. A request spends
#: nearly all its time waiting on the store (15-50 ms to the first byte, little CPU), so 16 side
#: by side turn an operation's tens of files into a few round trips; it stays below the client's
#: pooled connections (:data:`multiwriter.s3.DATA_POOL`, 32), leaving some to the callers' own
#: requests, and far below what S3 takes from one prefix (thousands per second)
REQUESTS_IN_FLIGHT = 16
#: the threads that send those requests (they only wait on the network: no CPU pool is used)
REQUESTS = ProcessPool("mw-s3-io", REQUESTS_IN_FLIGHT)
#: bytes fetched ahead of one read and not yet opened by it (:meth:`S3Handler.read_ahead`): a read
#: of many large files holds at most this much beyond what it decodes, the rest follow as it goes
READ_AHEAD_BYTES = 256 << 20
#: objects up to this size are fetched whole ahead of a read (one GET, as the read itself would
#: cost for the small files of a table); larger ones their last :data:`TAIL` bytes, the footer
#: a Parquet read starts with, and the ranges it then asks for are read on demand
WHOLE_AHEAD = IMMUTABLE_CACHE // 8
#: bytes of one write's files waiting for their upload (:class:`Uploads`)
UPLOAD_BYTES = 256 << 20


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.lstrip("/").partition("/")
    return bucket, key.rstrip("/")


def _missing(e: Exception) -> bool:
    return s3.status(e) == 404 or s3.code(e) in ("NoSuchKey", "404", "NotFound")


def _oserror(path: str, e: Exception) -> OSError:
    if _missing(e):
        return FileNotFoundError(f"{path}: no such object")
    return OSError(f"{path}: {e}")


class _Upload(io.RawIOBase):
    """A write stream: buffered in memory, one PUT on close, a multipart upload once the
    buffer passes :data:`MULTIPART_THRESHOLD`. ``on_close(data)`` instead of the PUT: the
    bytes are handed over (held files)."""

    def __init__(self, client: Any, bucket: str, key: str, on_close: Any = None) -> None:
        self.client, self.bucket, self.key, self.on_close = client, bucket, key, on_close
        self.buf = bytearray()
        self.upload_id: str | None = None
        self.parts: list[dict] = []
        self.pos = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def write(self, b: Any) -> int:
        n = len(memoryview(b).cast("B"))
        self.buf += b
        self.pos += n
        if len(self.buf) >= MULTIPART_THRESHOLD:
            self._flush_parts(final=False)
        return n

    def _flush_parts(self, final: bool) -> None:
        if self.upload_id is None:
            self.upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key)["UploadId"]
        while len(self.buf) >= PART_SIZE or (final and self.buf):
            chunk, self.buf = bytes(self.buf[:PART_SIZE]), self.buf[PART_SIZE:]
            n = len(self.parts) + 1
            r = self.client.upload_part(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=n,
                                        Body=chunk)
            self.parts.append({"ETag": r["ETag"], "PartNumber": n})

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.upload_id is None and self.on_close is not None:
                self.on_close(bytes(self.buf))
            elif self.upload_id is None:
                self.client.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self.buf))
            else:
                try:
                    self._flush_parts(final=True)
                    self.client.complete_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
                                                          MultipartUpload={"Parts": self.parts})
                except BaseException:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
                    raise
        finally:
            self.buf = bytearray()
            super().close()


class _Ranged(io.RawIOBase):
    """A random-access read of one object of known size: the tail fetched by the first GET is
    served from memory, other ranges by ranged GETs."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, tail: bytes) -> None:
        self.client, self.bucket, self.key, self.size = client, bucket, key, size
        self.tail_at, self.tail = size - len(tail), tail
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        if self.pos >= self.tail_at:
            out = self.tail[self.pos - self.tail_at:end - self.tail_at]
        else:
            r = self.client.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.pos}-{end - 1}")
            out = r["Body"].read()
        self.pos += len(out)
        return out

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


class _ReadAhead:
    """The first GETs of the objects one read is about to open, sent on :data:`REQUESTS` in the
    order given, while the bytes fetched and not yet opened stay within ``budget`` (one object
    larger than it is still fetched when nothing else is held). An object is handed over once
    (:meth:`take`); one the read opens before its turn came is taken off the list and read by
    the reader itself, so no object is fetched twice."""

    def __init__(self, handler: S3Handler, objects: Sequence[tuple[str, int]], budget: int) -> None:
        self.handler = handler
        self.budget = budget
        self.queue: deque[tuple[str, int]] = deque(objects)
        self.waiting = {path for path, _ in objects}
        self.fetches: dict[str, tuple[Future, int]] = {}
        self.held = 0
        self.closed = False
        self.mu = threading.Lock()

    @staticmethod
    def _tail(path: str, size: int) -> int:
        """The bytes asked for (the size known): a Parquet object whole when small, else its
        tail (its footer; the reader asks for the ranges it needs); any other object (a log
        file, read whole) whole."""
        if size <= 0:
            return TAIL
        return size if size <= WHOLE_AHEAD or not path.endswith(".parquet") else TAIL

    def pump(self) -> None:
        """Send the next GETs the budget allows."""
        with self.mu:
            while self.queue and not self.closed:
                path, size = self.queue[0]
                cost = self._tail(path, size)
                if self.held and self.held + cost > self.budget:
                    return
                self.queue.popleft()
                self.waiting.discard(path)
                self.held += cost
                self.fetches[path] = (REQUESTS.get().submit(self.handler._get, path, cost), cost)

    def take(self, path: str) -> tuple[int, bytes] | None:
        """(size, bytes) of ``path`` as :meth:`S3Handler._get` returns them, waiting for its GET
        when sent; None when this read-ahead does not have it (it never will then)."""
        with self.mu:
            sent = self.fetches.pop(path, None)
            if sent is None:
                if path in self.waiting:
                    self.waiting.discard(path)
                    self.queue = deque(o for o in self.queue if o[0] != path)
                return None
        future, cost = sent
        try:
            return future.result()
        finally:
            with self.mu:
                self.held -= cost
            self.pump()

    def close(self) -> None:
        """Drop what was not taken: GETs not started are cancelled, the others' bytes dropped."""
        with self.mu:
            self.closed = True
            self.queue.clear()
            self.waiting.clear()
            for future, _ in self.fetches.values():
                future.cancel()
            self.fetches.clear()


class Uploads:
    """Requests of one write that do not depend on each other (the final PUTs of its data
    files), sent side by side on :data:`REQUESTS` and waited for together (:meth:`wait`). The
    bytes waiting to go out are bounded (``budget``): a sender waits while they are above it,
    so writers faster than the network do not pile a whole write up in memory."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = UPLOAD_BYTES if budget is None else budget
        self._sent: list[tuple[str, Future]] = []
        self._pending = 0
        self._cv = threading.Condition()

    def send(self, name: str, fn: Callable[..., Any], *args: Any, size: int = 0) -> None:
        """Run ``fn(*args)``, the upload of ``name`` (``size`` bytes held until it ends), on
        the request threads."""
        with self._cv:
            self._cv.wait_for(lambda: not self._pending or self._pending + size <= self.budget)
            self._pending += size
            future = REQUESTS.get().submit(fn, *args)
            self._sent.append((name, future))
        future.add_done_callback(lambda _: self._done(size))

    def _done(self, size: int) -> None:
        with self._cv:
            self._pending -= size
            self._cv.notify_all()

    def wait(self) -> list[tuple[str, BaseException]]:
        """Wait for every upload sent (failed or not, none is left running); the failed ones by name."""
        with self._cv:
            sent, self._sent = self._sent, []
        wait([f for _, f in sent])
        return [(name, e) for name, f in sent if (e := f.exception()) is not None]


class S3Handler(pafs.FileSystemHandler):
    """The :class:`pyarrow.fs.PyFileSystem` handler of ``s3://`` tables (see the module)."""

    #: held files and holding folders, shared by every handler of the process (a file written
    #: through one table's storage may be published through another's)
    _held: dict[str, bytes] = {}
    _holding: set[str] = set()
    _mu = free_in_child(threading.Lock())
    #: whole Parquet objects read lately, newest last (:data:`IMMUTABLE_CACHE`)
    _recent: OrderedDict[str, bytes] = OrderedDict()
    _recent_bytes = 0

    @classmethod
    def forget_recent(cls) -> None:
        """Drop the Parquet objects kept from earlier reads (as a new process starts)."""
        with cls._mu:
            cls._recent.clear()
            cls._recent_bytes = 0

    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.credentials = credentials
        #: the reads ahead under way (:meth:`read_ahead`)
        self._aheads: list[_ReadAhead] = []
        self._aheads_mu = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:  # what a copy needs: its credentials, not reads under way
        return S3Handler, (self.credentials,)

    @property
    def client(self) -> Any:
        return s3.data_client(self.credentials)

    # -- held files ------------------------------------------------------------
    def hold(self, folder: str) -> None:
        """Keep files written directly in ``folder`` (``bucket/key``) in memory until moved."""
        with self._mu:
            self._holding.add(folder.rstrip("/"))

    def _is_held_dir(self, path: str) -> bool:
        return posixpath.dirname(path.rstrip("/")) in self._holding

    def _take(self, path: str) -> bytes | None:
        with self._mu:
            self._forget(path)
            return self._held.pop(path, None)

    def _forget(self, path: str) -> None:
        data = S3Handler._recent.pop(path, None)
        if data is not None:
            S3Handler._recent_bytes -= len(data)

    def _remember(self, path: str, data: bytes) -> None:
        if not path.endswith(".parquet") or len(data) > IMMUTABLE_CACHE // 8:
            return
        with self._mu:
            self._forget(path)
            S3Handler._recent[path] = data
            S3Handler._recent_bytes += len(data)
            while S3Handler._recent_bytes > IMMUTABLE_CACHE:
                _, old = S3Handler._recent.popitem(last=False)
                S3Handler._recent_bytes -= len(old)

    def _recall(self, path: str) -> bytes | None:
        if not path.endswith(".parquet"):
            return None
        with self._mu:
            data = S3Handler._recent.get(path)
            if data is not None:
                S3Handler._recent.move_to_end(path)
            return data

    def _peek(self, path: str) -> bytes | None:
        with self._mu:
            return self._held.get(path)

    def held_size(self, path: str) -> int:
        """The bytes of a held file (0 when ``path`` is not held)."""
        held = self._peek(path)
        return len(held) if held is not None else 0

    # -- reads ahead -----------------------------------------------------------
    @contextmanager
    def read_ahead(self, objects: Sequence[tuple[str, int]], budget: int | None = None) -> Iterator[None]:
        """While the block runs, the objects ``(path, size)`` (size 0: unknown) are fetched
        side by side, in this order, ahead of their reads; each one's first open in the block
        is served from what was fetched: the same GET the open would have sent (the whole of a
        small object, the tail of a larger one), sent earlier. ``budget``: the bytes fetched and
        not yet opened (:data:`READ_AHEAD_BYTES` by default). See :class:`_ReadAhead`."""
        # objects this process holds or keeps from an earlier read are opened without a request
        kept = [(p, s) for p, s in dict(objects).items() if self._peek(p) is None and self._recall(p) is None]
        ahead = _ReadAhead(self, kept, READ_AHEAD_BYTES if budget is None else budget)
        with self._aheads_mu:
            self._aheads.append(ahead)
        try:
            ahead.pump()
            yield
        finally:
            with self._aheads_mu:
                self._aheads.remove(ahead)
            ahead.close()

    def _ahead(self, path: str) -> tuple[int, bytes] | None:
        """What a read ahead fetched of ``path`` (see :meth:`read_ahead`), else None."""
        with self._aheads_mu:
            aheads = list(self._aheads)
        for ahead in aheads:
            got = ahead.take(path)
            if got is not None:
                return got
        return None

    # -- FileSystemHandler -----------------------------------------------------
    def get_type_name(self) -> str:
        return "multiwriter-s3"

    def equals(self, other: Any) -> bool:
        return isinstance(other, S3Handler) and other.credentials == self.credentials

    def normalize_path(self, path: str) -> str:
        return path.lstrip("/")

    def _info(self, path: str) -> pafs.FileInfo:
        held = self._peek(path)
        if held is not None:
            return pafs.FileInfo(path, pafs.FileType.File, size=len(held))
        bucket, key = _split(path)
        if not key:
            return pafs.FileInfo(path, pafs.FileType.Directory)
        from botocore.exceptions import ClientError

        try:
            h = self.client.head_object(Bucket=bucket, Key=key)
            return pafs.FileInfo(path, pafs.FileType.File, size=h["ContentLength"], mtime=h["LastModified"])
        except ClientError as e:
            if not _missing(e):
                raise _oserror(path, e) from e
        r = self.client.list_objects_v2(Bucket=bucket, Prefix=key + "/", MaxKeys=1)
        return pafs.FileInfo(path, pafs.FileType.Directory if r.get("KeyCount", 0) else pafs.FileType.NotFound)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.rstrip("/")
        bucket, key = _split(base)
        prefix = f"{key}/" if key else ""
        kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if not selector.recursive:
            kw["Delimiter"] = "/"
        out: list[pafs.FileInfo] = []
        dirs: set[str] = set()
        found = False
        for page in self.client.get_paginator("list_objects_v2").paginate(**kw):
            for cp in page.get("CommonPrefixes", []):
                found = True
                dirs.add(cp["Prefix"].rstrip("/"))
            for o in page.get("Contents", []):
                found = True
                k = o["Key"]
                rel = k[len(prefix):]
                if selector.recursive:  # the folders between, as pyarrow lists them
                    parts = rel.split("/")[:-1]
                    for i in range(1, len(parts) + 1):
                        dirs.add(prefix + "/".join(parts[:i]))
                if k.endswith("/"):  # a directory marker written by another tool
                    continue
                out.append(pafs.FileInfo(f"{bucket}/{k}", pafs.FileType.File, size=o["Size"], mtime=o["LastModified"]))
        dirs.discard(prefix.rstrip("/"))
        out += [pafs.FileInfo(f"{bucket}/{d}", pafs.FileType.Directory) for d in sorted(dirs) if d]
        if not found and not selector.allow_not_found and key:
            raise FileNotFoundError(f"{base}: no such folder")
        return out

    def list_names(self, folder: str, prefix: str = "") -> list[str]:
        """Names of the objects directly in ``folder`` that start with ``prefix``: the prefix is
        S3's own (one request for an instant's few files in a timeline of hundreds)."""
        bucket, key = _split(folder)
        start = f"{key}/" if key else ""
        out = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start + prefix,
                                                                          Delimiter="/"):
            out += [o["Key"][len(start):] for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        return out

    def create_dir(self, path: str, recursive: bool) -> None:
        """Nothing: folders on S3 are the objects under them (no marker objects)."""

    def _delete_under(self, bucket: str, prefix: str) -> None:
        keys = [o["Key"] for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            r = self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                                  "Quiet": True})
            if r.get("Errors"):
                e = r["Errors"][0]
                raise OSError(f"{bucket}/{e.get('Key')}: delete failed: {e.get('Code')} {e.get('Message')}")

    def delete_many(self, paths: Sequence[str]) -> list[tuple[str, str]]:
        """Delete these objects: one ``DeleteObjects`` request per 1,000 keys of a bucket (held
        files are dropped without a request). Each key's answer is checked: returns the
        ``(path, reason)`` of every object not deleted (a key S3 answered with an error, or not
        at all; a request that failed whole fails each of its keys)."""
        from botocore.exceptions import BotoCoreError, ClientError

        by_bucket: dict[str, list[str]] = {}
        for path in dict.fromkeys(paths):
            self._replaced(path)
            if self._take(path) is None:
                bucket, key = _split(path)
                by_bucket.setdefault(bucket, []).append(key)
        failed: list[tuple[str, str]] = []
        for bucket, keys in by_bucket.items():
            for i in range(0, len(keys), 1000):
                batch = keys[i:i + 1000]
                try:
                    r = self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch]})
                except (ClientError, BotoCoreError) as e:
                    failed += [(f"{bucket}/{k}", str(e)) for k in batch]
                    continue
                errors = {e.get("Key"): f"{e.get('Code')} {e.get('Message')}" for e in r.get("Errors", [])}
                deleted = {d.get("Key") for d in r.get("Deleted", [])}
                failed += [(f"{bucket}/{k}", errors.get(k, "not in the answer")) for k in batch
                           if k in errors or k not in deleted]
        return failed

    def delete_dir(self, path: str) -> None:
        bucket, key = _split(path)
        self.drop_under(path)
        self._delete_under(bucket, key + "/")

    def drop_under(self, path: str) -> None:
        """Forget what this process keeps of the objects under the folder ``path`` (held files,
        holding folders, cached reads): the folder is being deleted. No request."""
        under = path.rstrip("/") + "/"
        with self._mu:
            for k in [k for k in S3Handler._recent if k.startswith(under)]:
                self._forget(k)
            for k in [k for k in self._held if k.startswith(under)]:
                del self._held[k]
            self._holding.difference_update({d for d in self._holding if d.startswith(under)})

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.delete_dir(path)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refusing to delete a whole bucket's contents")

    def delete_file(self, path: str) -> None:
        if self._take(path) is not None:
            return
        from botocore.exceptions import ClientError

        bucket, key = _split(path)
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except ClientError as e:
            raise _oserror(path, e) from e

    def _replaced(self, path: str) -> None:
        with self._mu:
            self._forget(path)

    def move(self, src: str, dest: str) -> None:
        self._replaced(dest)
        held = self._take(src)
        dbucket, dkey = _split(dest)
        if held is not None:
            self.client.put_object(Bucket=dbucket, Key=dkey, Body=held)
            return
        self.copy_file(src, dest)
        self.delete_file(src)

    def copy_file(self, src: str, dest: str) -> None:
        from botocore.exceptions import ClientError

        self._replaced(dest)
        held = self._peek(src)
        dbucket, dkey = _split(dest)
        if held is not None:
            self.client.put_object(Bucket=dbucket, Key=dkey, Body=held)
            return
        sbucket, skey = _split(src)
        try:
            self.client.copy_object(Bucket=dbucket, Key=dkey, CopySource={"Bucket": sbucket, "Key": skey})
        except ClientError as e:
            raise _oserror(src, e) from e

    def _get(self, path: str, tail: int = TAIL) -> tuple[int, bytes]:
        """(size, the object's last ``tail`` bytes or all of it) in one GET."""
        size, body, _ = self._ranged_get(path, f"bytes=-{tail}")
        return size, body

    def read_head(self, path: str, limit: int) -> tuple[int, float, bytes]:
        """(size, modification time, the first ``limit`` bytes or all of it) in one GET, where a
        HEAD and a GET were two: a small file whose size is bounded before it is parsed."""
        size, body, r = self._ranged_get(path, f"bytes=0-{max(limit, 1) - 1}")
        modified = r.get("LastModified")
        return size, modified.timestamp() if modified is not None else 0.0, body[:limit]

    def _ranged_get(self, path: str, byte_range: str) -> tuple[int, bytes, dict]:
        """(the object's size, the bytes of ``byte_range``, the answer) in one GET; an empty
        object, which has no range, is read whole."""
        from botocore.exceptions import ClientError

        bucket, key = _split(path)
        try:
            try:
                r = self.client.get_object(Bucket=bucket, Key=key, Range=byte_range)
            except ClientError as e:
                if s3.status(e) != 416:  # a range of an empty object
                    raise
                r = self.client.get_object(Bucket=bucket, Key=key)
        except ClientError as e:
            raise _oserror(path, e) from e
        body = r["Body"].read()
        cr = r.get("ContentRange")
        return (int(cr.rsplit("/", 1)[1]) if cr else len(body)), body, r

    def open_input_file(self, path: str) -> Any:
        held = self._peek(path)
        if held is None:
            held = self._recall(path)
        if held is not None:
            return pa.BufferReader(held)
        size, tail = self._ahead(path) or self._get(path)
        if len(tail) == size:
            self._remember(path, tail)
            return pa.BufferReader(tail)
        bucket, key = _split(path)
        return pa.PythonFile(_Ranged(self.client, bucket, key, size, tail), mode="r")

    def open_input_stream(self, path: str) -> Any:
        held = self._peek(path)
        if held is not None:
            return pa.BufferReader(held)
        from botocore.exceptions import ClientError

        bucket, key = _split(path)
        ahead = self._ahead(path)
        try:
            if ahead is None:
                return pa.BufferReader(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())
            size, tail = ahead
            if len(tail) == size:
                return pa.BufferReader(tail)
            head = self.client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{size - len(tail) - 1}")
            return pa.BufferReader(head["Body"].read() + tail)
        except ClientError as e:
            raise _oserror(path, e) from e

    def open_output_stream(self, path: str, metadata: Any = None) -> Any:
        self._replaced(path)
        bucket, key = _split(path)
        on_close = None
        if self._is_held_dir(path):
            def on_close(data: bytes, path: str = path) -> None:
                with self._mu:
                    self._held[path] = data
        return pa.PythonFile(_Upload(self.client, bucket, key, on_close), mode="w")

    def open_append_stream(self, path: str, metadata: Any = None) -> Any:
        raise OSError(f"{path}: S3 objects cannot be appended to")


def filesystem(credentials: tuple[str, str] | None = None) -> pafs.PyFileSystem:
    """A file system over S3 (``bucket/key`` paths) for one set of credentials (None: the AWS
    SDK's default chain, configured from the standard variables)."""
    return pafs.PyFileSystem(S3Handler(credentials))
