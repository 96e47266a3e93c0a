"""Random small nested schemas and evolutions (fields added at the top level and inside
structs, lists and maps of structs; int -> long and float -> double widening), on both table
types, before and after compaction: no value is lost, and our read equals hudi-rs's wherever
hudi-rs can read the table. Expected values are derived independently from what was sent."""
from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multiwriter as mw
from tests.oracle import hudi_read

PRIMS = [pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string()]
WIDER = {pa.int32(): pa.int64(), pa.float32(): pa.float64()}
FLOATS = [0.7, 0.1, 1.25, -3.3]  # short decimals: float32 storage shows through if widened by bits


def _types(depth: int = 0) -> st.SearchStrategy[pa.DataType]:
    prim = st.sampled_from(PRIMS)
    if depth >= 2:
        return prim
    struct = st.lists(st.tuples(st.sampled_from("abc"), _types(depth + 1)), min_size=1, max_size=2, unique_by=lambda f: f[0])
    struct = struct.map(lambda fs: pa.struct(list(fs)))
    return st.one_of(prim, struct, struct.map(pa.list_), struct.map(lambda s: pa.map_(pa.string(), s)))


def _evolve(t: pa.DataType, draw, name: str) -> pa.DataType:
    """``t`` with a field added in some struct of it, or a primitive widened, or unchanged."""
    if pa.types.is_struct(t):
        fields = [pa.field(f.name, _evolve(f.type, draw, f"{name}.{f.name}")) for f in t]
        if draw(st.booleans()):
            fields.append(pa.field("z" + name.replace(".", ""), draw(st.sampled_from(PRIMS))))
        return pa.struct(fields)
    if pa.types.is_list(t):
        return pa.list_(_evolve(t.value_type, draw, name))
    if pa.types.is_map(t):
        return pa.map_(pa.string(), _evolve(t.item_type, draw, name))
    return WIDER[t] if t in WIDER and draw(st.booleans()) else t


@st.composite
def evolutions(draw):
    cols = draw(st.lists(_types(), min_size=1, max_size=2))
    old = [pa.field(f"c{i}", t) for i, t in enumerate(cols)]
    new = [pa.field(f.name, _evolve(f.type, draw, f.name)) for f in old]
    if draw(st.booleans()):
        new.append(pa.field("added", draw(_types(1))))
    return pa.schema(old), pa.schema(new), draw(st.integers(0, 1000))


def _value(t: pa.DataType, rng: np.random.Generator):
    if pa.types.is_struct(t):
        return {f.name: _value(f.type, rng) for f in t}
    if pa.types.is_list(t):
        return [_value(t.value_type, rng) for _ in range(int(rng.integers(0, 3)))]
    if pa.types.is_map(t):
        return [(f"k{i}", _value(t.item_type, rng)) for i in range(int(rng.integers(0, 3)))]
    if pa.types.is_floating(t):
        return float(rng.choice(FLOATS))
    if pa.types.is_integer(t):
        return int(rng.integers(-1000, 1000))
    return str(rng.integers(0, 99))


def _read_as(v, old: pa.DataType, new: pa.DataType):
    """What a value sent as ``old`` reads as once the column is ``new`` (derived by hand: added
    fields null, float -> double through the decimal text, a float kept as float shows float32)."""
    if v is None:
        return None
    if pa.types.is_struct(new):
        return {f.name: (_read_as(v.get(f.name), old.field(f.name).type, f.type) if old.get_field_index(f.name) >= 0 else None)
                for f in new}
    if pa.types.is_list(new):
        return [_read_as(x, old.value_type, new.value_type) for x in v]
    if pa.types.is_map(new):
        return [(k, _read_as(x, old.item_type, new.item_type)) for k, x in v]
    if pa.types.is_float32(new):
        return float(np.float32(v))
    return v


def _rows(t: pa.Table, names: list[str]) -> dict[str, tuple]:
    d = t.select(["id", *names]).to_pylist()
    return {r["id"]: tuple(r[n] for n in names) for r in d}


def _check(path: str, want: dict[str, tuple], names: list[str]) -> None:
    assert _rows(mw.Table.open(path).read(), names) == want
    try:
        theirs = hudi_read(path)
    except BaseException as e:  # noqa: BLE001 -- hudi-rs raises (or panics) on slices it cannot read (docs/schema-evolution.md)
        if isinstance(e, KeyboardInterrupt):
            raise
        return
    assert _rows(theirs, names) == want


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=evolutions(), mor=st.booleans())
def test_random_nested_evolution_loses_nothing(case, mor):
    old, new, seed = case
    rng = np.random.default_rng(seed)
    base = pa.schema([("id", pa.string()), ("ts", pa.int64())])
    cfg = mw.WriterConfig(lock=mw.InProcessLock(), writer_id="w")
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/t"
        mw.Table.create(path, name="r", schema=pa.schema([*base, *old]), record_key="id", ordering_field="ts",
                        table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE")
        first = [{"id": f"k{i}", "ts": 1, **{f.name: _value(f.type, rng) for f in old}} for i in range(3)]
        mw.write(pa.Table.from_pylist(first, schema=pa.schema([*base, *old])), path, cfg)
        second = [{"id": k, "ts": 2, **{f.name: _value(f.type, rng) for f in new}} for k in ("k0", "k3")]
        mw.write(pa.Table.from_pylist(second, schema=pa.schema([*base, *new])), path, cfg)
        assert mw.Table.open(path).schema().names[-len(new):] == new.names
        names = new.names
        want = {r["id"]: tuple(_read_as(r[f.name], f.type, f.type) for f in new) for r in second}
        for r in first[1:]:
            want[r["id"]] = tuple(_read_as(r[f.name], old.field(f.name).type, f.type) if f.name in old.names else None
                                  for f in new)
        _check(path, want, names)
        if mor:
            with mw.Cleaner(path, lock=mw.InProcessLock(), compaction=mw.CompactionConfig(delta_commits=1)) as c:
                assert c.compact_once().compaction_instants
            _check(path, want, names)
