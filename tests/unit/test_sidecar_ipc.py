"""Arrow IPC appends: what a stream must be, each refusal naming what is wrong."""

from __future__ import annotations

import gc
import io
from collections.abc import Mapping

import pyarrow as pa
import pytest

from catalog.errors import BadInputError
from orchestrator.wire.ipc import EncodedStreams, TooManyRowsError, stream_chunks, stream_to_table

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("stats", pa.struct([pa.field("errors", pa.int32(), nullable=False)])),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
    ]
)


def stream(*batches: pa.RecordBatch | pa.Table, schema: pa.Schema | None = None) -> bytes:
    sink = io.BytesIO()
    first = batches[0].schema if batches else schema
    assert first is not None
    with pa.ipc.new_stream(sink, first) as writer:
        for batch in batches:
            writer.write(batch)
    return sink.getvalue()


def rows(*values: Mapping[str, object], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist(list(values), schema=schema)


def refused(body: bytes, max_rows: int = 1000) -> BadInputError:
    with pytest.raises(BadInputError) as caught:
        stream_to_table(body, SCHEMA, max_rows)
    return caught.value


def test_a_stream_of_the_write_schema_reads_as_it_is() -> None:
    sent = rows({"id": 1, "name": "a", "stats": {"errors": 3}, "tags": ["x"]}, {"id": 2})
    assert stream_to_table(stream(sent, sent), SCHEMA, 10).to_pylist() == 2 * sent.to_pylist()


def test_a_projection_in_any_order_fills_the_nullable_fields_left_out() -> None:
    projection = pa.schema([SCHEMA.field("name"), SCHEMA.field("id")])
    sent = pa.Table.from_pylist([{"name": "n", "id": 7}], schema=projection)
    table = stream_to_table(stream(sent), SCHEMA, 10)
    assert table.schema.equals(SCHEMA)
    assert table.to_pylist() == [{"id": 7, "name": "n", "stats": None, "tags": None}]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"garbage, not arrow at all", "not an Arrow IPC stream"),
        (b"", "empty body"),
    ],
)
def test_bytes_that_are_no_stream_are_refused(body: bytes, words: str) -> None:
    assert words in refused(body).message


def test_a_truncated_stream_is_refused_naming_how_far_it_read() -> None:
    sent = rows(*({"id": i} for i in range(100)))
    whole = stream(sent, sent)
    error = refused(whole[: len(whole) - 200])
    assert "cut short" in error.message and error.details["problem"] == "truncated"


def test_a_stream_without_rows_is_refused() -> None:
    assert "no rows" in refused(stream(schema=SCHEMA)).message
    assert "no rows" in refused(stream(rows(schema=SCHEMA))).message


def test_an_unknown_field_is_named() -> None:
    sent = pa.table({"id": pa.array([1], pa.int64()), "color": ["red"]})
    error = refused(stream(sent))
    assert error.details["field"] == "color" and "unknown field color" in error.message


def test_a_wrong_type_is_named_with_both_types() -> None:
    sent = pa.table({"id": pa.array([1], pa.int32())})
    error = refused(stream(sent))
    assert (error.details["field"], error.details["type"], error.details["expected"]) == (
        "id", "int32", "int64",
    )  # fmt: skip


def test_a_dictionary_the_schema_does_not_have_is_named() -> None:
    names = pa.array(["a", "b"]).dictionary_encode()
    sent = pa.table({"id": pa.array([1, 2], pa.int64()), "name": names})
    error = refused(stream(sent))
    assert "dictionary-encoded" in error.message and error.details["field"] == "name"


def test_an_extension_type_the_schema_does_not_have_is_named() -> None:
    uuid = pa.uuid() if hasattr(pa, "uuid") else None
    if uuid is None:  # pyarrow before 18: a registered extension of our own
        pytest.skip("pyarrow has no uuid extension type")
    values = pa.ExtensionArray.from_storage(uuid, pa.array([b"0" * 16], pa.binary(16)))
    sent = pa.table({"id": pa.array([1], pa.int64()), "name": values})
    error = refused(stream(sent))
    assert "extension" in error.message and error.details["field"] == "name"


def test_a_required_field_left_out_is_named() -> None:
    sent = pa.table({"name": ["a"]})
    assert refused(stream(sent)).details["field"] == "id"


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"id": None}, "id"),
        ({"id": 1, "stats": {"errors": None}}, "stats.errors"),
        ({"id": 1, "tags": ["a", None]}, "tags[]"),
    ],
)
def test_a_null_where_the_schema_allows_none_is_named_at_any_depth(
    values: dict[str, object], path: str
) -> None:
    loose = pa.schema([f.with_nullable(True) for f in SCHEMA])
    loose = pa.schema(
        [
            loose.field("id"),
            loose.field("name"),
            pa.field("stats", pa.struct([pa.field("errors", pa.int32(), nullable=False)])),
            loose.field("tags"),
        ]
    )
    sent = pa.Table.from_pylist([values], schema=loose)
    # The sent types equal the schema's (nullability of a top-level field is not a type).
    error = refused(stream(sent))
    assert error.details["field"] == path, error.message


def test_a_null_struct_may_hide_a_required_child() -> None:
    sent = rows({"id": 1, "stats": None})
    assert stream_to_table(stream(sent), SCHEMA, 10).to_pylist()[0]["stats"] is None


def test_more_rows_than_the_limit_are_refused_while_reading() -> None:
    sent = rows(*({"id": i} for i in range(10)))
    with pytest.raises(TooManyRowsError) as caught:
        stream_to_table(stream(sent, sent), SCHEMA, 15)
    assert caught.value.details["limit"] == 15 and caught.value.code == "too-many-rows"


def test_a_read_streams_batch_by_batch_and_reads_back_whole() -> None:
    table = rows(*({"id": i, "name": str(i)} for i in range(1000)))
    chunks = list(stream_chunks(table, batch_rows=100))
    assert len(chunks) == 10  # the schema with the first batch, the end marker with the last
    assert max(len(c) for c in chunks) < 4 * 1024
    assert pa.ipc.open_stream(b"".join(chunks)).read_all().equals(table)


def test_a_read_of_many_small_chunks_is_one_record_batch() -> None:
    """A snapshot's table holds a chunk per batch it read: written as one record batch, one
    chunk, when its rows fit one."""
    table = pa.concat_tables([rows({"id": i, "name": str(i)}) for i in range(50)])
    assert table.column(0).num_chunks == 50
    (chunk,) = stream_chunks(table, batch_rows=100)
    reader = pa.ipc.open_stream(chunk)
    assert [b.num_rows for b in reader] == [50]


def test_an_empty_read_is_its_schema_and_end_marker() -> None:
    empty = rows({"id": 1}).slice(0, 0)
    (chunk,) = stream_chunks(empty)
    assert pa.ipc.open_stream(chunk).read_all().equals(empty)


GRANTS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("grants", pa.list_(pa.struct([pa.field("who", pa.string(), nullable=False)]))),
    ]
)


def grants(offsets: list[int], who: list[str | None], valid: list[bool]) -> bytes:
    """A stream of ``grants`` lists over ``who`` (a list slot not ``valid`` is null, whatever
    values its offsets span)."""
    kind = GRANTS.field("grants").type
    values = pa.StructArray.from_arrays([pa.array(who, pa.string())], fields=list(kind.value_type))
    lists = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), values, kind, mask=pa.array([not v for v in valid])
    )
    ids = pa.array(range(len(valid)), pa.int64())
    return stream(pa.Table.from_arrays([ids, lists], schema=GRANTS))


def test_a_null_in_a_required_field_of_a_list_of_structs_is_named_unless_a_null_list_hides_it(
) -> None:
    # A null list (and one with no values) holds nothing to check, though its offsets span a
    # null child; a list that holds it is refused, naming the path.
    hidden = grants([0, 1, 1, 2], ["a", None], [True, True, False])
    assert stream_to_table(hidden, GRANTS, 10).column("grants").to_pylist() == [
        [{"who": "a"}], [], None,
    ]  # fmt: skip
    everything_null = grants([0, 1, 2], [None, None], [False, False])
    assert stream_to_table(everything_null, GRANTS, 10).column("grants").null_count == 2
    with pytest.raises(BadInputError) as caught:
        stream_to_table(grants([0, 1, 2], ["a", None], [True, True]), GRANTS, 10)
    assert caught.value.details["field"] == "grants[].who", caught.value.message


def test_a_table_answered_again_is_encoded_once_while_it_lives() -> None:
    streams = EncodedStreams()
    table = pa.table({"id": pa.array(["a", "b"]), "n": pa.array([1, 2], pa.uint32())})
    first = streams.encoded(table)
    assert first == b"".join(stream_chunks(table))
    assert streams.encoded(table) is first and len(streams) == 1
    assert pa.ipc.open_stream(first).read_all().equals(table)
    del table
    gc.collect()
    assert len(streams) == 0  # the stream goes with its table
