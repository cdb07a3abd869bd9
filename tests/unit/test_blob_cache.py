"""The batch cache: a read opens only the batches it has not read before, within a budget."""

from __future__ import annotations

from pathlib import Path

import attrs
import pyarrow as pa
import pytest

from catalog.blob import BlobStore
from catalog.blob.cache import BatchCache
from catalog.errors import CorruptBlobError


def batch(first: int, rows: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + rows), pa.int64()),
                     "name": pa.array([f"n{i}" for i in range(first, first + rows)])})  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return attrs.evolve(BlobStore.from_uri(str(tmp_path / "blob")), cache=BatchCache())


@pytest.fixture
def other(tmp_path: Path) -> BlobStore:
    """Another process's store on the same root: what it writes is not in ``store``'s cache."""
    return BlobStore.from_uri(str(tmp_path / "blob"))


def test_a_second_read_takes_the_batches_from_memory_and_opens_only_new_ones(
    store: BlobStore, other: BlobStore
) -> None:
    keys = [f"shards/s/{i}.parquet" for i in range(5)]
    for i, key in enumerate(keys):
        other.put_batch(key, batch(i * 10, 10))
    first = store.get_batches(keys[:4], expected_rows=[10] * 4)
    assert first.column("id").to_pylist() == list(range(40))
    assert store.cache is not None and (store.cache.hits, store.cache.misses) == (0, 4)
    # A file removed after it was read is served from memory; the new one is read from disk.
    Path(store.path(keys[0])).unlink()
    second = store.get_batches(keys, expected_rows=[10] * 5)
    assert second.column("id").to_pylist() == list(range(50))
    assert (store.cache.hits, store.cache.misses) == (4, 5)


def test_the_columns_read_are_part_of_the_key(store: BlobStore) -> None:
    store.put_batch("b.parquet", batch(0, 3))
    assert store.get_batches(["b.parquet"], columns=["id"], expected_rows=[3]).column_names == [
        "id"
    ]
    both = store.get_batches(["b.parquet"], expected_rows=[3])
    assert both.column_names == ["id", "name"]


def test_a_batch_with_another_row_count_is_refused_and_not_kept(
    store: BlobStore, other: BlobStore
) -> None:
    other.put_batch("b.parquet", batch(0, 3))
    with pytest.raises(CorruptBlobError) as refused:
        store.get_batches(["b.parquet"], expected_rows=[4])
    assert refused.value.details["reason"] == "row-count"
    assert store.cache is not None and store.cache.held_bytes == 0


def test_a_batch_this_process_wrote_is_read_from_memory_as_the_file_holds_it(
    store: BlobStore, other: BlobStore
) -> None:
    """The table kept at the write is the one a read of the file gives, types and all, for any
    columns read; a row count the state does not agree with still reads the file."""
    rows = 3
    table = pa.table({
        "id": pa.array(["a", "b", "c"]),
        "oid": pa.array([1, 2, 3], pa.uint32()),
        "at": pa.array([0, 1, None], pa.timestamp("us", tz="UTC")),
        "on": pa.array([True, None, False]),
        "privileges": pa.array(
            [[{"grantee": "u1", "acl": "r"}], [], None],
            pa.list_(pa.struct([("grantee", pa.string()), ("acl", pa.string())])),
        ),
        "options": pa.array([[("k", "v")], None, []], pa.map_(pa.string(), pa.string())),
        "raw": pa.array([b"\x00", None, b""], pa.binary()),
        "amount": pa.array([None, None, None], pa.decimal128(12, 2)),
        "kind": pa.array(["x", "y", "x"]).dictionary_encode(),
        "_ts": pa.array([5, 5, 6], pa.uint64()),
        "_diff": pa.array([1, 1, -1], pa.int64()),
    })  # fmt: skip
    table = table.cast(table.schema.set(0, table.schema.field("id").with_nullable(False)))
    store.put_batch("w.parquet", pa.concat_tables([table.slice(0, 1), table.slice(1)]))
    assert store.cache is not None
    for columns in (None, ["_diff", "id"], ["privileges", "_ts"]):
        kept = store.get_batches(["w.parquet"], columns=columns, expected_rows=[rows])
        read = other.get_batches(["w.parquet"], columns=columns, expected_rows=[rows])
        assert kept.equals(read, check_metadata=True), columns
        assert {c.num_chunks for c in kept.columns} == {1}, columns
    assert store.cache.misses == 0
    with pytest.raises(CorruptBlobError):
        store.get_batches(["w.parquet"], expected_rows=[rows + 1])


def test_the_least_recently_used_batch_leaves_first_within_the_budget() -> None:
    tables = {name: pa.table({"id": pa.array(range(1000), pa.int64())}) for name in "abcde"}
    size = tables["a"].nbytes
    cache = BatchCache(budget=4 * size)  # a batch may take a quarter
    for name in "abc":
        cache.put(name, None, tables[name])
    assert cache.get("a", None) is not None  # now the most recently used
    cache.put("d", None, tables["d"])
    cache.put("e", None, tables["e"])
    assert cache.held_bytes <= 4 * size
    assert cache.get("b", None) is None
    assert all(cache.get(name, None) is not None for name in "acde")


def test_a_batch_over_a_quarter_of_the_budget_is_never_kept() -> None:
    table = batch(0, 1000)
    cache = BatchCache(budget=2 * table.nbytes)
    cache.put("big", None, table)
    assert cache.get("big", None) is None and cache.held_bytes == 0


def test_a_store_without_a_cache_reads_the_files_each_time(tmp_path: Path) -> None:
    store = BlobStore.from_uri(str(tmp_path / "blob"))
    store.put_batch("b.parquet", batch(0, 3))
    store.get_batches(["b.parquet"], expected_rows=[3])
    Path(store.path("b.parquet")).unlink()
    with pytest.raises(CorruptBlobError):
        store.get_batches(["b.parquet"], expected_rows=[3])
