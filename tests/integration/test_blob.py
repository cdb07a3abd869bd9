"""catalog.blob: atomic Parquet and byte blobs over pyarrow.fs, with corruption detection."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.blob import TEMP_MARKER, BlobStore
from catalog.blob.s3 import GIVE_UP_SECONDS, STALL_TIMEOUT
from catalog.errors import BadInputError, BlobError, BlobUnreachableError, CorruptBlobError

pytestmark = pytest.mark.integration

KEY = "shards/s1/0001.parquet"


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore.from_uri(str(tmp_path / "blobs"))


def table(rows: int = 1000) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"name-{i}" for i in range(rows)]),
            "_ts": pa.array([7] * rows, pa.uint64()),
        }
    )


def test_plain_path_is_created_and_round_trips(tmp_path: Path) -> None:
    """A plain path becomes a local directory; a batch reads back identical."""
    store = BlobStore.from_uri(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()
    store.put_batch(KEY, table())
    assert store.get_batch(KEY).equals(table())
    assert store.uri == str(tmp_path / "a" / "b")


def test_file_uri_works(tmp_path: Path) -> None:
    """A file:// URI goes through pyarrow's FileSystem.from_uri."""
    store = BlobStore.from_uri((tmp_path / "u").as_uri())
    store.put_batch(KEY, table(3))
    assert store.get_batch(KEY).num_rows == 3
    assert (tmp_path / "u" / KEY).is_file()


def test_unusable_uri_is_bad_input() -> None:
    """A URI pyarrow cannot open is a BadInputError naming the URI."""
    with pytest.raises(BadInputError) as info:
        BlobStore.from_uri("nosuchscheme://bucket/x")
    assert info.value.details["uri"] == "nosuchscheme://bucket/x"


def test_invalid_key_is_refused(store: BlobStore) -> None:
    """Keys that would escape the root are refused."""
    with pytest.raises(BadInputError):
        store.put_bytes("../outside", b"x")


def test_write_leaves_no_temporary_file(store: BlobStore, tmp_path: Path) -> None:
    """After a write only the final file exists (the temporary name was renamed away)."""
    store.put_batch(KEY, table())
    files = [p.name for p in (tmp_path / "blobs" / "shards" / "s1").iterdir()]
    assert files == ["0001.parquet"]
    assert store.list_temp("shards") == []


def test_failed_write_publishes_nothing(store: BlobStore) -> None:
    """A write that fails half-way leaves neither the key nor a temporary file."""
    unwritable = pa.table(
        {"x": pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval())}
    )
    with pytest.raises(pa.ArrowNotImplementedError):
        store.put_batch(KEY, unwritable)
    assert not store.exists(KEY)
    assert store.list_temp("") == []


def test_bytes_round_trip_list_and_delete(store: BlobStore) -> None:
    """put_bytes/get_bytes round-trip; list is sorted, hides temporaries; delete is idempotent."""
    store.put_bytes("shards/s1/rollup-a.json", b'{"a":1}')
    store.put_batch(KEY, table(2))
    (Path(store.root) / "shards" / "s1" / f".x{TEMP_MARKER}123").write_bytes(b"partial")
    assert store.get_bytes("shards/s1/rollup-a.json") == b'{"a":1}'
    assert store.list("shards") == [KEY, "shards/s1/rollup-a.json"]
    assert [i.key for i in store.list_temp("shards")] == [f"shards/s1/.x{TEMP_MARKER}123"]
    store.delete(KEY)
    store.delete(KEY)
    assert store.list("shards/s1") == ["shards/s1/rollup-a.json"]
    store.delete_prefix("shards/s1")
    store.delete_prefix("shards/s1")
    assert store.list("") == []


def test_missing_blob_is_reported_with_its_key(store: BlobStore) -> None:
    """Reading a missing batch or byte blob raises CorruptBlobError (reason missing) naming it."""
    with pytest.raises(CorruptBlobError) as info:
        store.get_batch(KEY)
    assert info.value.details["key"] == KEY
    assert info.value.details["reason"] == "missing"
    with pytest.raises(CorruptBlobError):
        store.get_bytes("shards/s1/none.json")


def test_truncated_parquet_is_detected(store: BlobStore) -> None:
    """A partial file (cut in half) is CorruptBlobError with reason corrupt and the key."""
    store.put_batch(KEY, table())
    path = Path(store.path(KEY))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptBlobError) as info:
        store.get_batch(KEY)
    assert info.value.details == {"key": KEY, "uri": store.uri, "reason": "corrupt"}
    assert isinstance(info.value, BlobError)


def test_garbage_file_is_detected(store: BlobStore) -> None:
    """A file that is not Parquet at all is detected."""
    store.put_bytes(KEY, b"definitely not parquet")
    with pytest.raises(CorruptBlobError) as info:
        store.get_batch(KEY)
    assert info.value.details["reason"] == "corrupt"


def test_flipped_page_bytes_are_caught_by_checksums(store: BlobStore) -> None:
    """A flipped byte inside a data page fails the page checksum, not silently."""
    store.put_batch(KEY, table(5000))
    path = Path(store.path(KEY))
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptBlobError) as info:
        store.get_batch(KEY)
    assert info.value.details["key"] == KEY


def test_row_count_mismatch_is_detected(store: BlobStore) -> None:
    """A valid file whose row count differs from the recorded one is refused."""
    store.put_batch(KEY, table(10))
    with pytest.raises(CorruptBlobError) as info:
        store.get_batch(KEY, expected_rows=11)
    assert info.value.details["reason"] == "row-count"


def test_get_batches_reads_many_and_names_the_corrupt_one(store: BlobStore) -> None:
    """get_batches reads files together; a corrupt one is named by the per-file fallback."""
    keys = [f"shards/s1/{i}.parquet" for i in range(4)]
    for key in keys:
        store.put_batch(key, table(10))
    assert store.get_batches(keys, expected_rows=[10] * 4).num_rows == 40
    Path(store.path(keys[2])).write_bytes(b"PAR1 broken")
    with pytest.raises(CorruptBlobError) as info:
        store.get_batches(keys, expected_rows=[10] * 4)
    assert info.value.details["key"] == keys[2]


@pytest.fixture
def stalling_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An endpoint that accepts connections and reads requests but never answers (a store
    that took a write it cannot place, as SeaweedFS does before its volumes register)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "stall")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "stall")
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)
            threading.Thread(target=_drain, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for connection in held:
        connection.close()


def _drain(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while connection.recv(65536):
            pass


@pytest.mark.quiet
def test_a_store_that_accepts_and_never_answers_fails_within_the_give_up_bound(
    stalling_store: str,
) -> None:
    """A write and a read on a stalled store fail as unreachable (an outage: the sidecar
    answers 503 with Retry-After), each within GIVE_UP_SECONDS, never hanging."""
    store = BlobStore.from_uri(f"s3://bucket/prefix?endpoint_override={stalling_store}&scheme=http")
    for doing, operation in (
        ("write", lambda: store.put_batch(KEY, table(10))),
        ("read", lambda: store.get_bytes(KEY)),
    ):
        started = time.monotonic()
        with pytest.raises(BlobUnreachableError):
            operation()
        took = time.monotonic() - started
        print(f"stalled {doing} failed after {took:.1f} s")
        assert STALL_TIMEOUT <= took <= GIVE_UP_SECONDS, (doing, took)
