"""The key log's folding on a real (local) blob store: tiers merge, marks expire and raise the
horizon, lookups find the newest mark of a key."""

from __future__ import annotations

from pathlib import Path

from catalog.blob import BlobStore
from catalog.shard import KeyLog, WriteMark
from catalog.shard.keylog import FANOUT
from catalog.shard.writeid import is_keyed


def keyed(n: int, body: int = 0) -> WriteMark:
    return WriteMark(f"k{n:016x}{body:016x}", n, n + 1, 1)


def test_segments_merge_by_tier_and_every_mark_stays_findable(tmp_path: Path) -> None:
    log = KeyLog(BlobStore.from_uri(str(tmp_path)), "s1", retention=3600)
    segments: tuple = ()
    for chunk in range(FANOUT * FANOUT + 3):
        marks = [keyed(chunk * 4 + i) for i in range(4)]
        segments, expired = log.fold(segments, marks, now=1000.0 + chunk)
        assert expired == 0
    tiers = sorted(s.tier for s in segments)
    assert tiers == [0, 0, 0, 2], tiers  # 64 tier-0 flushes became one tier-2 segment
    for n in (0, 77, 4 * (FANOUT * FANOUT + 3) - 1):
        found = log.find(segments, f"k{n:016x}")
        assert found is not None and found.id == keyed(n).id and found.lower == n
    assert log.find(segments, f"k{10**9:016x}") is None


def test_expired_marks_leave_at_a_merge_and_raise_the_horizon(tmp_path: Path) -> None:
    log = KeyLog(BlobStore.from_uri(str(tmp_path)), "s1", retention=100)
    segments, _ = log.fold((), [keyed(1)], now=0.0)
    segments, expired = log.fold(segments, [keyed(2)], now=50.0)
    assert expired == 0 and len(segments) == 2
    segments, expired = log.fold(segments, [keyed(3)], now=120.0)
    assert expired == 2  # the segment of mark 1 (upper 2) is past the retention
    assert log.find(segments, f"k{1:016x}") is None
    assert log.find(segments, f"k{2:016x}") is not None


def test_keyed_ids_are_k_and_32_hex_digits() -> None:
    assert is_keyed(keyed(1).id) and is_keyed("k" + "0123456789abcdef" * 2)
    assert not is_keyed("0123abcd" * 4)
    for near in ("k" + "0" * 31, "k" + "0" * 33, "K" + "0" * 32, "k" + "A" * 32,
                 "k" + "0" * 31 + "g", "k" + "0" * 31 + "\n", "x" + "0" * 32):  # fmt: skip
        assert not is_keyed(near), near
