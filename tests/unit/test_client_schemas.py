"""The client reads a collection's Arrow schema from the form GET /collections lists, and
sends a request id each call."""

from __future__ import annotations

import pyarrow as pa

from catalog.schema.fingerprints import schema_json
from catalog_client.requestids import new_request_id, usable_request_id
from catalog_client.schemas import arrow_schema

#: A field of every kind the canonical form writes.
EVERY_KIND = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("n", pa.uint32()),
    pa.field("flag", pa.bool_()),
    pa.field("half", pa.float16()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("local", pa.timestamp("ns")),
    pa.field("t", pa.time64("ns")),
    pa.field("t32", pa.time32("ms")),
    pa.field("took", pa.duration("s")),
    pa.field("price", pa.decimal128(12, 3)),
    pa.field("big", pa.decimal256(40, 2)),
    pa.field("digest", pa.binary(32)),
    pa.field("day", pa.date32()),
    pa.field("text", pa.large_string()),
    pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
    pa.field("many", pa.large_list(pa.int64())),
    pa.field("xyz", pa.list_(pa.float64(), 3)),
    pa.field("attrs", pa.map_(pa.string(), pa.int32())),
    pa.field("who", pa.struct([pa.field("name", pa.string(), nullable=False),
                               pa.field("roles", pa.list_(pa.string()))])),
    pa.field("kind", pa.dictionary(pa.int8(), pa.string())),
])  # fmt: skip


def test_every_kind_reads_back_as_the_schema_the_release_holds() -> None:
    assert arrow_schema(schema_json(EVERY_KIND)) == EVERY_KIND


def test_a_request_id_is_taken_when_usable_and_made_otherwise() -> None:
    assert usable_request_id("call-42.a:b_c") == "call-42.a:b_c"
    made = [usable_request_id(bad) for bad in (None, "", "x" * 129, "new\nline", "é")]
    assert all(len(r) == 32 and r.isalnum() for r in made)
    assert new_request_id() != new_request_id()
