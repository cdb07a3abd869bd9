"""A REWRITE transform's output carried through evolutions planned after it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog.errors import ShardError
from catalog.pipeline import EvolveTo, apply_transforms

TS_DIFF = [pa.field("_ts", pa.uint64()), pa.field("_diff", pa.int64())]


def _batch(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    n = len(next(iter(columns.values())))
    return pa.RecordBatch.from_arrays(
        [*columns.values(), pa.array([0] * n, pa.uint64()), pa.array([1] * n, pa.int64())],
        names=[*columns, "_ts", "_diff"],
    )


def to_strings(batch: pa.RecordBatch) -> pa.RecordBatch:
    ids = pa.array([f"u{v}" for v in batch.column("id").to_pylist()], pa.string())
    return pa.RecordBatch.from_arrays([ids, batch.column("name")], names=["id", "name"])


def test_later_added_columns_read_as_nulls() -> None:
    """0.11 rewrites ids, 0.15 appends a nullable struct: one upgrade gets both."""
    latest = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("attributes", pa.struct([pa.field("login", pa.bool_())])),
        ]
    )
    out = apply_transforms(
        _batch({"id": pa.array([7], pa.int64()), "name": pa.array(["alice"])}),
        [to_strings, EvolveTo(latest)],
        latest,
    )
    assert out.schema == pa.schema([*latest, *TS_DIFF])
    assert out.to_pylist() == [
        {"id": "u7", "name": "alice", "attributes": None, "_ts": 0, "_diff": 1}
    ]


def test_a_missing_required_column_is_refused_naming_it() -> None:
    """A column the new schema requires and no evolution can supply is an error, not nulls."""
    latest = pa.schema(
        [pa.field("id", pa.string(), nullable=False), pa.field("owner", pa.string(), False)]
    )
    with pytest.raises(ShardError) as info:
        apply_transforms(
            _batch({"id": pa.array([7], pa.int64()), "name": pa.array(["a"])}),
            [to_strings, EvolveTo(latest)],
            latest,
        )
    assert info.value.details["reason"] == "transform-output"
    assert info.value.details["column"] == "owner"


def test_without_later_evolutions_a_forgotten_column_is_refused() -> None:
    """Only evolutions planned after the rewrite fill columns: a plain rewrite stays strict."""
    latest = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("note", pa.string()),
        ]
    )
    with pytest.raises(ShardError) as info:
        apply_transforms(
            _batch({"id": pa.array([7], pa.int64()), "name": pa.array(["a"])}),
            [to_strings],
            latest,
        )
    assert info.value.details["reason"] == "transform-output"


def test_an_inverse_projected_onto_the_older_schema_drops_what_later_releases_added() -> None:
    """A rollback runs a rewrite's inverse on rows a later release wrote: fields evolutions
    added after the rewrite are dropped (``project``); without it the extra column is
    refused."""
    older = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    rows = _batch({
        "id": pa.array(["7"]), "name": pa.array(["a"]), "attributes": pa.array(["x"]),
    })  # fmt: skip

    def numbers(batch: pa.RecordBatch) -> pa.RecordBatch:
        ids = pa.compute.cast(batch.column("id"), pa.int64())
        return batch.set_column(0, pa.field("id", pa.int64(), nullable=False), ids)

    out = apply_transforms(rows, [numbers], older, project=True)
    assert out.select(["id", "name"]).to_pylist() == [{"id": 7, "name": "a"}]
    assert out.schema.names == ["id", "name", "_ts", "_diff"]
    with pytest.raises(ShardError, match="attributes"):
        apply_transforms(rows, [numbers], older)
