"""Hudi's metadata table (``.hoodie/metadata``), as far as we keep it: its ``files`` partition
(:mod:`.metadata_files`), and no other partition left stale.

Hudi's readers (hudi-rs too) list a table's files from the metadata table whenever
``hoodie.table.metadata.partitions`` names ``files``; a commit of ours that the metadata table
does not record would be invisible to them. So before any instant of ours completes (under the
table lock) the partitions we do not maintain are dropped as Hudi's writer drops a disabled one:
first out of ``hoodie.properties`` (so no reader trusts them), then their directories; without
``files`` every other partition is meaningless (Hudi: they all need the file listing), so the
whole metadata table goes.
"""
from __future__ import annotations

import json
import logging
import re

from ..errors import TableFormatError
from ..storage import Storage, safe_relative
from . import properties as props

log = logging.getLogger(__name__)

PARTITIONS_KEY = "hoodie.table.metadata.partitions"
#: version 9: where the index definitions are (``.hoodie/.index_defs/index.json``)
INDEX_DEFS_KEY = "hoodie.table.index.defs.path"
INFLIGHT_KEY = "hoodie.table.metadata.partitions.inflight"
METADATA_DIR = ".hoodie/metadata"
FILES = "files"
RECORD_INDEX = "record_index"
#: the metadata partitions our writers keep up to date (:mod:`.metadata_files`)
MAINTAINED: frozenset[str] = frozenset({FILES, "column_stats", "partition_stats", "record_index"})
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+\Z")


def listed(p: dict[str, str]) -> list[str]:
    """The metadata partitions the properties name, completed and inflight, in order, once each."""
    out: list[str] = []
    for key in (PARTITIONS_KEY, INFLIGHT_KEY):
        for name in p.get(key, "").split(","):
            name = name.strip()
            if name and name not in out:
                if not _NAME_RE.match(name):
                    raise TableFormatError(f"{props.PROPERTIES_FILE}: {key} names {name!r}, not a metadata "
                                           "partition name; fix the properties by hand")
                out.append(name)
    return out


def unmaintained(p: dict[str, str], maintained: frozenset[str] = MAINTAINED) -> list[str]:
    """The listed partitions to drop: all of them when ``files`` is not maintained; and every
    partition still being built (``.inflight``: a listing we did not take part in)."""
    names = listed(p)
    if FILES not in maintained:
        return sorted(names)
    done = {n.strip() for n in p.get(PARTITIONS_KEY, "").split(",")}
    return sorted(n for n in names if n not in maintained or n not in done)


def drop_unmaintained(storage: Storage, maintained: frozenset[str] = MAINTAINED, *,
                      current: dict[str, str] | None = None) -> list[str]:
    """Drop the metadata partitions listed in ``hoodie.properties`` that we do not maintain;
    returns their names (empty, after one small read, when there are none; none when the
    caller passes the properties it just read as ``current``). Call under the table lock,
    before completing an instant."""
    now = current if current is not None else props.parse(props.read_text(storage))
    if RECORD_INDEX in listed(now) and _partitioned_record_index(storage, now):
        maintained = maintained - {RECORD_INDEX}
    if not unmaintained(now, maintained):
        return []
    dropped: list[str] = []

    def change(p: dict[str, str]) -> dict[str, str]:
        dropped[:] = unmaintained(p, maintained)
        for key in (PARTITIONS_KEY, INFLIGHT_KEY):
            if key in p:
                p[key] = ",".join(n for n in p[key].split(",") if n.strip() and n.strip() not in dropped)
        return p

    after = props.modify(storage, change)
    if listed(after):
        for name in dropped:
            storage.delete_dir(f"{METADATA_DIR}/{name}")
    else:  # as Hudi's deleteMetadataTable: its timeline and properties go with it
        storage.delete_dir(METADATA_DIR)
    _drop_index_definitions(storage, after, dropped)
    log.warning("dropped Hudi metadata table partitions %s of %s (multiwriter does not maintain them; a stale "
                "one would hide our commits from readers that list files from it)", ", ".join(dropped), storage.uri)
    return dropped


def _partitioned_record_index(storage: Storage, p: dict[str, str]) -> bool:
    """Does the table's index definition make its record index partitioned (Hudi 1.1's
    ``isPartitioned``: a key per partition, not one per table)? We keep only the global one.
    Read once per table and definitions file: an index is not made partitioned in place."""
    rel = p.get(INDEX_DEFS_KEY)
    if not rel or not rel.startswith(".hoodie/"):
        return False
    key = (storage.uri, rel)
    if key in _PARTITIONED:
        return _PARTITIONED[key]
    try:
        doc = json.loads(storage.read_bytes(safe_relative(rel, source=props.PROPERTIES_FILE)))
        options = doc["indexDefinitions"][RECORD_INDEX].get("indexOptions") or {}
        out = str(options.get("isPartitioned", "false")).lower() == "true"
    except (FileNotFoundError, KeyError, TypeError, AttributeError, ValueError):
        return False
    _PARTITIONED[key] = out
    return out


def global_record_index(storage: Storage, p: dict[str, str]) -> bool:
    """Does the table keep a record index our writers use and keep (listed, and global)?"""
    names = {n.strip() for n in p.get(PARTITIONS_KEY, "").split(",")}
    return RECORD_INDEX in names and not _partitioned_record_index(storage, p)


_PARTITIONED: dict[tuple[str, str], bool] = {}


def _drop_index_definitions(storage: Storage, p: dict[str, str], dropped: list[str]) -> None:
    """Remove the dropped partitions' entries from the index definitions (version 9:
    ``hoodie.table.index.defs.path``), as Hudi does when it drops an index: a definition left
    behind would have Hudi's writers and readers look for an index that is gone."""
    rel = p.get(INDEX_DEFS_KEY)
    if not rel or not dropped:
        return
    if not rel.startswith(".hoodie/"):
        raise TableFormatError(f"{props.PROPERTIES_FILE}: {INDEX_DEFS_KEY}={rel!r} is not under .hoodie/")
    storage_rel = safe_relative(rel, source=props.PROPERTIES_FILE)
    try:
        doc = json.loads(storage.read_bytes(storage_rel))
    except FileNotFoundError:
        return
    except ValueError as e:
        raise TableFormatError(f"{rel}: not a readable index definitions file ({e})") from e
    defs = doc.get("indexDefinitions") if isinstance(doc, dict) else None
    if not isinstance(defs, dict) or not set(defs) & set(dropped):
        return
    doc["indexDefinitions"] = {k: v for k, v in defs.items() if k not in dropped}
    storage.write_bytes(storage_rel, json.dumps(doc, indent=2).encode())
    log.info("removed the index definitions of %s from %s", ", ".join(sorted(set(defs) & set(dropped))), rel)
