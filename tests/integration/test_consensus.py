"""catalog.consensus against a real ZooKeeper: CAS, transactions, fencing, retries."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadArgumentsError, NoNodeError, UnimplementedError

from catalog.consensus import (
    MAX_VALUE_BYTES,
    Check,
    Consensus,
    Create,
    Fence,
    SetData,
    decode_json,
    encode_json,
    env_root,
)
from catalog.consensus.multiread import PATHS_PER_REQUEST, MultiReader
from catalog.errors import (
    BadInputError,
    ConnectionLostError,
    ConsensusError,
    FencedError,
    VersionMismatchError,
)
from catalog.retry import CasRetry
from support.zookeeper import ZkEnv, kazoo_client

pytestmark = pytest.mark.integration


@pytest.fixture
def store(zk_client: KazooClient, zk_env: ZkEnv) -> Iterator[Consensus]:
    consensus = Consensus(zk_client, zk_env.root)
    consensus.ensure()
    yield consensus


def test_cas_create_then_set_with_version(store: Consensus) -> None:
    """A CAS names the version it read; the new version is returned."""
    assert store.cas("k", b"a", -1) == 0
    assert store.cas("k", b"b", 0) == 1
    found = store.get("k")
    assert found is not None and found.value == b"b" and found.version == 1


def test_cas_mismatch_carries_current_value(store: Consensus) -> None:
    """Losing a race raises VersionMismatchError with the winner's value and version."""
    store.cas("k", b"a", -1)
    store.cas("k", b"winner", 0)
    with pytest.raises(VersionMismatchError) as info:
        store.cas("k", b"loser", 0)
    assert info.value.key == "k"
    assert info.value.version == 1
    assert info.value.current is not None and info.value.current.value == b"winner"


def test_create_of_existing_key_is_a_mismatch(store: Consensus) -> None:
    """Two bootstraps racing: the second create loses as a version mismatch, not a crash."""
    store.cas("k", b"first", -1)
    with pytest.raises(VersionMismatchError):
        store.cas("k", b"second", -1)


def test_transaction_is_all_or_nothing(store: Consensus) -> None:
    """One failing op rolls the whole multi-op back."""
    store.cas("a", b"1", -1)
    with pytest.raises(VersionMismatchError) as info:
        store.commit([SetData("a", b"2", 0), Create("b", b"x"), Check("a", 7)])
    assert info.value.key == "a"
    assert store.get("a").value == b"1"  # type: ignore[union-attr]
    assert store.get("b") is None


def test_fenced_write_is_rejected_and_not_retryable(store: Consensus) -> None:
    """A writer holding an old epoch version is fenced, even if its own CAS would match."""
    store.cas("epoch", encode_json({"epoch": 1}), -1)
    old = Fence("epoch", 0)
    store.cas("data", b"v0", -1, fence=old)
    store.cas("epoch", encode_json({"epoch": 2}), 0)  # a new leader took over
    with pytest.raises(FencedError):
        store.cas("data", b"zombie", 0, fence=old)
    assert store.get("data").value == b"v0"  # type: ignore[union-attr]
    attempts = []

    def attempt() -> None:
        attempts.append(1)
        store.cas("data", b"zombie", 0, fence=old)

    with pytest.raises(FencedError):
        CasRetry()(attempt)
    assert len(attempts) == 1


def test_oversized_value_is_refused_before_writing(store: Consensus) -> None:
    """Values above the limit never reach ZooKeeper."""
    with pytest.raises(ConsensusError) as info:
        store.cas("big", b"x" * (MAX_VALUE_BYTES + 1), -1)
    assert info.value.details["key"] == "big"
    assert store.get("big") is None


def test_get_many_reads_every_key_in_few_requests(store: Consensus) -> None:
    """A batched read returns every key in order, None for missing ones, across several
    multiRead requests, each with its own version and times."""
    count = 2 * PATHS_PER_REQUEST + 7
    store.commit_chunked([Create(f"k{i}", str(i).encode()) for i in range(count)])
    store.cas("k7", b"seven", 0)
    store.commit([Create("empty")])
    keys = [f"k{i}" for i in range(count + 2)] + ["empty"]
    found = store.get_many(keys)
    assert list(found) == keys
    values = {k: None if v is None else v.value for k, v in found.items()}
    assert all(values[f"k{i}"] == str(i).encode() for i in range(count) if i != 7)
    seven = found["k7"]
    assert seven is not None and (seven.value, seven.version) == (b"seven", 1)
    assert seven.modified >= seven.created > 0
    assert found[f"k{count}"] is None and found[f"k{count + 1}"] is None
    assert found["empty"] is not None and found["empty"].value == b""


def test_a_batched_read_under_a_chroot_reads_the_chrooted_nodes(zk_env: ZkEnv) -> None:
    """A client whose connection string names a chroot (``HOST:PORT/PATH``) reads the nodes
    under it, in one multiRead as in pipelined reads."""
    outside = kazoo_client(zk_env.hosts)
    outside.start(timeout=15)
    outside.ensure_path("/chrooted")
    client = kazoo_client(f"{zk_env.hosts}/chrooted")
    client.start(timeout=15)
    try:
        store = Consensus(client, zk_env.root)
        store.ensure()
        store.commit([Create("inside", b"v")])
        assert outside.get(f"/chrooted{zk_env.root}/inside")[0] == b"v"
        found = store.get_many(["inside", "absent"])
        assert found["inside"] is not None and found["inside"].value == b"v"
        assert found["absent"] is None
    finally:
        for each in (client, outside):
            each.stop()
            each.close()


def test_a_server_without_multi_read_is_read_key_by_key(
    zk_env: ZkEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers multiRead as unimplemented (before ZooKeeper 3.6) is read with
    pipelined reads from then on, with the same answers."""
    client = kazoo_client(zk_env.hosts)
    client.start(timeout=15)
    try:
        store = Consensus(client, zk_env.root)
        store.ensure()
        store.commit([Create(f"old{i}", b"v") for i in range(3)])
        sent = client._call
        refused = []

        def old_server(request: Any, answer: Any) -> Any:
            if request.type == 22:  # what a 3.5 server answers to multiRead
                refused.append(request)
                answer.set_exception(UnimplementedError())
                return None
            return sent(request, answer)

        monkeypatch.setattr(client, "_call", old_server)
        keys = ["old0", "old1", "old2", "none"]
        for _ in range(2):
            found = store.get_many(keys)
            assert [None if f is None else f.value for f in found.values()] == [b"v"] * 3 + [None]
        assert len(refused) == 1  # asked once, then never again
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("multi_read", [True, False], ids=["multi-read", "before-3.6"])
def test_a_read_batch_answers_each_read_as_kazoo_would(
    zk_env: ZkEnv, monkeypatch: pytest.MonkeyPatch, multi_read: bool
) -> None:
    """Data and children read together, a missing znode among them: each slot answers what
    kazoo's own call would (NoNodeError included), in one request on a 3.6 server and read by
    read on an older one; reads queued after a flush go in the next."""
    client = kazoo_client(zk_env.hosts)
    client.start(timeout=15)
    try:
        root = zk_env.root
        for i in range(3):
            client.create(f"{root}/batch/p{i}", str(i).encode(), makepath=True)
        sent = client._call
        calls: list[int] = []

        def counted(request: Any, answer: Any) -> Any:
            calls.append(request.type)
            if request.type == 22 and not multi_read:
                answer.set_exception(UnimplementedError())
                return None
            return sent(request, answer)

        monkeypatch.setattr(client, "_call", counted)
        batch = MultiReader(client).batch()
        data = [batch.get_async(f"{root}/batch/p{i}") for i in range(3)]
        children = batch.get_children_async(f"{root}/batch")
        missing = batch.get_async(f"{root}/batch/none")
        no_children = batch.get_children_async(f"{root}/none")
        assert [d.get(timeout=10)[0] for d in data] == [b"0", b"1", b"2"]
        assert data[1].get()[1].version == 0
        assert sorted(children.get(timeout=10)) == ["p0", "p1", "p2"]
        for absent in (missing, no_children):
            with pytest.raises(NoNodeError):
                absent.get(timeout=10)
        later = batch.get_async(f"{root}/batch/p2")
        assert later.get(timeout=10)[0] == b"2"
        if multi_read:
            assert calls == [22, 22], calls  # one request a round
        else:
            assert 22 in calls and calls.count(4) >= 4, calls  # then read by read
    finally:
        client.stop()
        client.close()


def test_threads_racing_cas_lose_no_increment(zk_env: ZkEnv, store: Consensus) -> None:
    """8 threads incrementing one counter through CasRetry: no lost or duplicated update."""
    store.cas("counter", encode_json(0), -1)
    per_thread = 25

    def worker() -> None:
        client = kazoo_client(zk_env.hosts)
        client.start(timeout=15)
        mine = Consensus(client, zk_env.root)
        retry = CasRetry(max_attempts=500)

        def increment() -> None:
            found = mine.get("counter")
            assert found is not None
            mine.cas("counter", encode_json(decode_json(found.value) + 1), found.version)

        for _ in range(per_thread):
            retry(increment)
        client.stop()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    found = store.get("counter")
    assert found is not None and decode_json(found.value) == 8 * per_thread


def test_cas_retry_gives_up_after_max_attempts() -> None:
    """A conflict that never resolves surfaces after max_attempts, counted in retries."""
    retry = CasRetry(max_attempts=3, sleep=lambda _s: None)

    def always_conflict() -> None:
        raise VersionMismatchError("lost", key="k")

    with pytest.raises(VersionMismatchError):
        retry(always_conflict)
    assert retry.retries == 3


def test_env_root_rejects_bad_names() -> None:
    """An environment name with a slash would escape its root."""
    assert env_root("prod") == "/catalog-upgrade/prod"
    with pytest.raises(BadInputError):
        env_root("a/b")


@pytest.mark.parametrize(
    "name", ["prod east", "prüfung", "生产", "x\uf900", "a\x1f", "a\x7f", "a\x9f", "a\ue000",
             "a\ufff0", "\U0001f680"],
)  # fmt: skip
def test_env_root_refuses_exactly_the_names_zookeeper_refuses(
    zk_client: KazooClient, zk_env: ZkEnv, name: str
) -> None:
    """The environment names refused as bad input are the ones the real server refuses in a
    path (so none is refused that ZooKeeper takes, and none reaches ZooKeeper to fail there)."""
    try:
        env_root(name)
        refused = False
    except BadInputError:
        refused = True
    zk_client.ensure_path(zk_env.root)
    try:
        zk_client.create(f"{zk_env.root}/{name}")
        taken = True
    except BadArgumentsError:
        taken = False
    assert refused == (not taken), (name, refused, taken)


def test_a_lost_answer_failpoint_lets_the_write_land(store: Consensus) -> None:
    """After the Nth fenced write lands, the lost-answer failpoint raises the unknown outcome
    a dropped connection gives; the write is durable all the same (and only once)."""
    from orchestrator.failpoints import LOSE_ANSWER_AFTER_WRITE_ENV, LostAnswerFailpoint

    failpoint = LostAnswerFailpoint.from_environment({LOSE_ANSWER_AFTER_WRITE_ENV: "2"})
    assert failpoint is not None
    epoch = store.cas("epoch", b"1", -1)
    lossy = attrs.evolve(store, after_fenced_write=failpoint)
    fence = Fence("epoch", epoch)
    lossy.commit([Create("a", b"1")], fence=fence)
    with pytest.raises(ConnectionLostError) as lost:
        lossy.commit([Create("b", b"2")], fence=fence)
    assert lost.value.details["keys"] == ["b"]
    found = store.get("b")
    assert found is not None and found.value == b"2"  # it landed
    lossy.commit([Create("c", b"3")], fence=fence)  # only the chosen write loses its answer
    assert LostAnswerFailpoint.from_environment({}) is None
