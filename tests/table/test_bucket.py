"""The simple bucket index rule against the JVM: ``BucketHash.java`` hashes the same keys with the
JDK's own ``String.hashCode`` / ``List.hashCode`` (UTF-16, int32), and every bucket must agree."""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multiwriter.errors import ConfigError, InvalidRecordError
from multiwriter.table.properties import TableConfig
from multiwriter.table import bucket
from multiwriter.write import records

HERE = Path(__file__).resolve().parent
COUNTS = (1, 7, 16, 256)

# Characters that stress UTF-16 hashing: accents (precomposed and combining), CJK, characters
# beyond U+FFFF (surrogate pairs in Java: emoji, musical symbols, the last code point), a BOM,
# U+FFFF, separators that are not line breaks for Java's readLine, and the key separators.
SPECIAL = (
    "éèüñçÅøß" "e\u0301a\u0308o\u0327" "日本語中文한국어" "😀👍🏽🇫🇷\U0001d11e\U00010000\U0010ffff"
    "\ufeff\uffff\u2028\u00a0\t\x00" ":,"
)


@pytest.fixture(scope="session")
def java_buckets(tmp_path_factory) -> Callable[[Sequence[str], Sequence[str]], list[str]]:
    """``run(keys, hash_fields)``: BucketHash's output line per key (``hash b1 b2 ...`` or ``LOOP``)."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac and java)")
    out = tmp_path_factory.mktemp("bucket-hash")
    subprocess.run(["javac", "-d", str(out), str(HERE / "BucketHash.java")], check=True,
                   capture_output=True, timeout=120)

    def run(keys: Sequence[str], hash_fields: Sequence[str]) -> list[str]:
        assert not any("\n" in k or "\r" in k for k in keys)
        text = "".join(k + "\n" for k in keys)
        proc = subprocess.run(["java", "-cp", str(out), "BucketHash", ",".join(hash_fields), *map(str, COUNTS)],
                              input=text.encode("utf-8"), capture_output=True, timeout=300, check=True)
        lines = proc.stdout.decode("utf-8").split("\n")[:-1]
        assert len(lines) == len(keys)
        return lines

    return run


def _check_against_jvm(run, keys: list[str], hash_fields: tuple[str, ...], key_fields: tuple[str, ...]) -> int:
    """Every key's List hash and buckets as the JVM says, vectorized and scalar; keys on which
    the JVM's walk never ends are refused. Returns how many keys were refused."""
    lines = run(keys, bucket.resolve_hash_fields(hash_fields, key_fields))
    loops = [i for i, line in enumerate(lines) if line == "LOOP"]
    for i in loops:
        with pytest.raises(InvalidRecordError):
            bucket.bucket_id(keys[i], 7, hash_fields, key_fields)
    keep = [i for i, line in enumerate(lines) if line != "LOOP"]
    want = np.array([[int(x) for x in lines[i].split()] for i in keep], dtype=np.int64).reshape(len(keep), -1)
    arr = pa.array([keys[i] for i in keep], pa.string())
    got_hash = bucket.list_hashes(arr, bucket.resolve_hash_fields(hash_fields, key_fields))
    bad = np.flatnonzero(got_hash != want[:, 0])
    assert bad.size == 0, [(keys[keep[i]], int(got_hash[i]), int(want[i, 0])) for i in bad[:5]]
    for j, n in enumerate(COUNTS):
        got = bucket.bucket_ids(arr, n, hash_fields, key_fields)
        assert got.dtype == np.int32
        assert (got == want[:, j + 1]).all(), n
    for i in keep[::7]:
        row = [int(x) for x in lines[i].split()]
        assert [bucket.bucket_id(keys[i], n, hash_fields, key_fields) for n in COUNTS] == row[1:]
    if loops:
        with pytest.raises(InvalidRecordError):
            bucket.bucket_ids(pa.array(keys), 7, hash_fields, key_fields)
    return len(loops)


def _random_text(rng: random.Random, alphabet: str, lo: int, hi: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))


def test_simple_keys_match_the_jvm(java_buckets):
    rng = random.Random(11)
    keys = [_random_text(rng, PRINTABLE, 0, 40) for _ in range(2500)]  # with ':' and ','
    keys += [_random_text(rng, PRINTABLE.replace(":", "").replace(",", ""), 1, 60) for _ in range(1000)]
    keys += [_random_text(rng, SPECIAL + "abc", 0, 12) for _ in range(1500)]
    keys += [_random_text(rng, SPECIAL, 1, 3) for _ in range(300)]
    keys += [str(rng.randint(-(2**63), 2**63)) for _ in range(500)] + [str(i) for i in range(200)]
    keys += ["2147483647", "-2147483648", "4294967296", "0.5", "1e10", "00000001"]
    keys += ["", " ", ":", ",", ":,", ",:", "::", ",,", "a:", ":a", "a,", ",a", "a:,", "a:b,", ":,:", "__null__",
             "__empty__", "id:__null__", "id:__empty__,x:1", "Aa", "BB", "AaAa", "BBBB", "AaBB"]  # ("Aa" and "BB" collide)
    keys += ["2024-10-24 10:11:11.234", "2024-10-24T10:11:11Z", "id:1,2", "id:a:b,c", "x:1,id:2", "ts:10:20,x",
             "x:a:b,", "a:b,c:d,e", "id:1,id:2", "a,b:c", ",id:1", "id:1,", "é:1,id:😀"]
    refused = _check_against_jvm(java_buckets, keys, (), ("id",))
    assert 0 < refused < len(keys) // 10  # some keys send Hudi's walk in circles; few do
    _check_against_jvm(java_buckets, keys, ("a", "id"), ("id", "a", "b"))


def test_composite_keys_from_the_record_key_builder_match_the_jvm(java_buckets):
    """Keys as the project's record-key builder makes them (``f:v,f:v``), values of many kinds,
    hash fields all key fields or a subset, in any order."""
    rng = random.Random(12)
    n = 3000
    plain = [_random_text(rng, PRINTABLE.replace(":", "").replace(",", ""), 1, 20) for _ in range(n)]
    special = [_random_text(rng, SPECIAL.replace(":", "").replace(",", "") + "xyz", 1, 8) for _ in range(n)]
    stamps = [f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
              f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}" for _ in range(n)]
    with_commas = [_random_text(rng, "ab,c:", 1, 6) for _ in range(n)]
    batch = pa.table({
        "id": pa.array([rng.randint(-10**12, 10**12) for _ in range(n)], pa.int64()),
        "name": plain, "city": special, "ts": stamps, "odd": with_commas,
    })
    cases = [
        (("id", "name"), ()), (("id", "name"), ("name",)), (("id", "name"), ("name", "id")),
        (("id", "city", "name"), ()), (("id", "city", "name"), ("city",)), (("name", "city", "id"), ("id", "city")),
        (("id", "ts"), ()), (("ts", "id"), ("id",)), (("id", "name", "ts"), ("ts",)),
        (("id", "odd"), ()), (("odd", "name", "id"), ("id", "odd")),
    ]
    for key_fields, hash_fields in cases:
        keys = records.record_keys(batch, TableConfig(name="t", record_key=key_fields))
        _check_against_jvm(java_buckets, keys.to_pylist(), hash_fields, key_fields)


def test_buckets_spread_and_ignore_fields_outside_the_hash():
    """The hash covers only the hash fields' values: keys that differ elsewhere share a bucket."""
    keys = pa.array([f"tenant:t{i % 10},id:{i}" for i in range(10_000)])
    by_tenant = bucket.bucket_ids(keys, 256, ("tenant",), ("tenant", "id"))
    tenants = np.arange(10_000) % 10
    for t in range(10):
        assert len(set(by_tenant[tenants == t].tolist())) == 1
    by_key = bucket.bucket_ids(keys, 16, (), ("tenant", "id"))
    counts = np.bincount(by_key, minlength=16)
    assert counts.min() > 10_000 / 16 / 2  # Java's hash of sequential ids is uneven mod 16, not badly so


KEY_CHARS = st.sampled_from(list("ab:,") + ["é", "日", "😀", "__null__", "__empty__", "id", "x"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(KEY_CHARS, max_size=10).map("".join), min_size=1, max_size=30),
       st.sampled_from([("id",), ("a", "id"), ("x", "a", "b")]))
def test_vectorized_equals_scalar(keys, fields):
    """The array path (prefix sums, pair splitting) equals the key-by-key rule on awkward keys."""
    ok = []
    for k in keys:
        try:
            ok.append((k, bucket.java_list_hash(bucket.hash_keys(k, fields))))
        except InvalidRecordError:
            pass
    arr = pa.array(["pad"] + [k for k, _ in ok]).slice(1)  # a sliced array: offsets do not start at 0
    assert bucket.list_hashes(arr, fields).tolist() == [h for _, h in ok]


def test_array_forms():
    keys = ["a", "id:1,x:2", "日本😀", ""]
    want = [bucket.bucket_id(k, 7, ("id",), ("id", "x")) for k in keys]
    for arr in (pa.array(keys), pa.array(keys, pa.large_string()), pa.chunked_array([keys[:1], keys[1:]]),
                pa.chunked_array([], pa.string())):
        got = bucket.bucket_ids(arr, 7, ("id",), ("id", "x"))
        assert got.tolist() == want[:len(arr)]
    with pytest.raises(InvalidRecordError):
        bucket.bucket_ids(pa.array(["a", None]), 7, (), ("id",))
    with pytest.raises(TypeError):
        bucket.bucket_ids(pa.array([1, 2]), 7, (), ("id",))


def test_java_hashes_of_known_strings():
    assert bucket.java_string_hash("") == 0
    assert bucket.java_string_hash("hello") == 99162322
    assert bucket.java_string_hash("Aa") == bucket.java_string_hash("BB") == 2112
    assert bucket.java_string_hash("😀") == 0xD83D * 31 + 0xDE00  # a surrogate pair
    assert bucket.java_list_hash([]) == 1
    assert bucket.java_list_hash([None]) == bucket.java_list_hash([""]) == 31


# ---------------------------------------------------------------------------------------------
# file ids


def test_file_ids_round_trip():
    for b in (0, 1, 7, 255, 12_345_678, 99_999_999):
        fid = bucket.new_file_id(b)
        assert re.fullmatch(r"\d{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0", fid), fid
        assert fid.startswith(f"{b:08d}-")
        assert bucket.bucket_of_file_id(fid) == b
        assert "_" not in fid  # a data file name splits on "_"
        fixed = bucket.new_file_id(b, fixed=True)
        assert fixed == f"{b:08d}-0000-0000-0000-000000000000-0"
        assert bucket.bucket_of_file_id(fixed) == b
    assert len({bucket.new_file_id(3) for _ in range(100)}) == 100
    assert bucket.file_id_prefix(3, fixed=True) == "00000003-0000-0000-0000-000000000000"
    assert bucket.bucket_of_file_id("00000042-1a2b-3c4d-5e6f-0123456789ab-12") == 42


@pytest.mark.parametrize("fid", [
    "3f1e2d4c-1a2b-3c4d-5e6f-0123456789ab-0",  # a random UUID: bloom-index file groups
    "0000001-1a2b-3c4d-5e6f-0123456789ab-0", "000000001-1a2b-3c4d-5e6f-0123456789ab-0",
    "00000001-1A2B-3C4D-5E6F-0123456789AB-0", "00000001-1a2b-3c4d-5e6f-0123456789ab",
    "00000001-1a2b-3c4d-5e6f-0123456789ab-", "+0000001-1a2b-3c4d-5e6f-0123456789ab-0",
    "00000001-1a2b-3c4d-5e6f-0123456789ab-0_1-2-3_20240101000000000.parquet", "00000001", "", "abc",
    "٠٠٠٠٠٠٠١-1a2b-3c4d-5e6f-0123456789ab-0",  # non-ASCII digits
])
def test_non_bucket_file_ids_are_rejected(fid):
    assert bucket.bucket_of_file_id(fid) is None


@pytest.mark.parametrize("b", [-1, 10**8, True, 1.0, "1", None])
def test_bad_bucket_numbers(b):
    with pytest.raises(ValueError):
        bucket.new_file_id(b)


# ---------------------------------------------------------------------------------------------
# configuration


def test_hash_fields_default_to_the_record_key_and_must_be_a_subset():
    assert bucket.resolve_hash_fields((), ("a", "b")) == ("a", "b")
    assert bucket.resolve_hash_fields(("b",), ("a", "b")) == ("b",)
    assert bucket.parse_hash_fields(" b , a ", ("a", "b", "c")) == ("b", "a")
    assert bucket.parse_hash_fields(None, ("a",)) == ("a",)
    assert bucket.parse_hash_fields("", ("a", "b")) == ("a", "b")
    for hash_fields, key_fields in ((("c",), ("a", "b")), (("a", "z"), ("a",)), (("a", "a"), ("a", "b")),
                                    (("a",), ())):
        with pytest.raises(ConfigError) as e:
            bucket.resolve_hash_fields(hash_fields, key_fields)
        assert type(e.value) is ConfigError
    with pytest.raises(ConfigError, match="subset of the record key fields"):
        bucket.bucket_ids(pa.array(["k"]), 4, ("c",), ("a", "b"))
    with pytest.raises(ConfigError, match="hash.field"):
        bucket.parse_hash_fields("a,x", ("a",))


@pytest.mark.parametrize("n", [0, -1, 1.5, "8", True, None, 10**8 + 1])
def test_num_buckets_must_be_a_positive_int(n):
    with pytest.raises(ConfigError) as e:
        bucket.validate_num_buckets(n)
    assert type(e.value) is ConfigError
    with pytest.raises(ConfigError):
        bucket.bucket_ids(pa.array(["k"]), n, (), ("id",))


def test_num_buckets_accepts_ints():
    assert bucket.validate_num_buckets(1) == 1
    assert bucket.validate_num_buckets(np.int64(256)) == 256
    assert bucket.validate_num_buckets(10**8) == 10**8
