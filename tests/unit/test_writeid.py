"""The write id's format has one home (catalog.shard.writeid): made, taken apart, made again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from catalog.shard import writeid


@given(st.text(min_size=1, max_size=255), st.binary(max_size=64))
def test_a_keyed_id_comes_apart_and_back_together(key: str, body: bytes) -> None:
    made = writeid.keyed(key, body)
    assert writeid.is_keyed(made)
    assert writeid.key_prefix(made) == writeid.prefix_of_key(key)
    assert writeid.key_digest(made) == writeid.key_digest(writeid.prefix_of_key(key))
    assert writeid.keyed_id(writeid.key_prefix(made), writeid.body_digest(made)) == made
    assert writeid.keyed(key, body + b"x") != made  # another body: another append


def test_a_fresh_id_is_never_keyed() -> None:
    assert not writeid.is_keyed(writeid.fresh())
    assert not writeid.is_keyed("k" + "0" * 31) and not writeid.is_keyed("K" + "0" * 32)
