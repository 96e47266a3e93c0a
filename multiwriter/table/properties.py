"""``hoodie.properties``: Java properties format, the full key set Hudi on Spark writes."""
from __future__ import annotations

import datetime as _dt
import zlib
from dataclasses import dataclass, field

from ..errors import TableFormatError

PROPERTIES_FILE = ".hoodie/hoodie.properties"
SUPPORTED_READ_VERSIONS = (6, 8)
WRITE_VERSION = 8


COPY_ON_WRITE = "COPY_ON_WRITE"
MERGE_ON_READ = "MERGE_ON_READ"
TABLE_TYPES = (COPY_ON_WRITE, MERGE_ON_READ)
INDEX_TYPE_KEY = "hoodie.index.type"
NUM_BUCKETS_KEY = "hoodie.bucket.index.num.buckets"
HASH_FIELD_KEY = "hoodie.bucket.index.hash.field"


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
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == MERGE_ON_READ

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
        if not self.partition_by:
            return "NON_PARTITION"
        if len(self.record_key) > 1 or len(self.partition_by) > 1:
            return "COMPLEX"
        return "SIMPLE"

    def to_properties(self) -> dict[str, str]:
        p: dict[str, str] = {
            "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            "hoodie.table.initial.version": str(self.version),
            "hoodie.table.keygenerator.type": self.key_generator(),
            "hoodie.table.type": self.table_type,
        }
        if self.num_buckets is not None:  # write settings in Hudi; recorded so every writer agrees
            p[INDEX_TYPE_KEY] = "BUCKET"
            p[NUM_BUCKETS_KEY] = str(self.num_buckets)
            p[HASH_FIELD_KEY] = ",".join(self.bucket_hash_fields or self.record_key)
        if self.ordering_field:
            p["hoodie.table.precombine.field"] = self.ordering_field
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
                "hoodie.record.merge.mode": "EVENT_TIME_ORDERING" if self.ordering_field else "COMMIT_TIME_ORDERING",
                "hoodie.table.base.file.format": "PARQUET",
                "hoodie.populate.meta.fields": "true",
                "hoodie.table.version": str(self.version),
            }
        )
        return p

    @classmethod
    def from_properties(cls, props: dict[str, str], *, source: str = PROPERTIES_FILE) -> TableConfig:
        try:
            version = int(props.get("hoodie.table.version", "0"))
        except ValueError as e:
            raise TableFormatError(f"{source}: hoodie.table.version is not a number") from e
        if version not in SUPPORTED_READ_VERSIONS:
            raise TableFormatError(
                f"{source}: table version {version} is not supported (multiwriter reads 6 and 8, writes 8)"
            )
        table_type = props.get("hoodie.table.type", COPY_ON_WRITE)
        if table_type not in TABLE_TYPES:
            raise TableFormatError(f"{source}: hoodie.table.type={table_type!r} is not one of {TABLE_TYPES}")
        name = props.get("hoodie.table.name")
        if not name:
            raise TableFormatError(f"{source}: hoodie.table.name is missing")
        keys = tuple(k for k in props.get("hoodie.table.recordkey.fields", "").split(",") if k)
        parts = tuple(k for k in props.get("hoodie.table.partition.fields", "").split(",") if k)
        return cls(
            name=name,
            record_key=keys,
            partition_by=parts,
            ordering_field=props.get("hoodie.table.precombine.field") or props.get("hoodie.table.ordering.fields") or None,
            hive_style_partitioning=props.get("hoodie.datasource.write.hive_style_partitioning", "false").lower() == "true",
            version=version,
            database=props.get("hoodie.database.name", "default"),
            create_schema=props.get("hoodie.table.create.schema"),
            table_type=table_type,
            num_buckets=_buckets(props, source),
            bucket_hash_fields=tuple(f for f in props.get(HASH_FIELD_KEY, "").split(",") if f),
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
            and (self.bucket_hash_fields or self.record_key) == (other.bucket_hash_fields or other.record_key)
        )


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
