"""A state's batch listing keeps its JSON text as appends extend it: the body a commit writes is
byte for byte what encoding every entry again writes, whatever chain of listings (decoded or not,
read from JSON or built by appends) led to it."""

from __future__ import annotations

import json

import attrs
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from catalog.consensus import encode_json
from catalog.schema import evolve
from catalog.shard.listing import BatchListing, BatchRef
from catalog.shard.state import SPLIT_FORMAT, ShardState

SCHEMA = pa.schema([pa.field("id", pa.int64())])
REF = st.builds(
    BatchRef,
    st.text("0123456789abcdef", min_size=1, max_size=32),
    st.integers(0, 3),
    st.integers(1, 10**9),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    ordered=st.booleans(),
    consolidated=st.booleans(),
    spark_types=st.booleans(),
)


@given(
    first=st.lists(REF, max_size=5),
    start=st.sampled_from(["tuple", "read", "decoded"]),
    appends=st.lists(st.tuples(st.lists(REF, max_size=3), st.booleans(), st.booleans())),
)
def test_an_extended_listing_encodes_as_its_entries_do(
    first: list[BatchRef],
    start: str,
    appends: list[tuple[list[BatchRef], bool, bool]],
) -> None:
    entries = json.loads(json.dumps([r.to_json() for r in first]))
    batches = {
        "tuple": tuple(first),
        "read": BatchListing(entries),
        "decoded": BatchListing(entries, tuple(first)),
    }[start]
    expected = list(first)
    state = ShardState(shard_id="s", schemas=(evolve(SCHEMA, SCHEMA),), batches=batches)
    for refs, encode, decode in appends:
        if encode:  # the text is made on the way, or only at the end
            BatchListing.encoded(state.batches)
        if decode:  # something read the entries on the way
            list(state.batches)
        state = attrs.evolve(
            state, batches=BatchListing.extended(state.batches, refs), upper=state.upper + 1
        )
        expected += refs
    assert list(state.batches) == expected
    body = {
        "format": SPLIT_FORMAT,
        "batches": [r.to_json() for r in expected],
        "rollups": [],
        "upper": state.upper,
        "since": 0,
        "writes": state.writes.to_json(),
        "link": 0,
        "schemas": 1,
    }
    assert state.encode_body() == encode_json(body)
