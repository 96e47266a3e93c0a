"""Storage listings on a local disk: the fast path answers what pyarrow's listing answers."""
from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from multiwriter.storage import Storage


def _pyarrow_listing(root: str, rel: str, files_only: bool) -> list[tuple[str, int, float]]:
    """The oracle: pyarrow's own file infos of the same directory, made relative to ``root``."""
    fs = pafs.LocalFileSystem()
    out = []
    for fi in fs.get_file_info(pafs.FileSelector(os.path.join(root, rel.lstrip("/")), allow_not_found=True)):
        if files_only and fi.type != pafs.FileType.File:
            continue
        out.append((os.path.relpath(fi.path, root), fi.size or 0, fi.mtime.timestamp()))
    return sorted(out)


@pytest.mark.parametrize("rel", ["", "a", "a/", "/a", "a/b", "missing"])
@pytest.mark.parametrize("files_only", [False, True])
def test_local_listing_matches_pyarrows(tmp_path, rel, files_only):
    root = str(tmp_path)
    os.makedirs(tmp_path / "a" / "b")
    (tmp_path / "a" / "f1").write_bytes(b"xx")
    (tmp_path / "top").write_bytes(b"y")
    os.symlink(tmp_path / "top", tmp_path / "a" / "link")  # followed, as pyarrow does
    got = sorted((e.path, e.size, e.mtime_s) for e in Storage(root).list_dir(rel, files_only=files_only))
    want = _pyarrow_listing(root, rel, files_only)
    assert [(p, s) for p, s, _ in got] == [(p, s) for p, s, _ in want]
    for (_, _, ours), (_, _, theirs) in zip(got, want, strict=True):
        assert abs(ours - theirs) < 1e-5  # pyarrow keeps microseconds, the stat nanoseconds


def test_an_entry_that_vanishes_while_listing_is_left_out(tmp_path):
    (tmp_path / "kept").write_bytes(b"1")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")  # stat fails like a file deleted meanwhile
    assert [e.path for e in Storage(str(tmp_path)).list_dir("")] == ["kept"]


@pytest.mark.parametrize("rel", ["a", "a/f1", "a/link", "a/dangling", "missing", "a/f1/under-a-file", "", "/a/b"])
def test_local_exists_matches_pyarrows(tmp_path, rel):
    os.makedirs(tmp_path / "a" / "b")
    (tmp_path / "a" / "f1").write_bytes(b"xx")
    os.symlink(tmp_path / "a" / "f1", tmp_path / "a" / "link")
    os.symlink(tmp_path / "gone", tmp_path / "a" / "dangling")
    want = pafs.LocalFileSystem().get_file_info(os.path.join(str(tmp_path), rel.lstrip("/"))).type != pafs.FileType.NotFound
    assert Storage(str(tmp_path)).exists(rel) is want


@pytest.mark.parametrize("rel", ["", "a", "missing"])
@pytest.mark.parametrize("prefix", ["", "f", "20", "zz"])
def test_names_listing_is_the_files_listing_filtered_by_prefix(tmp_path, rel, prefix):
    """``list_names`` (no stat of the other entries) names what ``list_dir(files_only=True)``
    lists: plain files, links to files inside the root; not directories, dangling links or links
    that leave the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    root = tmp_path / "root"
    os.makedirs(root / "a" / "20b")
    for name in ("f1", "20_1.commit", "a/f2", "a/20_2.commit", "a/fz"):
        (root / name).write_bytes(b"x")
    os.symlink(root / "f1", root / "a" / "f_link")
    os.symlink(root / "gone", root / "a" / "f_dangling")
    os.symlink(outside / "secret", root / "a" / "f_out")
    storage = Storage(str(root))
    want = sorted(e.path.rsplit("/", 1)[-1] for e in storage.list_dir(rel, files_only=True))
    assert sorted(storage.list_names(rel, prefix)) == [n for n in want if n.startswith(prefix)]


@pytest.mark.parametrize("files_only", [False, True])
def test_known_entries_list_as_they_were_while_a_plain_file_of_their_name_is_there(tmp_path, files_only):
    """``known`` (an earlier listing of files never rewritten): a plain file of a known name
    lists as the known entry; a name gone, or no longer a plain file, lists as a fresh listing
    shows it."""
    os.makedirs(tmp_path / "a")
    for name in ("kept", "gone", "now_dir", "now_link", "new"):
        (tmp_path / "a" / name).write_bytes(b"xx")
    storage = Storage(str(tmp_path))
    known = {e.path.rsplit("/", 1)[-1]: e for e in storage.list_dir("a", files_only=files_only)}
    known.pop("new")
    os.remove(tmp_path / "a" / "gone")
    os.remove(tmp_path / "a" / "now_dir")
    os.makedirs(tmp_path / "a" / "now_dir")
    os.remove(tmp_path / "a" / "now_link")
    os.symlink(tmp_path / "a" / "new", tmp_path / "a" / "now_link")
    got = {e.path: e for e in storage.list_dir("a", files_only=files_only, known=known)}
    fresh = {e.path: e for e in storage.list_dir("a", files_only=files_only)}
    assert got == fresh and got["a/kept"] is known["kept"]
    assert "a/gone" not in got and got["a/now_link"] is not known["now_link"]


def test_a_kept_folder_is_read_once_and_follows_its_own_writes(tmp_path, monkeypatch):
    """Inside ``folder_kept`` a file is read once and the folder listed once; what the block
    writes and deletes there shows in both; outside the block every read goes to storage."""
    s = Storage(str(tmp_path))
    s.write_bytes("h/a", b"1")
    s.write_bytes("h/b", b"2")
    reads, lists = [], []
    real_read, real_list = Storage._read_bytes, Storage._list_dir
    monkeypatch.setattr(Storage, "_read_bytes", lambda self, rel: reads.append(rel) or real_read(self, rel))
    monkeypatch.setattr(Storage, "_list_dir", lambda self, rel, *a, **k: lists.append(rel) or real_list(self, rel, *a, **k))
    with s.folder_kept("h"):
        assert s.read_bytes("h/a") == b"1" and s.read_bytes("h/a") == b"1"
        assert sorted(e.path for e in s.list_dir("h", files_only=True)) == ["h/a", "h/b"]
        s.write_bytes("h/c", b"3")
        assert s.delete("h/b")
        assert sorted(e.path for e in s.list_dir("h", files_only=True)) == ["h/a", "h/c"]
        assert s.read_bytes("h/c") == b"3"
        with pytest.raises(FileNotFoundError):
            s.read_bytes("h/b")
        s.delete_many(["h/c"])
        assert [e.path for e in s.list_dir("h", files_only=True)] == ["h/a"]
    assert reads == ["h/a"] and lists == ["h"]
    assert s.read_bytes("h/a") == b"1" and reads == ["h/a", "h/a"]
    assert sorted(os.listdir(tmp_path / "h")) == ["a"]


def test_kept_listings_are_snapshots_that_follow_their_own_writes(tmp_path, monkeypatch):
    """Inside ``listings_kept`` a folder is listed once: a file another process adds is not in
    the kept listing, one this process writes or deletes through the table's storage is (on
    any thread: the folder is listed again). Inside ``listings_fresh`` every listing goes to
    storage, and the newest one then serves the block around it; outside both, every listing
    goes to storage."""
    import threading

    s = Storage(str(tmp_path))
    s.write_bytes("d/a", b"1")
    lists: list[str] = []
    real_list = Storage._list_dir
    monkeypatch.setattr(Storage, "_list_dir", lambda self, rel, *a, **k: lists.append(rel) or real_list(self, rel, *a, **k))

    def names(rel: str = "d") -> list[str]:
        return sorted(e.path for e in s.list_dir(rel, files_only=True))

    with s.listings_kept():
        assert names() == ["d/a"] and s.list_names("d") == ["a"]
        assert lists == ["d"]
        (tmp_path / "d" / "b").write_bytes(b"2")  # another process's file
        assert names() == ["d/a"], "a snapshot: another writer's file is not in it"
        s.write_bytes("d/c", b"3")
        assert names() == ["d/a", "d/b", "d/c"] and lists == ["d", "d"], "listed again after its own write"
        worker = threading.Thread(target=Storage(str(tmp_path)).write_bytes, args=("d/e", b"5"))
        worker.start()
        worker.join()
        assert names() == ["d/a", "d/b", "d/c", "d/e"] and len(lists) == 3, "a worker thread's write counts too"
        (tmp_path / "d" / "b").unlink()
        with s.listings_fresh():
            assert names() == ["d/a", "d/c", "d/e"] and names() == ["d/a", "d/c", "d/e"]
            assert len(lists) == 5, "every listing in a fresh block goes to storage"
            with s.listings_kept():  # kept inside a fresh block: from nothing kept, once
                assert names() == ["d/a", "d/c", "d/e"] and names() == ["d/a", "d/c", "d/e"]
            assert len(lists) == 6
        assert names() == ["d/a", "d/c", "d/e"] and len(lists) == 6, "the fresh block's listing serves the outer one"
        s.delete("d/c")
        assert names() == ["d/a", "d/e"] and len(lists) == 7
    assert names() == ["d/a", "d/e"] and names() == ["d/a", "d/e"] and len(lists) == 9
