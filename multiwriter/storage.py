"""Storage access through ``pyarrow.fs`` so local paths, ``file://``, ``s3://`` and ``hdfs://``
behave the same.

All paths handed to :class:`Storage` are relative to the table root and use ``/``. Creating a
file that must not exist yet (instant files, markers) goes through :meth:`Storage.put_if_absent`,
which is atomic on local disks (write to a temporary name, then ``link``) so readers never see a
partial file and two creators never both succeed.

``s3://bucket/path`` URIs are configured from the standard AWS environment variables
(:func:`s3_options`), the same on the driver and on every executor: ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``) for an S3-compatible server, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``),
credentials through the AWS SDK's default chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, profiles, instance roles). With an endpoint or a region set, nothing asks
AWS where the bucket lives.

Every relative path passes :func:`safe_relative` on its way to a file system (``..`` segments and
NUL are refused with :class:`~multiwriter.errors.UnsafePathError`), so no value read from a
table's files can point a read, write or delete outside the table root. On local disks listings
skip symbolic links that lead out of the root (or to directories), and deletes never go through
a link out of it: each is skipped with a warning. Writes and creates never go through a link at
all: a folder between the root and the file that is a symbolic link (``.hoodie`` itself,
``.hoodie/timeline``, ``.hoodie/.heartbeat``, ...) is refused with ``UnsafePathError`` naming it
(:meth:`Storage.refuse_links`).
"""
from __future__ import annotations

import errno
import logging
import os
import posixpath
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from . import gcs, s3, s3_store
from .errors import CommitStateUnknownError, ConfigError, DeleteError, FileExists, UnsafePathError, UploadError
from .redact import redact
from .threads import free_in_child

log = logging.getLogger(__name__)

#: bound on one conditional request (S3, GCS) of :meth:`Storage.create_exclusive`
CONDITIONAL_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the table root
    size: int
    mtime_s: float

    def __init__(self, path: str, size: int, mtime_s: float) -> None:
        """Set the fields directly: a listing builds one entry per file (a timeline's thousand
        several times per commit), and a frozen dataclass's generated ``__init__`` (one
        ``object.__setattr__`` per field) took twice as long."""
        d = self.__dict__
        d["path"], d["size"], d["mtime_s"] = path, size, mtime_s


#: the listings a :meth:`Storage.listings_kept` block keeps, per thread
_KEPT = threading.local()
#: the publishes a :meth:`Storage.publishing_together` block collects, per thread
_PUBLISHING = threading.local()
#: the folders kept by :meth:`Storage.folder_kept`, per thread: (table URI, folder) -> _Folder
_KEPT_FOLDERS = threading.local()


class _Folder:
    """What :meth:`Storage.folder_kept` keeps of one folder: its files' entries once listed,
    and each file's bytes once read (None: known to be absent)."""

    def __init__(self) -> None:
        self.entries: dict[str, FileEntry] | None = None
        self.data: dict[str, bytes | None] = {}
        #: set by a write it cannot follow (a stream, a publish, an exclusive create): from
        #: then on the folder is read from storage again, every time
        self.off = False

    def listed(self, list_files: Callable[[], list[FileEntry]]) -> list[FileEntry]:
        if self.off:
            return list_files()
        if self.entries is None:
            self.entries = {e.path: e for e in list_files()}
        return list(self.entries.values())

    def read(self, rel: str, read: Callable[[str], bytes]) -> bytes:
        if self.off:
            return read(rel)
        if rel not in self.data:
            if self.entries is not None and rel not in self.entries:
                self.data[rel] = None
            else:
                try:
                    self.data[rel] = read(rel)
                except FileNotFoundError:
                    self.data[rel] = None
        got = self.data[rel]
        if got is None:
            raise FileNotFoundError(rel)
        return got

    def wrote(self, rel: str, data: bytes) -> None:
        self.data[rel] = data
        if self.entries is not None:
            self.entries[rel] = FileEntry(rel, len(data), time.time())

    def deleted(self, rel: str) -> None:
        self.data[rel] = None
        if self.entries is not None:
            self.entries.pop(rel, None)

    def unknown(self, rel: str) -> None:
        """A delete that failed: the file may be there or not; its bytes are read again."""
        self.data.pop(rel, None)


class PublishGroup:
    """The publishes of one write's data files on S3 (:meth:`Storage.publishing_together`):
    each one PUT that depends on no other, sent side by side (:class:`~.s3_store.Uploads`)."""

    def __init__(self) -> None:
        self.uploads = s3_store.Uploads()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on this thread with its publishes joining the group: how a
        task on a pool thread (a file group's merge) takes part."""
        outer = getattr(_PUBLISHING, "group", None)
        _PUBLISHING.group = self
        try:
            return fn(*args, **kwargs)
        finally:
            _PUBLISHING.group = outer


class Storage:
    """A table root on some filesystem."""

    def __init__(self, uri: str) -> None:
        self.uri = str(uri)
        fs, root = filesystem_for(_as_uri(self.uri))
        self.fs: pafs.FileSystem = fs
        self.root: str = root.rstrip("/") or "/"
        self.is_local = isinstance(fs, pafs.LocalFileSystem)
        #: the S3 file system of plain requests (:mod:`multiwriter.s3_store`); None elsewhere
        self._s3 = fs.handler if isinstance(fs, pafs.PyFileSystem) and isinstance(fs.handler, s3_store.S3Handler) else None
        self.is_s3 = self._s3 is not None or isinstance(fs, pafs.S3FileSystem)
        #: a ``gs://`` table (pyarrow's GCS file system; conditional writes through :mod:`multiwriter.gcs`)
        self.is_gcs = isinstance(fs, pafs.GcsFileSystem)
        # object stores have no directories: creating one is an extra PUT of an empty marker
        self._needs_dirs = not (self.is_s3 or self.is_gcs)

    # -- paths ---------------------------------------------------------------
    def abs(self, rel: str) -> str:
        rel = rel.lstrip("/")
        if ".." in rel or "\x00" in rel:  # the cheap test first: abs() is on every file access
            safe_relative(rel)
        return posixpath.join(self.root, rel) if rel else self.root

    def uri_of(self, rel: str) -> str:
        """A URI another reader (Spark, hudi-rs) can open."""
        if self.is_local:
            return self.abs(rel)
        scheme = self.uri.split("://", 1)[0]
        return f"{scheme}://{self.abs(rel)}"

    # -- reading -------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        if self.is_local:  # one stat: pyarrow's FileInfo costs several times more (a data file's checks call this)
            try:
                os.stat(self.abs(rel))
            except (FileNotFoundError, NotADirectoryError):
                return False
            return True
        return self.fs.get_file_info(self.abs(rel)).type != pafs.FileType.NotFound

    def is_dir(self, rel: str) -> bool:
        return self.fs.get_file_info(self.abs(rel)).type == pafs.FileType.Directory

    def read_bytes(self, rel: str) -> bytes:
        folder = self._kept_folder(rel)
        if folder is not None:
            return folder.read(rel, self._read_bytes)
        return self._read_bytes(rel)

    def _read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.abs(rel)) as f:
            return f.read()

    @contextmanager
    def folder_kept(self, rel: str) -> Iterator[None]:
        """Within the block (on this thread), the folder ``rel`` is read once: its listing and
        each file's bytes on first use, kept after; what this thread writes or deletes there
        through this storage goes into what is kept. For a folder nobody else changes
        meanwhile (the archived history, under the table lock), which one step reads again
        after each change of its own: on an object store a request each time."""
        key = (self.uri, rel.rstrip("/"))
        kept = _KEPT_FOLDERS.__dict__.setdefault("folders", {})
        if key in kept:  # nested: the outer block keeps it
            yield
            return
        kept[key] = _Folder()
        try:
            yield
        finally:
            del kept[key]

    def is_kept(self, folder: str) -> bool:
        """Is ``folder`` kept on this thread (:meth:`folder_kept`; its listing then costs no
        request after the first, and only on this thread)?"""
        return self._kept_folder(folder.rstrip("/") + "/") is not None

    def _not_followed(self, *rels: str) -> None:
        """A write that a kept folder cannot follow: the folder is read from storage again."""
        for rel in rels:
            folder = self._kept_folder(rel)
            if folder is not None:
                folder.off = True

    def _kept_folder(self, rel: str) -> _Folder | None:
        kept = getattr(_KEPT_FOLDERS, "folders", None)
        if not kept:
            return None
        return kept.get((self.uri, rel.rpartition("/")[0]))

    def read_head(self, rel: str, limit: int) -> tuple[FileEntry, bytes] | None:
        """A small file's entry (size, modification time) and its first ``limit`` bytes (all of
        it when it is no larger), None when it does not exist: what a reader that bounds a
        file's size before parsing it needs, in one GET on S3 (a HEAD, then a GET, were two; a
        HEAD of a missing object also listed its would-be folder)."""
        if self._s3 is not None and self._kept_folder(rel) is None:
            try:
                size, mtime, data = self._s3.read_head(self.abs(rel), limit)
            except FileNotFoundError:
                return None
            return FileEntry(rel, size, mtime), data
        info = self.info(rel)
        if info is None:
            return None
        try:
            data = self.read_bytes(rel) if info.size <= limit else b""
        except FileNotFoundError:
            return None
        return info, data[:limit]

    def info(self, rel: str) -> FileEntry | None:
        fi = self.fs.get_file_info(self.abs(rel))
        if fi.type == pafs.FileType.NotFound:
            return None
        return FileEntry(rel, fi.size or 0, _mtime(fi))

    @contextmanager
    def listings_kept(self) -> Iterator[None]:
        """Within the block (on this thread), each folder is listed once: a read that lists one
        folder several times (the archived history's loader: its snapshot number, manifests and
        older batches live side by side; a cleaner run's steps between its lock holds) pays one
        request on an object store. A listing is a snapshot: what other processes change later
        is not in it, and what this process writes or deletes in a folder, on any thread,
        through a storage of the same table makes that folder be listed again
        (:meth:`_listing_changed`). Inside :meth:`listings_fresh` the block starts from nothing
        kept. The blocks and their listings are this thread's."""
        if getattr(_KEPT, "listings", None) is not None and not getattr(_KEPT, "fresh", False):
            yield  # nested: the outer block keeps them
            return
        with _listings_block(fresh=False):
            yield

    @contextmanager
    def listings_fresh(self) -> Iterator[None]:
        """Within the block (on this thread), every listing is read from storage, even inside
        :meth:`listings_kept`: a choice that must see the store as it is now (under the table
        lock; a sweep that judges the files it just listed) makes it here. What the block
        listed last then serves an outer block: the newer snapshot."""
        with _listings_block(fresh=True):
            yield

    def keeps_listings(self) -> bool:
        """Inside :meth:`listings_kept` (on this thread): a folder listed once is not listed again."""
        return getattr(_KEPT, "listings", None) is not None and not getattr(_KEPT, "fresh", False)

    def _listing_changed(self, rel: str, *, tree: bool = False) -> None:
        """This process wrote or deleted ``rel`` (``tree``: everything under the folder ``rel``),
        on any thread (a compaction publishes its files from worker threads): a kept listing of
        its folder (of every folder under it) is read again, in every block of every thread."""
        if not _BLOCKS:
            return
        folder = rel.rstrip("/") if tree else posixpath.dirname(rel.rstrip("/"))
        global _CHANGES
        with _BLOCKS_MU:
            _CHANGES += 1
            for kept in _BLOCKS:
                for key in list(kept):
                    if key[0] == self.uri and (key[1] == folder or (tree and key[1].startswith(folder + "/"))):
                        kept.pop(key, None)

    @contextmanager
    def read_ahead(self, files: Iterable[tuple[str, int]]) -> Iterator[None]:
        """Within the block, the files ``(rel, size)`` (size 0 when unknown) that a read is about
        to open, in the order it opens them, are fetched side by side on S3, a bounded number of
        requests at once and of bytes held (:meth:`.s3_store.S3Handler.read_ahead`): a read of N
        files waits about N/16 round trips instead of N over each reading thread. Each file's
        first open is served from its fetch, the same request it would have sent. Elsewhere
        (local disks) nothing changes: reads there wait on no round trip."""
        if self._s3 is None:
            yield
            return
        with self._s3.read_ahead([(self.abs(rel), size) for rel, size in files]):
            yield

    @contextmanager
    def publishing_together(self) -> Iterator[PublishGroup]:
        """Within the block (on this thread, and in tasks run through the group's
        :meth:`PublishGroup.run`), :meth:`publish` on S3 sends the file's final PUT on the
        request threads and returns: the files of one write, which depend on each other in
        nothing, are uploaded side by side. The block ends once every upload has ended, so all
        files are in place before the caller goes on (to its commit); a failed one raises
        :class:`~multiwriter.errors.UploadError` naming the files (the write fails, so its
        commit never completes). Nested, the outer block waits. Elsewhere publishes stay as
        they are (a rename)."""
        outer = getattr(_PUBLISHING, "group", None)
        if outer is not None:
            yield outer
            return
        group = PublishGroup()
        _PUBLISHING.group = group
        try:
            yield group
        finally:
            _PUBLISHING.group = None
            failed = group.uploads.wait()  # always: no file may land after the write gave up
            if failed:
                log.warning("%s: %d files of a write were not uploaded: %s", redact(self.uri), len(failed),
                            "; ".join(f"{rel}: {e}" for rel, e in failed[:5]))
        if failed:
            rels = tuple(rel for rel, _ in failed)
            raise UploadError(f"{redact(self.uri)}: {len(failed)} files of the write were not uploaded "
                              f"({'; '.join(f'{rel}: {e}' for rel, e in failed[:5])}); the write fails and "
                              "commits nothing", paths=rels) from failed[0][1]

    def forget_listings(self) -> None:
        """List again inside a :meth:`listings_kept` block (a read that found a listed file gone)."""
        kept = getattr(_KEPT, "listings", None)
        if kept is not None:
            kept.clear()

    def list_dir(self, rel: str, *, files_only: bool = False, sized: Callable[[str], bool] | None = None,
                 known: Mapping[str, FileEntry] | None = None, anchor: bool = False) -> list[FileEntry]:
        """Direct children of ``rel``; an absent directory lists as empty. ``sized``: on a local
        disk, only the files whose names it accepts are stat'ed (the others list with size and
        mtime 0): the timeline needs the size and mtime of its completed writes alone, and
        stat'ing hundreds of requested and inflight files took a fifth of a small commit's
        time. Object stores list sizes with the names, so all entries have theirs there.

        ``known``: entries of an earlier listing of ``rel`` by name, for files that are never
        rewritten (a timeline's instant files): on a local disk a regular file of such a name
        lists as that very entry, neither stat'ed nor built again (the timeline is listed
        several times per commit, nearly all of it unchanged).

        ``anchor`` (the data timeline's listing): inside :meth:`listings_kept`, when the folder
        is listed from storage, every other listing kept of the table is dropped. A choice made
        on a timeline and a listing of files (a compaction's or clustering's inputs, caught up
        under the lock with the commits completed after that timeline) needs the files listed
        no earlier than the timeline: kept listings are never older than the kept timeline."""
        folder = self._kept_folder(rel.rstrip("/") + "/")
        if folder is not None and files_only:
            return folder.listed(lambda: self._list_dir(rel, True, None))
        kept = getattr(_KEPT, "listings", None)
        if kept is not None:
            return list(self._kept_listing(kept, rel, files_only, anchor))
        return self._list_dir(rel, files_only, sized, known)

    def _has_listing(self, kept: dict, rel: str) -> bool:
        if getattr(_KEPT, "fresh", False):
            return False
        folder = rel.rstrip("/")
        return (self.uri, folder, None) in kept or (self.uri, folder, True) in kept

    def _kept_listing(self, kept: dict, rel: str, files_only: bool, anchor: bool = False) -> list[FileEntry]:
        """A kept listing of ``rel`` (read now, and kept, inside :meth:`listings_fresh`). On an
        object store one request serves both kinds (the files, and the files with the folders),
        as one listing answers with both there."""
        fresh = getattr(_KEPT, "fresh", False)
        if self.is_local:
            key = (self.uri, rel.rstrip("/"), files_only)
            got = None if fresh else kept.get(key)
            if got is None:
                if anchor:
                    self._drop_kept()
                got = _keep(kept, key, lambda: self._list_dir(rel, files_only, None))
            return got
        key = (self.uri, rel.rstrip("/"), None)
        typed = None if fresh else kept.get(key)
        if typed is None:
            if anchor:
                self._drop_kept()
            sel = pafs.FileSelector(self.abs(rel), allow_not_found=True, recursive=False)
            typed = _keep(kept, key, lambda: [(FileEntry(self._rel(fi.path), fi.size or 0, _mtime(fi)),
                                               fi.type == pafs.FileType.File) for fi in self.fs.get_file_info(sel)])
        return [e for e, is_file in typed if is_file or not files_only]

    def _drop_kept(self) -> None:
        """Drop every listing of this table kept in this thread's blocks (see ``anchor``)."""
        with _BLOCKS_MU:
            for kept, _ in getattr(_KEPT, "stack", None) or ():
                for key in list(kept):
                    if key[0] == self.uri:
                        kept.pop(key, None)

    def _list_dir(self, rel: str, files_only: bool, sized: Callable[[str], bool] | None,
                  known: Mapping[str, FileEntry] | None = None) -> list[FileEntry]:
        if self.is_local:
            return self._list_local(rel, files_only, sized, known)
        sel = pafs.FileSelector(self.abs(rel), allow_not_found=True, recursive=False)
        out = []
        for fi in self.fs.get_file_info(sel):
            if files_only and fi.type != pafs.FileType.File:
                continue
            out.append(FileEntry(self._rel(fi.path), fi.size or 0, _mtime(fi)))
        return out

    def _list_local(self, rel: str, files_only: bool, sized: Callable[[str], bool] | None = None,
                    known: Mapping[str, FileEntry] | None = None) -> list[FileEntry]:
        """``list_dir`` on a local disk by ``os.scandir``: a writer lists the timeline several
        times per commit, and building pyarrow's file infos (and their datetimes) for the same
        entries takes about twice as long. Entries are stat'ed like pyarrow does, but a symbolic
        link is followed only to a file inside the root (:meth:`_link_stays_inside`); an entry
        that vanishes between the listing and its stat is left out, as if listed a moment later."""
        base = self.abs(rel)
        try:
            it = os.scandir(base)
        except FileNotFoundError:
            return []
        prefix = self._rel(base).rstrip("/")
        prefix = f"{prefix}/" if prefix and base != self.root else ""
        out = []
        known = known or {}
        with it:
            for e in it:
                seen = known.get(e.name)
                if seen is not None:
                    try:
                        if e.is_file(follow_symlinks=False):  # the entry's type: no stat
                            out.append(seen)
                            continue
                    except FileNotFoundError:
                        continue
                link = e.is_symlink()
                if link and not self._link_stays_inside(e.path):
                    continue
                if sized is not None and not link and not sized(e.name):
                    try:
                        is_file = e.is_file()  # the directory entry's type: no stat
                    except FileNotFoundError:
                        continue
                    if is_file or not files_only:
                        out.append(FileEntry(prefix + e.name, 0, 0.0))
                    continue
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                if files_only and not stat.S_ISREG(st.st_mode):
                    continue
                out.append(FileEntry(prefix + e.name, st.st_size if stat.S_ISREG(st.st_mode) else 0, st.st_mtime_ns / 1e9))
        return out

    def list_names(self, rel: str, prefix: str = "") -> list[str]:
        """Names of the files directly in ``rel`` that start with ``prefix``. On a local disk
        the other entries are not stat'ed: a writer looks for one instant's files in a timeline
        of hundreds before it publishes each data file. Symbolic links count as in
        :meth:`list_dir`. On S3 ``prefix`` is the listing's own: one request whatever the
        folder holds besides."""
        folder = self._kept_folder(rel.rstrip("/") + "/")
        if folder is not None:
            names = (e.path.rsplit("/", 1)[-1] for e in folder.listed(lambda: self._list_dir(rel, True, None)))
            return [n for n in names if n.startswith(prefix)]
        kept = getattr(_KEPT, "listings", None)
        if kept is not None and (not prefix or self._has_listing(kept, rel)):  # a prefix alone lists less
            names = (e.path.rsplit("/", 1)[-1] for e in self._kept_listing(kept, rel, True))
            return [n for n in names if n.startswith(prefix)]
        if self._s3 is not None:
            return self._s3.list_names(self.abs(rel), prefix)
        if not self.is_local:
            names = (e.path.rsplit("/", 1)[-1] for e in self.list_dir(rel, files_only=True))
            return [n for n in names if n.startswith(prefix)]
        try:
            it = os.scandir(self.abs(rel))
        except FileNotFoundError:
            return []
        out = []
        with it:
            for e in it:
                if not e.name.startswith(prefix) or (e.is_symlink() and not self._link_stays_inside(e.path)):
                    continue
                if e.is_file():  # follows a link; an entry gone meanwhile is no file
                    out.append(e.name)
        return out

    def list_subdirs(self, rel: str) -> list[str]:
        if self.is_local:
            return [e.path for e in self._list_local(rel, False) if os.path.isdir(self.abs(e.path))]
        sel = pafs.FileSelector(self.abs(rel), allow_not_found=True, recursive=False)
        return [self._rel(fi.path) for fi in self.fs.get_file_info(sel) if fi.type == pafs.FileType.Directory]

    def walk_files(self, rel: str) -> list[FileEntry]:
        if self.is_local:
            return self._walk_local(rel)
        sel = pafs.FileSelector(self.abs(rel), allow_not_found=True, recursive=True)
        return [
            FileEntry(self._rel(fi.path), fi.size or 0, _mtime(fi))
            for fi in self.fs.get_file_info(sel)
            if fi.type == pafs.FileType.File
        ]

    def _walk_local(self, rel: str) -> list[FileEntry]:
        """``walk_files`` on a local disk: ``os.scandir`` down the tree, never into a symbolic
        link (pyarrow's recursive listing follows them, so a link in the table would list, and
        hand to deleters, another directory's files)."""
        out: list[FileEntry] = []
        todo = [rel.strip("/")]
        while todo:
            d = todo.pop()
            try:
                it = os.scandir(self.abs(d))
            except (FileNotFoundError, NotADirectoryError):
                continue
            with it:
                for e in it:
                    child = f"{d}/{e.name}" if d else e.name
                    if e.is_symlink() and not self._link_stays_inside(e.path):
                        continue
                    try:
                        st = e.stat()
                    except FileNotFoundError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(child)
                    elif stat.S_ISREG(st.st_mode):
                        out.append(FileEntry(child, st.st_size, st.st_mtime_ns / 1e9))
        return out

    # -- symbolic links (local disks) ----------------------------------------------
    def _real_root(self) -> str:
        real = getattr(self, "_real_root_path", None)
        if real is None:
            real = self._real_root_path = os.path.realpath(self.root)
        return real

    def _inside(self, real: str) -> bool:
        root = self._real_root()
        return real == root or real.startswith(root.rstrip("/") + "/")

    def _link_stays_inside(self, link: str) -> bool:
        """Whether a listed symbolic link may be followed: only to a file inside the table root.
        A link out of the root, or to a directory (which would list files twice or loop), is
        skipped with a warning."""
        real = os.path.realpath(link)
        if self._inside(real) and not os.path.isdir(real):
            return True
        log.warning("%s: skipping the symbolic link %s -> %s: links out of the table or to directories are not "
                    "followed; replace it with the files themselves", self.uri, self._rel(link), real)
        return False

    def _through_link(self, target: str) -> bool:
        """Whether deleting ``target`` (local) would go through a symbolic link out of the root:
        its directory resolves outside it. Unlinking a link itself is harmless and allowed."""
        if not self.is_local:
            return False
        if self._inside(os.path.realpath(posixpath.dirname(target))):
            return False
        log.warning("%s: not deleting %s: its directory is a symbolic link out of the table (to %s)",
                    self.uri, self._rel(target), os.path.realpath(posixpath.dirname(target)))
        return True

    def refuse_links(self, target: str) -> None:
        """Local disks: :class:`UnsafePathError` when a folder between the table root and the file
        ``target`` (absolute; a trailing ``/`` names a folder, checked too) is a symbolic link.
        Someone who can write inside the table could otherwise replace ``.hoodie/.heartbeat``,
        ``.hoodie/timeline`` or ``.hoodie`` itself by a link to a folder outside, and every
        heartbeat, marker, metadata log and instant file would be written there. Every local write,
        create and publish calls this first: one ``lstat`` per folder below the root (about a
        microsecond each), not cached, so a link planted after the table was opened is refused
        too. Folders not there yet are created by us, as folders. The file itself is never
        opened through a link: it is created ``O_EXCL`` or ``O_NOFOLLOW``, or renamed over (which
        replaces a link, never what it points to). The root itself is the caller's choice and
        may be a link."""
        if not self.is_local:
            return
        root = self.root.rstrip("/")
        if not target.startswith(root + "/"):
            return
        d = root
        for part in target[len(root) + 1:].split("/")[:-1]:
            d = f"{d}/{part}"
            try:
                st = os.lstat(d)
            except (FileNotFoundError, NotADirectoryError):
                return
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(
                    f"{redact(self.uri)}: {self._rel(d)} is a symbolic link (to {os.path.realpath(d)}); nothing is "
                    f"written through a link inside a table, so {self._rel(target.rstrip('/'))} was not written. "
                    "Replace the link with a folder of the table's own", path=self._rel(d), source=self._rel(d))

    # -- writing -------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        if self.is_gcs:  # no folders on GCS, and pyarrow's would be marker objects: a request each
            return
        self._listing_changed(rel)
        target = self.abs(rel)
        self.refuse_links(target + "/")
        self.fs.create_dir(target, recursive=True)

    def open_output(self, rel: str, *, buffer_size: int | None = None) -> Any:
        """A new output stream on ``rel`` (replacing a file of that name), for writers that stream
        (Parquet, log, staged Arrow files). On local disks the folders are checked
        (:meth:`refuse_links`) and the file is opened ``O_NOFOLLOW`` (a link planted at the name
        is refused, never written through); missing folders are created. The stream is buffered
        (``buffer_size``, 1 MB by default) on local disks."""
        self._not_followed(rel)
        self._listing_changed(rel)
        target = self.abs(rel)
        if not self.is_local:
            return self.fs.open_output_stream(target, buffer_size=buffer_size)
        self.refuse_links(target)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = _in_dir(target, flags)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise UnsafePathError(f"{redact(self.uri)}: {rel} is a symbolic link; nothing is written through a link "
                                  "inside a table", path=rel, source=rel) from e
        raw = pa.PythonFile(os.fdopen(fd, "wb", buffering=0), mode="w")
        return pa.BufferedOutputStream(raw, buffer_size or _LOCAL_BUFFER)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write (or replace) a file; atomic replace on local disks."""
        self._listing_changed(rel)
        target = self.abs(rel)
        if self.is_local:
            self.refuse_links(target)
            tmp = f"{target}.{uuid.uuid4().hex}.tmp"
            with _in_dir(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        else:
            self._parent_dir(target)
            with self.fs.open_output_stream(target) as f:
                f.write(data)
        folder = self._kept_folder(rel)
        if folder is not None:
            folder.wrote(rel, bytes(data))

    def staging_dir(self, rel: str) -> None:
        """Make ``rel`` ready to hold staged files (:meth:`publish`). On S3 the files staged
        there stay in this process's memory until published (one PUT at their final name) or
        deleted (no request), below the multipart threshold (:mod:`multiwriter.s3_store`)."""
        if self._s3 is not None:
            self._s3.hold(self.abs(rel))
        if self._needs_dirs:
            self.refuse_links(self.abs(rel) + "/")
            self.fs.create_dir(self.abs(rel), recursive=True)

    def publish(self, staged: str, rel: str) -> None:
        """Make the complete file at ``staged`` appear at ``rel`` in one step. Local disks rename
        (atomic; a file of the same name is replaced). Object stores copy on the server side and
        then delete ``staged``: the object at ``rel`` appears whole when the copy completes (S3
        has no rename, and the upload of ``staged`` completes before the caller decides)."""
        self._not_followed(staged, rel)
        self._listing_changed(staged)
        self._listing_changed(rel)
        target = self.abs(rel)
        self.refuse_links(target)
        self.refuse_links(self.abs(staged))
        self._parent_dir(target)
        group = getattr(_PUBLISHING, "group", None)
        if group is not None and self._s3 is not None:  # sent beside the write's other files
            group.uploads.send(rel, self.fs.move, self.abs(staged), target, size=self._s3.held_size(self.abs(staged)))
            return
        self.fs.move(self.abs(staged), target)

    def put_if_absent(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        """Create ``rel`` with ``data`` atomically; raise :class:`FileExists` if it exists
        (how, per store: :meth:`_put_if_absent`)."""
        self._listing_changed(rel)
        folder = self._kept_folder(rel)
        if folder is None:
            self._put_if_absent(rel, data, durable=durable)
            return
        try:
            self._put_if_absent(rel, data, durable=durable)
        except BaseException:
            folder.unknown(rel)
            raise
        folder.wrote(rel, bytes(data))

    def _put_if_absent(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        """Create ``rel`` with ``data`` atomically; raise :class:`FileExists` if it exists.

        ``durable=False`` skips the fsync (markers: empty files whose loss costs nothing).
        An empty file on a local disk is created in one step (``O_CREAT | O_EXCL``): with no
        content there is no partial file to hide behind a link.

        Local disks: atomic (``link`` of a complete temporary file). S3 and GCS: one conditional
        upload (as :meth:`create_exclusive`), atomic too. Other object stores
        (an ``s3://`` URI with its own query options) have no create-if-absent here, so this is
        check-then-put: a single PUT is atomic
        (readers see the whole object or none) but two creators of the same name can both
        succeed. It is safe because of who calls it with which names:

        * ``<T>.<action>.requested`` is created under the table lock, right after ``T`` is
          issued there (strictly above every time on the timeline), so ``T`` is unique;
        * ``<T>.<action>.inflight`` is created outside the lock (``Transaction.write_inflight``)
          and that is safe only because ``T`` is unique: no other writer ever creates a file
          named after it;
        * the completed instant ``<T>_<C>.<action>`` is created only under the table lock, after
          the conflict check, once; it is never overwritten (a retry uses a new ``T``);
        * markers carry unique names (file id, write token), so two writers never create the same
          marker;
        * ``FileSystemLock``'s lock file is the one caller that needs a true create-if-absent,
          which is why that lock is for local disks only;
        * ``hoodie.properties`` is created once by ``Table.create``; concurrent creators of one
          table must pass the same settings (they write the same bytes).

        The store must offer read-after-write and list-after-write consistency (S3 does since
        December 2020; so do MinIO and other S3-compatible servers)."""
        target = self.abs(rel)
        self.refuse_links(target)
        if self.is_local and not data:
            try:
                fd = _in_dir(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError as e:
                raise FileExists(rel) from e
            try:
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            return
        if self.is_local:
            tmp = posixpath.join(posixpath.dirname(target), f".{uuid.uuid4().hex}.tmp")
            with _in_dir(tmp, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            try:
                os.link(tmp, target)
            except FileExistsError as e:
                raise FileExists(rel) from e
            finally:
                os.unlink(tmp)
            return
        if self._s3 is not None or self.is_gcs:  # one conditional PUT (If-None-Match: *, ifGenerationMatch=0)
            if not self._conditional_create(rel, data):
                raise FileExists(rel)
            return
        # Other object stores: no atomic create; see the rule in the docstring.
        self._parent_dir(target)
        if self.exists(rel):
            raise FileExists(rel)
        with self.fs.open_output_stream(target) as f:
            f.write(data)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` with ``data`` only if no object of that name exists, in one atomic step
        that a second creator cannot also win, even one that lost the table lock long ago: the
        commit decision (:mod:`multiwriter.table.decisions`) rests on it. True when we created it,
        False when it existed. Local disks: ``link`` of a complete temporary file. S3: a
        conditional ``PUT`` (``If-None-Match: *``); GCS: an upload with ``ifGenerationMatch=0``
        (:mod:`multiwriter.gcs`). Any answer but success (HTTP 412, which a
        retry of our own create whose first answer was lost also gets; a timeout; a 409 of two
        conditional writes at once) is settled by reading the object back: ours when it holds
        our bytes (callers make their bytes unique). Other stores have no such operation here
        and are refused."""
        self._not_followed(rel)
        self._listing_changed(rel)
        if self.is_local:
            try:
                self.put_if_absent(rel, data)
            except FileExists:
                return False
            return True
        if not (self.is_s3 or self.is_gcs):
            raise ConfigError(f"{redact(self.uri)}: this store has no atomic create-if-absent that multiwriter can use "
                              "to decide commits; use a local disk, S3 or GCS")
        return self._conditional_create(rel, data)

    def _conditional_create(self, rel: str, data: bytes) -> bool:
        bucket, _, prefix = self.root.partition("/")
        key = posixpath.join(prefix, rel.lstrip("/")) if prefix else rel.lstrip("/")
        unknown = self._gcs_create(bucket, key, data) if self.is_gcs else self._s3_create(bucket, key, data)
        if unknown is None:
            return True
        try:  # the outcome is unknown: the object tells whose it is
            got = self.read_bytes(rel)
        except FileNotFoundError:
            raise OSError(f"creating {redact(self.uri_of(rel))} failed and it does not exist: {unknown}") from unknown
        except OSError as e:
            raise CommitStateUnknownError(f"creating {redact(self.uri_of(rel))} ended without an answer ({unknown}) "
                                          f"and reading it back failed ({e})") from e
        return got == data

    def _s3_create(self, bucket: str, key: str, data: bytes) -> Exception | None:
        """One ``PUT`` with ``If-None-Match: *``: None when it created the object, else what
        answered instead (a 412, which a retry of our own create whose first answer was lost
        also gets, as any other unclear outcome: the caller reads the object back)."""
        from botocore.exceptions import BotoCoreError, ClientError

        # the table's own client: an s3://KEY:SECRET@bucket URI's credentials, else the default chain
        client = s3.data_client(self._s3.credentials) if self._s3 is not None else s3.s3_client(CONDITIONAL_CALL_TIMEOUT_S)
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return None
        except (ClientError, BotoCoreError) as e:
            return e

    def _gcs_create(self, bucket: str, key: str, data: bytes) -> Exception | None:
        """One upload with ``ifGenerationMatch=0``, answered as :meth:`_s3_create`."""
        try:
            gcs.client(CONDITIONAL_CALL_TIMEOUT_S).create(bucket, key, data, "0")
            return None
        except gcs.GcsError as e:
            return e

    def delete(self, rel: str) -> bool:
        """Delete a file; False when it was already gone (deletes are idempotent) or lies behind
        a symbolic link out of the table (skipped with a warning). On S3 one DELETE request,
        which S3 answers alike whether or not the object was there: True."""
        if self._through_link(self.abs(rel)):
            return False
        self._listing_changed(rel)
        folder = self._kept_folder(rel)
        if folder is None:
            return self._delete(rel)
        try:
            gone = self._delete(rel)
        except BaseException:
            folder.unknown(rel)
            raise
        folder.deleted(rel)
        return gone

    def _delete(self, rel: str) -> bool:
        if self._s3 is not None:
            self.fs.delete_file(self.abs(rel))
            return True
        try:
            self.fs.delete_file(self.abs(rel))
            return True
        except FileNotFoundError:
            return False
        except OSError as e:
            if not self.exists(rel):
                return False
            raise e

    def delete_many(self, rels: Sequence[str]) -> None:
        """Delete these files, each path checked first (an unsafe one deletes nothing). On S3
        one ``DeleteObjects`` request per 1,000 files, each file's answer checked; elsewhere
        one :meth:`delete` each (a file already gone, or behind a symbolic link out of the
        table, is skipped as there). Every file is tried: those that could not be deleted are
        named by one :class:`~multiwriter.errors.DeleteError` at the end."""
        targets = {self.abs(rel): rel for rel in rels}
        for rel in targets.values():
            self._listing_changed(rel)
            if (folder := self._kept_folder(rel)) is not None:
                folder.unknown(rel)  # until the answers say which went
        failed: list[tuple[str, str]] = []
        if self._s3 is not None:
            failed = [(targets.get(path, self._rel(path)), reason) for path, reason in self._s3.delete_many(list(targets))]
        else:
            for rel in targets.values():
                try:
                    self.delete(rel)
                except OSError as e:
                    failed.append((rel, str(e)))
        not_gone = {rel for rel, _ in failed}
        for rel in targets.values():
            if rel not in not_gone and (folder := self._kept_folder(rel)) is not None:
                folder.deleted(rel)
        if failed:
            raise DeleteError(f"{redact(self.uri)}: {len(failed)} of {len(targets)} files were not deleted "
                              f"({'; '.join(f'{rel}: {why}' for rel, why in failed[:5])})",
                              paths=tuple(rel for rel, _ in failed))

    def delete_dir(self, rel: str, *, files: Sequence[str] | None = None) -> None:
        """Delete the folder ``rel`` and all under it (absent: nothing to do). ``files``: every
        object the folder can hold, known to the caller because it alone wrote them there: on
        S3 they go in one batch request with no listing of the folder first; elsewhere the
        folder is deleted as without it (a local folder may also hold empty subfolders)."""
        if self._through_link(self.abs(rel)):
            return
        self._listing_changed(rel, tree=True)
        under = rel.rstrip("/")
        for (uri, kept), folder in (getattr(_KEPT_FOLDERS, "folders", None) or {}).items():
            if uri == self.uri and (kept == under or kept.startswith(under + "/")):
                folder.off = True
        if files is not None and self._s3 is not None:
            under = rel.rstrip("/") + "/"
            if any(not f.startswith(under) for f in files):
                raise ValueError(f"{rel}: files outside the folder named for its deletion")
            self._s3.drop_under(self.abs(rel))
            if files:
                self.delete_many(files)
            return
        try:
            self.fs.delete_dir(self.abs(rel))
        except FileNotFoundError:
            pass
        except OSError:
            if self.exists(rel):
                raise

    def _parent_dir(self, target: str) -> None:
        if self._needs_dirs:
            self.fs.create_dir(posixpath.dirname(target), recursive=True)

    def _rel(self, absolute: str) -> str:
        root = self.root.rstrip("/") + "/"
        return absolute.removeprefix(root)


#: the buffer of a local output stream (:meth:`Storage.open_output`)
_LOCAL_BUFFER = 1 << 20


#: every open block's listings, of every thread (:meth:`Storage._listing_changed`), and a count
#: of the writes that changed any: a listing read while one happened is used, not kept
_BLOCKS: list[dict] = []
_BLOCKS_MU = free_in_child(threading.Lock())
_CHANGES = 0


def _keep(kept: dict, key: tuple, read: Callable[[], Any]) -> Any:
    with _BLOCKS_MU:
        before = _CHANGES
    got = read()
    with _BLOCKS_MU:
        if _CHANGES == before:
            kept[key] = got
    return got


@contextmanager
def _listings_block(*, fresh: bool) -> Iterator[None]:
    """A block of :meth:`Storage.listings_kept` (``fresh=False``) or
    :meth:`Storage.listings_fresh`: its own listings, on this thread's stack of blocks; at its
    end what it listed serves the block around it (each write invalidated every block's)."""
    stack = _KEPT.__dict__.setdefault("stack", [])
    kept: dict = {}
    stack.append((kept, fresh))
    with _BLOCKS_MU:
        _BLOCKS.append(kept)
    _KEPT.listings, _KEPT.fresh = stack[-1]
    try:
        yield
    finally:
        stack.pop()
        with _BLOCKS_MU:
            del _BLOCKS[next(i for i, b in enumerate(_BLOCKS) if b is kept)]  # by identity, not by content
            if stack:
                stack[-1][0].update(kept)
        if stack:
            _KEPT.listings, _KEPT.fresh = stack[-1]
        else:
            _KEPT.listings, _KEPT.fresh = None, False


def safe_relative(rel: str, *, source: str | None = None) -> str:
    """The storage half of the path rule: ``rel`` (relative to a table root) unchanged, or
    :class:`UnsafePathError` when it is absolute, carries a URI scheme or NUL, or has a ``..``
    segment (which would leave the root once normalised: pyarrow normalises object-store keys
    too). ``source`` names the file the path came from."""
    problem = None
    if "\x00" in rel:
        problem = "contains NUL"
    elif rel.startswith("/") or "://" in rel:
        problem = "is absolute"
    elif ".." in rel.split("/"):
        problem = "has a '..' segment"
    if problem:
        where = f"{source}: " if source else ""
        raise UnsafePathError(f"{where}path {rel[:200]!r} {problem}; it would leave the table, so nothing was read, "
                              "written or deleted through it", path=rel, source=source)
    return rel


def _in_dir(path: str, mode: str | int) -> Any:
    """``open(path, mode)`` (a str mode) or ``os.open(path, flags, 0o644)`` (an int), creating
    the missing parent directories on the first failure: one system call when they exist (most
    calls), instead of a walk over every parent before each file."""
    def attempt() -> Any:
        return open(path, mode) if isinstance(mode, str) else os.open(path, mode, 0o644)

    try:
        return attempt()
    except FileNotFoundError:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        return attempt()


def filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of ``uri``; ``s3://`` is the file system of plain S3 requests
    (:mod:`multiwriter.s3_store`) configured from the environment (:func:`s3_options`'s
    variables), unless the URI carries its own query options (then pyarrow's ``S3FileSystem``)."""
    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a") and not parts.query:
        s3_options()  # refuses a plain-http endpoint that AWS_ALLOW_HTTP forbids
        userinfo, at, bucket = parts.netloc.rpartition("@")
        credentials = None
        if at:  # s3://KEY:SECRET@bucket/...: the URI's own credentials, as pyarrow reads them
            key, _, secret = userinfo.partition(":")
            credentials = (unquote(key), unquote(secret))
        return s3_store.filesystem(credentials), f"{bucket}{parts.path}".rstrip("/")
    if parts.scheme in ("gs", "gcs") and not parts.query:
        # STORAGE_EMULATOR_HOST as Google's clients read it (multiwriter.gcs), else pyarrow's own chain
        return pafs.GcsFileSystem(**gcs.filesystem_options()), f"{parts.netloc}{parts.path}".rstrip("/")
    return pafs.FileSystem.from_uri(uri)


def s3_options(env: dict[str, str] | None = None) -> dict[str, Any]:
    """``pyarrow.fs.S3FileSystem`` options from the standard AWS variables.

    An endpoint (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, e.g. ``http://127.0.0.1:9000``)
    selects an S3-compatible server, addressed path-style; its scheme decides http or https
    (``AWS_ALLOW_HTTP=false`` refuses http). The region is ``AWS_REGION`` or
    ``AWS_DEFAULT_REGION``, ``us-east-1`` when an endpoint is set without one: a region or an
    endpoint means no request goes to AWS to find the bucket's region."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if ep.scheme == "http" and env.get("AWS_ALLOW_HTTP", "").lower() in ("false", "0", "no"):
            raise ConfigError(f"AWS_ENDPOINT_URL={endpoint} is plain http but AWS_ALLOW_HTTP={env['AWS_ALLOW_HTTP']}")
        out["endpoint_override"] = ep.netloc
        out["scheme"] = ep.scheme
        region = region or "us-east-1"
    if region:
        out["region"] = region
    return out


def _as_uri(path: str) -> str:
    if "://" in path:
        return path
    return "file://" + os.path.abspath(os.path.expanduser(path))


def _mtime(fi: pafs.FileInfo) -> float:
    mt = fi.mtime
    return mt.timestamp() if mt is not None else 0.0
