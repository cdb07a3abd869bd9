"""Request budgets: multi-ops planned by bytes (pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.consensus import SetData
from catalog.consensus.budget import (
    DEFAULT_JUTE_MAXBUFFER,
    JUTE_MAXBUFFER_ENV,
    plan_chunks,
    request_budget,
    request_bytes,
)
from catalog.errors import BadInputError, TransactionTooLargeError


def path(key: str) -> str:
    return f"/catalog-upgrade/env/{key}"


@given(sizes=st.lists(st.integers(0, 40_000), max_size=80), budget=st.integers(50_000, 200_000))
def test_chunks_keep_order_and_stay_under_budget(sizes: list[int], budget: int) -> None:
    ops = [SetData(f"shards/s{i}", b"x" * size, 0) for i, size in enumerate(sizes)]
    chunks = plan_chunks(ops, path, budget, fixed=100, max_ops=7)
    assert [op for chunk in chunks for op in chunk] == ops
    for chunk in chunks:
        assert 0 < len(chunk) <= 7
        assert request_bytes(chunk, path) + 100 <= budget


def test_an_op_that_cannot_fit_alone_names_its_key_and_size() -> None:
    ops = [SetData("shards/small", b"x", 0), SetData("shards/huge", b"x" * 2_000_000, 0)]
    with pytest.raises(TransactionTooLargeError) as caught:
        plan_chunks(ops, path, request_budget({}))
    assert caught.value.details["key"] == "shards/huge"
    assert caught.value.details["size"] > 2_000_000


def test_budget_follows_the_servers_jute_maxbuffer() -> None:
    assert request_budget({}) < DEFAULT_JUTE_MAXBUFFER
    assert request_budget({JUTE_MAXBUFFER_ENV: "4194304"}) > 3_000_000
    with pytest.raises(BadInputError) as caught:
        request_budget({JUTE_MAXBUFFER_ENV: "1MB"})
    assert caught.value.details["variable"] == JUTE_MAXBUFFER_ENV
