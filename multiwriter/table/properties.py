"""``hoodie.properties``: Java properties format, the full key set Hudi on Spark writes."""
from __future__ import annotations

import datetime as _dt
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import TableFormatError, VirtualKeysError
from ..format import names, paths

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)

PROPERTIES_FILE = ".hoodie/hoodie.properties"
#: Hudi's copy of the properties while they are rewritten; read when the properties are missing
BACKUP_FILE = ".hoodie/hoodie.properties.backup"
SUPPORTED_READ_VERSIONS = (6, 8, 9)
#: versions we write into; a new table gets WRITE_VERSION unless asked for another
WRITE_VERSIONS = (8, 9)
WRITE_VERSION = 8
ORDERING_FIELDS_KEY = "hoodie.table.ordering.fields"  # version 9; version 8 names one precombine field
PRECOMBINE_KEY = "hoodie.table.precombine.field"
MERGE_MODE_KEY = "hoodie.record.merge.mode"
PARTIAL_UPDATE_MODE_KEY = "hoodie.table.partial.update.mode"
#: Hudi's change data capture: CDC log files beside every commit's data files
CDC_ENABLED_KEY = "hoodie.table.cdc.enabled"
MERGE_MODES = ("EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING")
PAYLOAD_CLASS_KEY = "hoodie.compaction.payload.class"
STRATEGY_ID_KEY = "hoodie.record.merge.strategy.id"
#: ``HoodieRecordMerger``'s built-in strategy ids
EVENT_TIME_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
#: what Hudi 1.1 records beside a version 8 table's merge mode (``HoodieTableMetaClient.TableBuilder``
#: through ``HoodieTableConfig.inferMergingConfigsForPreV9Table``: the payload of
#: ``HoodieRecordPayload.getAvroPayloadForMergeMode``, the id of ``HoodieRecordMerger.getRecordMergeStrategyId``)
V8_MERGE_SETTINGS = {
    "EVENT_TIME_ORDERING": ("org.apache.hudi.common.model.DefaultHoodieRecordPayload", EVENT_TIME_STRATEGY),
    "COMMIT_TIME_ORDERING": ("org.apache.hudi.common.model.OverwriteWithLatestAvroPayload", COMMIT_TIME_STRATEGY),
}
#: how this table's float, double and timestamp record-key values became strings ("java" or "arrow")
KEY_STRINGS_KEY = "multiwriter.record.key.strings"


COPY_ON_WRITE = "COPY_ON_WRITE"
MERGE_ON_READ = "MERGE_ON_READ"
TABLE_TYPES = (COPY_ON_WRITE, MERGE_ON_READ)
INDEX_TYPE_KEY = "hoodie.index.type"
NUM_BUCKETS_KEY = "hoodie.bucket.index.num.buckets"
HASH_FIELD_KEY = "hoodie.bucket.index.hash.field"
#: "false": virtual keys, Hudi writes no meta values (the meta columns stay, null) and no bloom filter
POPULATE_META_FIELDS_KEY = "hoodie.populate.meta.fields"
#: the source a bootstrapped table was made from (Hudi's ``HoodieTableConfig.BOOTSTRAP_BASE_PATH``)
BOOTSTRAP_BASE_PATH_KEY = "hoodie.bootstrap.base.path"


def parse(text: str, *, source: str = PROPERTIES_FILE) -> dict[str, str]:
    """Parse Java properties (``key=value``, ``#`` comments, backslash escapes)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, value = _split(line)
        if not key:
            raise TableFormatError(f"{source}: malformed line {raw!r}")
        try:
            out[_unescape(key)] = _unescape(value)
        except ValueError as e:  # a \u escape that is not 4 hex digits, or a lone surrogate
            raise TableFormatError(f"{source}: bad escape in line {raw[:200]!r} ({e}); fix or restore the file") from e
    return out


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:":
            return line[:i].strip(), line[i + 1 :].strip()
        i += 1
    return line, ""


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u":
                digits = s[i + 2 : i + 6]
                if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    raise ValueError(f"\\u{digits} is not a \\u escape of 4 hex digits")
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def _escape(s: str, *, is_key: bool = False) -> str:
    out = []
    for ch in s:
        if ch in ":=#!\\" or (is_key and ch == " "):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) > 0xFFFF:  # Java escapes UTF-16 surrogate pairs
            units = ch.encode("utf-16-be")
            out.append(f"\\u{int.from_bytes(units[:2], 'big'):04x}\\u{int.from_bytes(units[2:], 'big'):04x}")
        elif ord(ch) > 126 or ord(ch) < 32:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def render(props: dict[str, str]) -> str:
    now = _dt.datetime.now(_dt.timezone.utc)
    lines = [f"#Properties saved on {now.isoformat().replace('+00:00', 'Z')}", f"#{now:%a %b %d %H:%M:%S} UTC {now:%Y}"]
    lines += [f"{_escape(k, is_key=True)}={_escape(v)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def read_text(storage: Storage) -> str:
    """The text of ``hoodie.properties``, or of Hudi's backup while a rewrite replaces it (a
    writer that died mid-rewrite leaves only the backup; Hudi's readers read it then too).
    FileNotFoundError when neither exists."""
    try:
        data = storage.read_bytes(PROPERTIES_FILE)
    except FileNotFoundError:
        data = storage.read_bytes(BACKUP_FILE)
    return data.decode("utf-8")


def modify(storage: Storage, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    """Rewrite ``hoodie.properties`` with Hudi's backup protocol; the caller holds the table lock.

    A backup left by a rewrite that died is restored first (when the properties are gone) and
    removed; then the current properties are backed up, replaced by ``change(current)``, read
    back and checked, and the backup is deleted. Hudi deletes the properties before writing the
    new ones because its stores may not replace a file atomically; ours do (a local rename, one
    object PUT), so the file is replaced in one step and readers never find it missing. Returns
    the properties written."""
    if storage.exists(BACKUP_FILE):
        if not storage.exists(PROPERTIES_FILE):
            storage.write_bytes(PROPERTIES_FILE, storage.read_bytes(BACKUP_FILE))
            log.warning("restored %s from %s, left by a rewrite that did not finish", PROPERTIES_FILE, BACKUP_FILE)
        storage.delete(BACKUP_FILE)
    current_text = storage.read_bytes(PROPERTIES_FILE).decode("utf-8")
    current = parse(current_text)
    updated = change(dict(current))
    storage.write_bytes(BACKUP_FILE, current_text.encode("utf-8"))
    storage.write_bytes(PROPERTIES_FILE, render(updated).encode("utf-8"))
    written = parse(storage.read_bytes(PROPERTIES_FILE).decode("utf-8"))
    if written != updated:  # as Hudi: readers go to the backup until a later rewrite restores it
        storage.delete(PROPERTIES_FILE)
        raise TableFormatError(f"{PROPERTIES_FILE} did not read back as written; {BACKUP_FILE} keeps the "
                               "previous properties: check the storage, then rerun")
    storage.delete(BACKUP_FILE)
    return updated


def checksum(database: str, table: str) -> int:
    """Hudi's ``hoodie.table.checksum``: CRC32 of ``<database>.<table>``."""
    return zlib.crc32(f"{database}.{table}".encode())


@dataclass(frozen=True)
class TableConfig:
    """The settings of one table, as ``hoodie.properties`` records them."""

    name: str
    record_key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    ordering_field: str | None = None
    hive_style_partitioning: bool = False
    version: int = WRITE_VERSION
    database: str = "default"
    create_schema: str | None = None  # Avro JSON
    table_type: str = COPY_ON_WRITE
    num_buckets: int | None = None  # Hudi's simple bucket index (MERGE_ON_READ); None: no bucket index
    bucket_hash_fields: tuple[str, ...] = ()  # fields hashed to a bucket (empty: the record key fields)
    populate_meta_fields: bool = True  # False: virtual keys (:attr:`virtual_keys`)
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == MERGE_ON_READ

    @property
    def virtual_keys(self) -> bool:
        """Hudi's virtual keys (``hoodie.populate.meta.fields=false``): files keep the meta
        columns but no values in them and no bloom filter in the footer; a record's key is
        computed from its key fields wherever it is needed."""
        return not self.populate_meta_fields

    @property
    def bucket_index(self) -> bool:
        return self.num_buckets is not None

    @property
    def timeline_dir(self) -> str:
        if self.version >= 8:
            return ".hoodie/" + self.raw.get("hoodie.timeline.path", "timeline")
        return ".hoodie"

    @property
    def history_dir(self) -> str:
        return self.timeline_dir + "/" + self.raw.get("hoodie.timeline.history.path", "history")

    def key_generator(self) -> str:
        recorded = self.raw.get("hoodie.table.keygenerator.type")
        if recorded:
            return recorded.upper()
        if not self.partition_by:
            return "NON_PARTITION"
        if len(self.record_key) > 1 or len(self.partition_by) > 1:
            return "COMPLEX"
        return "SIMPLE"

    @property
    def field_named_keys(self) -> bool:
        """Record keys written as ``field:value`` even for one key field: what Hudi 1.1's complex
        key generator writes on tables created at version 9. Tables created at version 8 keep the
        bare value they were written with (Hudi 1.1 refuses to upgrade such a table by default,
        since its keys would change)."""
        initial = self.raw.get("hoodie.table.initial.version", str(self.version))
        born_9 = initial.isdigit() and int(initial) >= 9
        return len(self.record_key) > 1 or (born_9 and self.key_generator() == "COMPLEX")

    def check_writable(self, source: str = PROPERTIES_FILE) -> None:
        """Refuse, by name, a table whose settings our writers would not honour: an unwritten
        version, a custom merger, a partial-update mode. Several ordering fields are honoured
        (:attr:`ordering_fields`)."""
        if self.version not in WRITE_VERSIONS:
            raise TableFormatError(
                f"{source}: table version {self.version}: multiwriter writes versions 8 and 9; upgrade it with Hudi first"
            )
        mode = self.raw.get(MERGE_MODE_KEY, "").upper()
        if mode and mode not in MERGE_MODES:
            raise TableFormatError(
                f"{source}: {MERGE_MODE_KEY}={mode}: multiwriter merges by event time or commit time only; "
                "write this table with the Hudi writer that knows its merger"
            )
        if self.virtual_keys and self.merge_on_read:
            raise VirtualKeysError(
                f"{source}: {POPULATE_META_FIELDS_KEY}=false on a Merge-on-Read table: multiwriter writes virtual "
                "keys on Copy-on-Write tables only; write this table with Hudi, or use a Copy-on-Write table"
            )
        if self.raw.get(CDC_ENABLED_KEY, "").strip().lower() == "true" and self.virtual_keys:
            raise VirtualKeysError(
                f"{source}: {CDC_ENABLED_KEY}=true with {POPULATE_META_FIELDS_KEY}=false: multiwriter reads no changes "
                "of a table with virtual keys, so it writes no CDC log files for one; write this table with Hudi"
            )
        partial = self.raw.get(PARTIAL_UPDATE_MODE_KEY, "").upper()
        if partial and partial != "NONE":
            raise TableFormatError(
                f"{source}: {PARTIAL_UPDATE_MODE_KEY}={partial} is not supported by multiwriter's writers"
            )

    @property
    def ordering_fields(self) -> tuple[str, ...]:
        """Every ordering field the table names, in order (version 9 may name several, compared
        field by field as Hudi's ``ArrayComparable``); :attr:`ordering_field` is the first."""
        named = ordering_fields(self.raw, self.version)
        return named or ((self.ordering_field,) if self.ordering_field else ())

    @property
    def java_key_strings(self) -> bool:
        """Record keys of float, double and timestamp key columns written as Hudi's JVM key
        generators print them (``1.0``, the timestamp's Avro long). Tables created since we do
        so record it; version 9 tables are Hudi 1.1's; tables we created before keep the strings
        their rows were written with (else an update would not find its row)."""
        mode = self.raw.get(KEY_STRINGS_KEY)
        return mode == "java" if mode else self.version >= 9

    def to_properties(self) -> dict[str, str]:
        mode = "EVENT_TIME_ORDERING" if self.ordering_field else "COMMIT_TIME_ORDERING"
        p: dict[str, str] = {}
        if self.version < 9:  # version 9 names the merge mode alone
            p[PAYLOAD_CLASS_KEY], p[STRATEGY_ID_KEY] = V8_MERGE_SETTINGS[mode]
        p[KEY_STRINGS_KEY] = "java"
        p.update({
            "hoodie.table.initial.version": str(self.version),
            "hoodie.table.keygenerator.type": self.key_generator(),
            "hoodie.table.type": self.table_type,
        })
        if self.num_buckets is not None:  # write settings in Hudi; recorded so every writer agrees
            p[INDEX_TYPE_KEY] = "BUCKET"
            p[NUM_BUCKETS_KEY] = str(self.num_buckets)
            p[HASH_FIELD_KEY] = ",".join(self.bucket_hash_fields or self.record_key)
        if self.ordering_field:
            p[ORDERING_FIELDS_KEY if self.version >= 9 else PRECOMBINE_KEY] = self.ordering_field
        if self.partition_by:
            p["hoodie.table.partition.fields"] = ",".join(self.partition_by)
        p["hoodie.archivelog.folder"] = "archived"
        if self.create_schema:
            p["hoodie.table.create.schema"] = self.create_schema
        p.update(
            {
                "hoodie.timeline.layout.version": "2",
                "hoodie.timeline.history.path": "history",
                "hoodie.table.checksum": str(checksum(self.database, self.name)),
                "hoodie.datasource.write.drop.partition.columns": "false",
                "hoodie.table.name": self.name,
                "hoodie.table.recordkey.fields": ",".join(self.record_key),
                "hoodie.timeline.path": "timeline",
                "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style_partitioning).lower(),
                "hoodie.database.name": self.database,
                "hoodie.datasource.write.partitionpath.urlencode": "false",
                MERGE_MODE_KEY: mode,
                "hoodie.table.base.file.format": "PARQUET",
                POPULATE_META_FIELDS_KEY: str(self.populate_meta_fields).lower(),
                "hoodie.table.version": str(self.version),
            }
        )
        if self.version >= 9:
            p["hoodie.table.format"] = "native"
        return p

    @classmethod
    def from_properties(cls, props: dict[str, str], *, source: str = PROPERTIES_FILE) -> TableConfig:
        try:
            version = int(props.get("hoodie.table.version", "0"))
        except ValueError as e:
            raise TableFormatError(f"{source}: hoodie.table.version is not a number") from e
        if version not in SUPPORTED_READ_VERSIONS:
            raise TableFormatError(
                f"{source}: table version {version} is not supported (multiwriter reads 6, 8 and 9, writes 8 and 9)"
            )
        table_type = props.get("hoodie.table.type", COPY_ON_WRITE)
        if table_type not in TABLE_TYPES:
            raise TableFormatError(f"{source}: hoodie.table.type={table_type!r} is not one of {TABLE_TYPES}")
        name = props.get("hoodie.table.name")
        if not name:
            raise TableFormatError(f"{source}: hoodie.table.name is missing")
        keys = tuple(k for k in props.get("hoodie.table.recordkey.fields", "").split(",") if k)
        parts = tuple(k for k in props.get("hoodie.table.partition.fields", "").split(",") if k)
        _check_names_and_folders(props, name, keys, parts, source)
        return cls(
            name=name,
            record_key=keys,
            partition_by=parts,
            ordering_field=_ordering_field(props, version),
            hive_style_partitioning=props.get("hoodie.datasource.write.hive_style_partitioning", "false").lower() == "true",
            version=version,
            database=props.get("hoodie.database.name", "default"),
            create_schema=props.get("hoodie.table.create.schema"),
            table_type=table_type,
            num_buckets=_buckets(props, source),
            bucket_hash_fields=tuple(f for f in props.get(HASH_FIELD_KEY, "").split(",") if f),
            populate_meta_fields=props.get(POPULATE_META_FIELDS_KEY, "true").strip().lower() != "false",
            raw=dict(props),
        )

    def same_settings(self, other: TableConfig) -> bool:
        return (
            self.name == other.name
            and self.record_key == other.record_key
            and self.partition_by == other.partition_by
            and self.ordering_field == other.ordering_field
            and self.hive_style_partitioning == other.hive_style_partitioning
            and self.table_type == other.table_type
            and self.num_buckets == other.num_buckets
            and self.populate_meta_fields == other.populate_meta_fields
            and (self.bucket_hash_fields or self.record_key) == (other.bucket_hash_fields or other.record_key)
        )


def _check_names_and_folders(props: dict[str, str], name: str, keys: tuple[str, ...], parts: tuple[str, ...],
                             source: str) -> None:
    """The table's names (:mod:`.names`) and the timeline folders it names (:mod:`.paths`)."""
    names.check(error=TableFormatError, where=source, table_name=name, columns=keys, partition_columns=parts)
    for key in ("hoodie.timeline.path", "hoodie.timeline.history.path"):
        if key in props:
            paths.hoodie_subdir(key, props[key], source=source)


def ordering_fields(props: dict[str, str], version: int) -> tuple[str, ...]:
    """The ordering fields ``hoodie.properties`` names: version 9 names ordering fields (the old
    precombine key is only a fallback there), version 8 the precombine field; either may list
    several, comma-separated."""
    first, second = (ORDERING_FIELDS_KEY, PRECOMBINE_KEY) if version >= 9 else (PRECOMBINE_KEY, ORDERING_FIELDS_KEY)
    named = props.get(first) or props.get(second) or ""
    return tuple(f.strip() for f in named.split(",") if f.strip())


def _ordering_field(props: dict[str, str], version: int) -> str | None:
    """The first ordering field (:func:`ordering_fields`), or None."""
    return next(iter(ordering_fields(props, version)), None)


def _buckets(props: dict[str, str], source: str) -> int | None:
    if props.get(INDEX_TYPE_KEY, "").upper() != "BUCKET":
        return None
    try:
        n = int(props.get(NUM_BUCKETS_KEY, ""))
    except ValueError:
        raise TableFormatError(f"{source}: {INDEX_TYPE_KEY}=BUCKET needs a whole {NUM_BUCKETS_KEY}") from None
    if n < 1:
        raise TableFormatError(f"{source}: {NUM_BUCKETS_KEY}={n} must be at least 1")
    return n
