"""orchestrator.election against a real ZooKeeper: one leader, fencing, session faults, promote."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from click.testing import CliRunner, Result
from kazoo.client import KazooClient
from kazoo.protocol.connection import _CONNECTION_DROP
from kazoo.protocol.states import KazooState

from catalog.consensus import Consensus, SetData, encode_json
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
    CatalogState,
    CollectionRef,
    read_catalog,
)
from catalog.errors import (
    EXIT_BAD_INPUT,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNEXPECTED,
    BadInputError,
    CatalogError,
    ConnectionLostError,
    FencedError,
    GenerationTakenError,
    MigrationRefusedError,
)
from orchestrator.cli import main
from orchestrator.election import (
    ElectionEvent,
    LeaderElection,
    Leadership,
    fenced_write_guard,
    promote,
    read_epoch,
    read_promotion,
    wait_promoted,
)
from orchestrator.events import read_events
from orchestrator.process_node import ProcessNode
from support.zookeeper import ZkEnv, expire_session, kazoo_client

pytestmark = pytest.mark.integration

ClientFactory = Callable[[], KazooClient]


@attrs.define
class Candidate:
    """An election plus the events its on_change heard, on its own ZooKeeper session."""

    election: LeaderElection
    events: queue.Queue[ElectionEvent]
    client: KazooClient

    def wait_for(self, kind: str, timeout: float = 10.0) -> ElectionEvent:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                break
            if event.kind == kind:
                return event
        raise AssertionError(f"no {kind} event within {timeout} s")


@pytest.fixture
def new_client(zk_env: ZkEnv) -> Iterator[ClientFactory]:
    """Connected clients, each with its own session (a process each), closed afterwards."""
    made: list[KazooClient] = []

    def make() -> KazooClient:
        client = kazoo_client(zk_env.hosts, timeout=6)
        client.start(timeout=15)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


@pytest.fixture
def new_candidate(new_client: ClientFactory, zk_env: ZkEnv) -> Iterator[Callable[..., Candidate]]:
    """Started elections (a process each), stopped afterwards."""
    made: list[Candidate] = []

    def make(
        process_id: str,
        generation: int,
        on_change: Callable[[ElectionEvent], None] | None = None,
        release: str = "0.10.0",
    ) -> Candidate:
        client = new_client()
        events: queue.Queue[ElectionEvent] = queue.Queue()

        def heard(event: ElectionEvent) -> None:
            events.put(event)
            if on_change is not None:
                on_change(event)

        election = LeaderElection(
            Consensus(client, zk_env.root), process_id, generation, release=release,
            on_change=heard
        )
        election.start()
        candidate = Candidate(election=election, events=events, client=client)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.election.stop()


@pytest.fixture
def store(zk_client: KazooClient, zk_env: ZkEnv) -> Consensus:
    consensus = Consensus(zk_client, zk_env.root)
    consensus.ensure()
    return consensus


def write_catalog(store: Consensus, generation: int, version: str = "0.10.0") -> CatalogState:
    state = CatalogState(
        version=version,
        deploy_generation=generation,
        blob_uri="file:///tmp/blobs",
        collections={
            "s1": CollectionRef(global_id="s1", name="mz.t1", shard_id="sh-1", fingerprint="f1")
        },
    )
    store.cas(CATALOG_KEY, state.encode(), -1)
    return state


def set_promotion(store: Consensus, generation: int) -> None:
    found = store.get(PROMOTION_KEY)
    value = encode_json({"deploy_generation": generation})
    store.cas(PROMOTION_KEY, value, -1 if found is None else found.version)


def wait_connected(client: KazooClient, timeout: float = 10.0) -> None:
    """Block until ``client`` has a live session again (after an expiry it makes a new one)."""
    connected = threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.CONNECTED:
            connected.set()
            return True
        return False

    client.add_listener(listener)
    if client.connected:
        connected.set()
    assert connected.wait(timeout), "client did not reconnect"
    client.remove_listener(listener)


def take_over_concurrently(candidates: list[Candidate]) -> list[Leadership | None]:
    barrier = threading.Barrier(len(candidates))
    results: list[Leadership | None] = [None] * len(candidates)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = candidates[index].election.try_take_over(bootstrap=False)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(candidates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


# --- election ---------------------------------------------------------------------------------


def test_a_generation_leads_for_one_release_and_the_takeover_binds_it(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """The takeover that moves the catalog to a generation binds it to the taker's release; a
    candidate of another release at that generation is refused inside the takeover (the
    catalog it read is checked by the same commit), and nothing is written."""
    write_catalog(store, generation=1, version="0.10.0")
    set_promotion(store, 1)
    mistaken = new_candidate("p-011", 1, release="0.11.0")
    before = store.get(CATALOG_KEY)
    with pytest.raises(GenerationTakenError, match=r"runs release 0\.10\.0, not 0\.11\.0"):
        mistaken.election.try_take_over(bootstrap=False)
    after = store.get(CATALOG_KEY)
    assert before is not None and after is not None and after.version == before.version
    assert read_epoch(store) is None
    set_promotion(store, 2)
    first = new_candidate("p-2", 2, release="0.11.0")
    assert first.election.try_take_over(bootstrap=False) is not None
    found = read_catalog(store)
    assert found is not None
    assert (found[0].deploy_generation, found[0].generation_release) == (2, "0.11.0")
    first.election.step_down()
    other = new_candidate("p-2b", 2, release="0.12.0")
    with pytest.raises(GenerationTakenError, match="--deploy-generation 3"):
        other.election.try_take_over(bootstrap=False)
    other.election.stop()  # a refused process exits (the sidecar, exit 2)
    same = new_candidate("p-2c", 2, release="0.11.0")
    assert same.election.try_take_over(bootstrap=False) is not None



def test_exactly_one_leader_among_four_candidates(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """Four candidates of the promoted generation race; only the lowest candidate leads."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    candidates = [new_candidate(f"p{i}", 2) for i in range(4)]
    results = take_over_concurrently(candidates)
    leaders = [r for r in results if r is not None]
    assert len(leaders) == 1
    assert results[0] is not None  # p0 joined first: the lowest sequence number
    assert [c.election.is_leader for c in candidates] == [True, False, False, False]
    epoch = read_epoch(store)
    assert epoch is not None and epoch.epoch == 1 and epoch.leader == "p0"
    assert leaders[0].fence.version == epoch.version
    assert epoch.session == f"0x{candidates[0].client.client_id[0]:x}"


def test_candidates_of_other_generations_never_lead(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """With generation 2 promoted, a generation-3 candidate waits; a generation-1 one is fenced."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    older = new_candidate("old", 1)
    newer = new_candidate("new", 3)
    promoted = new_candidate("mid", 2)
    assert newer.election.try_take_over(bootstrap=False) is None
    with pytest.raises(FencedError) as info:
        older.election.try_take_over(bootstrap=False)
    assert info.value.details["promotion_target"] == 2
    assert promoted.election.try_take_over(bootstrap=False) is not None
    assert not older.election.is_leader and not newer.election.is_leader


def test_unpromoted_generation_does_not_lead_without_bootstrap(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """No promotion target on a bootstrapped catalog: nobody takes over, nothing is written."""
    write_catalog(store, generation=1)
    candidate = new_candidate("p", 2)
    assert candidate.election.try_take_over(bootstrap=True) is None
    assert read_promotion(store) is None and read_epoch(store) is None


def test_bootstrap_promotes_own_generation_and_takes_over(
    zk_client: KazooClient, zk_env: ZkEnv, new_candidate: Callable[..., Candidate]
) -> None:
    """On an empty environment the first process promotes itself and becomes leader at epoch 1."""
    candidate = new_candidate("first", 4)
    leadership = candidate.election.try_take_over(bootstrap=True)
    assert leadership is not None and leadership.epoch == 1
    assert leadership.fence == leadership.fence.__class__(EPOCH_KEY, 0)
    consensus = Consensus(zk_client, zk_env.root)
    assert read_promotion(consensus) == 4
    assert read_catalog(consensus) is None  # the catalog is the leader migration's to create
    assert [e.kind for e in read_events(consensus)] == ["leader"]


def test_takeover_moves_epoch_and_catalog_generation_together(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """The takeover sets epoch+1 and the catalog generation, bound to the taker's release;
    nothing else in the catalog moves."""
    before = write_catalog(store, generation=1)
    set_promotion(store, 2)
    leadership = new_candidate("p", 2).election.try_take_over(bootstrap=False)
    assert leadership is not None
    found = read_catalog(store)
    assert found is not None
    after, version = found
    moved = attrs.evolve(before, deploy_generation=2, generation_release="0.10.0")
    assert after == moved and version == 1
    epoch = read_epoch(store)
    assert epoch is not None and (epoch.epoch, epoch.deploy_generation) == (1, 2)


def test_takeover_racing_a_catalog_write_changes_nothing_until_retried(
    store: Consensus, new_client: ClientFactory, zk_env: ZkEnv
) -> None:
    """A catalog write between the takeover's read and commit fails the whole transaction.

    The epoch is bumped once, by the retried attempt, and the racing write's content survives.
    """
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    racer = Consensus(new_client(), zk_env.root)
    raced: list[int] = []

    @attrs.define
    class RacedConsensus(Consensus):
        def commit(self, ops, *, fence=None):  # type: ignore[no-untyped-def]
            if not raced and any(getattr(op, "key", "") == EPOCH_KEY for op in ops):
                found = read_catalog(racer)
                assert found is not None
                state, version = found
                moved = attrs.evolve(state, version="0.10.1")
                raced.append(racer.cas(CATALOG_KEY, moved.encode(), version))
                assert read_epoch(racer) is None
            return super().commit(ops, fence=fence)

    client = new_client()
    election = LeaderElection(
        RacedConsensus(client, zk_env.root), "p", 2, release="0.10.1", on_change=lambda _e: None
    )
    election.start()
    try:
        leadership = election.try_take_over(bootstrap=False)
    finally:
        election.stop()
    assert leadership is not None and leadership.epoch == 1 and raced == [1]
    found = read_catalog(store)
    assert found is not None
    assert (found[0].version, found[0].deploy_generation) == ("0.10.1", 2)


# --- fencing and session faults ----------------------------------------------------------------


def test_superseded_leader_write_is_fenced(
    store: Consensus,
    zk_env: ZkEnv,
    new_client: ClientFactory,
    new_candidate: Callable[..., Candidate],
) -> None:
    """A paused leader whose session expired cannot write after the next one took over."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    old = new_candidate("old", 2)
    successor = new_candidate("successor", 2)
    old_leadership = old.election.try_take_over(bootstrap=False)
    assert old_leadership is not None
    expire_session(old.client, zk_env.hosts)
    old.wait_for("leadership_lost")
    new_leadership = successor.election.try_take_over(bootstrap=False)
    assert new_leadership is not None and new_leadership.epoch == 2
    # The paused process wakes up and writes with the fence it still holds, on any session.
    wait_connected(old.client)
    found = read_catalog(store)
    assert found is not None
    stale = attrs.evolve(found[0], version="9.9.9").encode()
    for consensus in (Consensus(old.client, zk_env.root), Consensus(new_client(), zk_env.root)):
        with pytest.raises(FencedError):
            consensus.commit([SetData(CATALOG_KEY, stale, found[1])], fence=old_leadership.fence)
    with pytest.raises(FencedError) as info:
        old.election.leadership_guard()
    assert info.value.details["reason"] == "session_lost"
    found_after = read_catalog(store)
    assert found_after is not None and found_after[0].version == "0.10.0"
    store.commit([SetData(CATALOG_KEY, stale, found[1])], fence=new_leadership.fence)


def test_leader_hears_it_was_superseded_by_a_newer_generation(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """Promoting a newer generation ends the current leader's leadership (it must exit 3)."""
    write_catalog(store, generation=1)
    set_promotion(store, 1)
    leader = new_candidate("g1", 1)
    assert leader.election.try_take_over(bootstrap=False) is not None
    promote(store, 2, requested_by="test", before_deploy=True)
    event = leader.wait_for("superseded")
    assert event.promotion == 2 and not leader.election.is_leader
    with pytest.raises(FencedError):
        leader.election.leadership_guard()
    follower = new_candidate("g2", 2)
    leadership = follower.election.try_take_over(bootstrap=False)
    assert leadership is not None and leadership.epoch == 2


def test_suspended_session_pauses_writes_until_verified(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """On SUSPENDED the guard refuses writes at once; after reconnecting they resume."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    held: list[Leadership] = []
    seen: list[Exception] = []

    def on_change(event: ElectionEvent) -> None:
        # The worker applies the reconnection only after this returns: still suspended here.
        if event.kind == "suspended" and held:
            try:
                held[0].check()
            except ConnectionLostError as exc:
                seen.append(exc)

    leader = new_candidate("p", 2, on_change)
    leadership = leader.election.try_take_over(bootstrap=False)
    assert leadership is not None
    held.append(leadership)
    leader.client._call(_CONNECTION_DROP, leader.client.handler.async_result())
    leader.wait_for("suspended")
    leader.wait_for("resumed")
    assert len(seen) == 1 and isinstance(seen[0], ConnectionLostError)
    assert leader.election.leadership_guard() == leadership
    assert not leader.election.paused
    store.commit([SetData(CATALOG_KEY, b"{}", -1)], fence=leadership.fence)


def test_a_sidecar_leader_stops_writing_within_a_step_once_suspended(
    store: Consensus, new_candidate: Callable[..., Candidate], zk_env: ZkEnv
) -> None:
    """The sidecar's commit path consults the election: on SUSPENDED a fenced write inside a
    step is refused at once (retryable ConnectionLostError, nothing sent), not only between
    steps; once the session is re-verified, writes go through."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    leading: list[LeaderElection] = []
    guarded = attrs.evolve(store, before_fenced_write=fenced_write_guard(
        lambda: leading[0] if leading else None, None
    ))  # fmt: skip
    refused: list[ConnectionLostError] = []
    held: list[Leadership] = []

    def on_change(event: ElectionEvent) -> None:
        if event.kind == "suspended" and held:
            try:
                guarded.commit([SetData(CATALOG_KEY, b"{}", -1)], fence=held[0].fence)
            except ConnectionLostError as exc:
                refused.append(exc)

    leader = new_candidate("p", 2, on_change)
    leadership = leader.election.try_take_over(bootstrap=False)
    assert leadership is not None
    leading.append(leader.election)
    held.append(leadership)
    before = store.get(CATALOG_KEY)
    leader.client._call(_CONNECTION_DROP, leader.client.handler.async_result())
    leader.wait_for("suspended")
    leader.wait_for("resumed")
    assert len(refused) == 1 and "suspended" in refused[0].message
    assert store.get(CATALOG_KEY) == before  # nothing was sent
    guarded.commit([SetData(CATALOG_KEY, b"{}", -1)], fence=leadership.fence)


@pytest.mark.quiet
def test_step_down_hands_over_within_a_second(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """After step_down the next candidate, watching the candidate list, leads within a second."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    leader = new_candidate("first", 2)
    assert leader.election.try_take_over(bootstrap=False) is not None
    took_over = threading.Event()
    holder: list[LeaderElection] = []

    def on_change(event: ElectionEvent) -> None:
        if event.kind == "candidates" and holder and holder[0].try_take_over(bootstrap=False):
            took_over.set()

    successor = new_candidate("second", 2, on_change)
    holder.append(successor.election)
    assert not successor.election.is_leader
    started = time.monotonic()
    leader.election.step_down()
    assert took_over.wait(1.0), "successor did not take over within a second"
    assert time.monotonic() - started < 1.0
    epoch = read_epoch(store)
    assert epoch is not None and (epoch.leader, epoch.epoch) == ("second", 2)
    with pytest.raises(FencedError) as info:
        leader.election.leadership_guard()
    assert info.value.details["reason"] == "stepped_down"


def test_follower_rejoins_after_its_session_expired(
    store: Consensus, zk_env: ZkEnv, new_candidate: Callable[..., Candidate]
) -> None:
    """A follower whose session expired joins again with a fresh candidate node."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    follower = new_candidate("f", 2)
    first = follower.election.candidate
    expire_session(follower.client, zk_env.hosts)
    follower.wait_for("lost")
    follower.wait_for("rejoined")
    assert follower.election.candidate not in (None, first)
    assert follower.election.try_take_over(bootstrap=False) is not None


# --- promote ------------------------------------------------------------------------------------


def run_cli(zk_env: ZkEnv, *args: str) -> Result:
    return CliRunner().invoke(
        main, ["--log-level", "WARNING", *args, "--zk", zk_env.hosts, "--env", zk_env.name]
    )


def test_promote_refuses_a_generation_below_the_catalog(store: Consensus, zk_env: ZkEnv) -> None:
    """promote of a generation below the catalog's exits 3 and names the current generation."""
    write_catalog(store, generation=3)
    result = run_cli(zk_env, "promote", "--deploy-generation", "2")
    assert result.exit_code == EXIT_FENCED, result.output
    with pytest.raises(FencedError) as info:
        promote(store, 2, requested_by="test", before_deploy=True)
    assert info.value.details["catalog_generation"] == 3
    assert read_promotion(store) is None


def test_promote_of_a_generation_below_1_is_bad_input_and_writes_nothing(
    store: Consensus, zk_env: ZkEnv
) -> None:
    """No process runs generation 0 (or below): promoting it, on an empty environment too, is
    refused as bad input (exit 2 / 400) and writes no znode."""
    before = store.client.get_children(store.root) if store.client.exists(store.root) else []
    result = run_cli(zk_env, "promote", "--deploy-generation", "0")
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    for generation in (0, -3):
        with pytest.raises(BadInputError, match=f"cannot promote generation {generation}"):
            promote(store, generation, requested_by="test")
    after = store.client.get_children(store.root) if store.client.exists(store.root) else []
    assert after == before and read_promotion(store) is None


def test_a_promotion_no_process_can_take_is_refused_and_a_mistake_taken_back(
    store: Consensus, zk_env: ZkEnv
) -> None:
    """A generation no process registered is refused (exit 2, nothing written): a typo would
    fence the serving leader with nobody to take over. Asked for on purpose
    (--before-deploy) it is promoted, and until one of its processes takes over, promoting
    the catalog's generation takes it back. Once one took over, the target only moves up."""
    write_catalog(store, generation=1)
    promote(store, 1, requested_by="test", before_deploy=True)
    typo = run_cli(zk_env, "promote", "--deploy-generation", "99", "--register-wait", "0.5")
    assert typo.exit_code == EXIT_REFUSED, typo.output
    assert "no process of generation 99" in typo.output and "--before-deploy" in typo.output
    assert "waiting up to 0.5 s for one to start" in typo.output  # said at once, not after
    assert read_promotion(store) == 1
    assert run_cli(zk_env, "promote", "--deploy-generation", "5", "--before-deploy").exit_code == 0
    assert run_cli(zk_env, "promote", "--deploy-generation", "5").exit_code == EXIT_OK  # idem
    no_four = run_cli(zk_env, "promote", "--deploy-generation", "4", "--register-wait", "0")
    assert no_four.exit_code == EXIT_REFUSED
    assert read_promotion(store) == 5
    assert run_cli(zk_env, "promote", "--deploy-generation", "1").exit_code == EXIT_OK
    assert read_promotion(store) == 1  # taken back: nobody of 5 took over
    write_process(store, "g3", deploy_generation=3, state="ready")
    assert run_cli(zk_env, "promote", "--deploy-generation", "3").exit_code == EXIT_OK
    hand_built_takeover(store, 3, "g3")
    assert run_cli(zk_env, "promote", "--deploy-generation", "1").exit_code == EXIT_FENCED
    assert read_promotion(store) == 3
    events = read_events(store)
    assert [(e.kind, e.fields["deploy_generation"]) for e in events] == [
        ("promoted", 1), ("promoted", 5), ("promoted", 1), ("promoted", 3),
    ]  # fmt: skip


def write_process(store: Consensus, process_id: str, **fields: Any) -> None:
    """Write a process node the way a sidecar does (through the one codec)."""
    key = f"{PROCESSES_KEY}/{process_id}"
    node: dict[str, Any] = {"version": "0.1.0", "mode": "read-only", "state": "starting"}
    node.update(fields)
    value = ProcessNode(id=process_id, **node).encode()
    found = store.get(key)
    if found is None:
        store.ensure(PROCESSES_KEY)
        store.cas(key, value, -1)
    else:
        store.cas(key, value, found.version)


def hand_built_takeover(store: Consensus, generation: int, leader: str) -> None:
    """What a leader's takeover leaves: the epoch naming it and the catalog at its generation."""
    found = read_catalog(store)
    assert found is not None
    store.cas(CATALOG_KEY, attrs.evolve(found[0], deploy_generation=generation).encode(), found[1])
    store.cas(
        EPOCH_KEY,
        encode_json({"epoch": 1, "leader": leader, "deploy_generation": generation}),
        -1,
    )


@pytest.mark.quiet
def test_promote_wait_returns_once_the_leader_serves(store: Consensus, zk_env: ZkEnv) -> None:
    """promote --wait blocks while the leader migrates and returns 0 once it is serving."""
    write_catalog(store, generation=1)
    write_process(store, "leader", deploy_generation=2, state="ready", mode="read-only")
    outcome: list[Result] = []
    thread = threading.Thread(
        target=lambda: outcome.append(
            run_cli(zk_env, "promote", "--deploy-generation", "2", "--wait", "20")
        )
    )
    started = time.monotonic()
    thread.start()
    time.sleep(0.3)  # give the command time to set its watches; the test then acts as leader
    assert read_promotion(store) == 2
    hand_built_takeover(store, 2, "leader")
    write_process(store, "leader", deploy_generation=2, state="migrating", mode="leader")
    time.sleep(0.2)
    assert thread.is_alive()
    write_process(store, "leader", deploy_generation=2, state="serving", mode="leader")
    thread.join(timeout=10)
    assert outcome and outcome[0].exit_code == EXIT_OK, outcome[0].output
    assert time.monotonic() - started < 5


def test_promote_wait_reports_a_refused_migration(store: Consensus) -> None:
    """A leader that failed with a refusal makes the wait raise MigrationRefusedError (exit 4)."""
    write_catalog(store, generation=1)
    promote(store, 2, requested_by="test", before_deploy=True)
    hand_built_takeover(store, 2, "leader")
    refusal = {"error": "PlanError", "message": "no instruction for mz.t1", "exit_code": 4}
    write_process(store, "leader", deploy_generation=2, state="failed", error=refusal)
    with pytest.raises(MigrationRefusedError) as info:
        wait_promoted(store, 2, timeout=5)
    assert info.value.exit_code == EXIT_REFUSED
    assert info.value.details["process_id"] == "leader"


def test_promote_wait_times_out_with_the_reason(store: Consensus, zk_env: ZkEnv) -> None:
    """Nobody of the generation registered: the wait ends with exit 1 and what it last saw."""
    write_catalog(store, generation=1)
    with pytest.raises(CatalogError) as info:
        wait_promoted(store, 2, timeout=0.5)
    assert info.value.details["reason"] == "timeout"
    result = run_cli(
        zk_env, "promote", "--deploy-generation", "2", "--before-deploy", "--wait", "0.5"
    )
    assert result.exit_code == EXIT_UNEXPECTED, result.output
    assert "generation 2" in result.stderr


def test_promote_wait_fails_when_every_process_of_the_generation_failed(store: Consensus) -> None:
    """Before any takeover, a generation whose processes all failed ends the wait at once."""
    write_catalog(store, generation=1)
    promote(store, 2, requested_by="test", before_deploy=True)
    fenced = {"error": "FencedError", "message": "fenced", "exit_code": 3}
    write_process(store, "a", deploy_generation=2, state="fenced", error=fenced)
    write_process(store, "b", deploy_generation=1, state="serving")
    with pytest.raises(FencedError):
        wait_promoted(store, 2, timeout=5)


def test_step_down_then_start_rejoins_at_the_back(
    store: Consensus, new_candidate: Callable[..., Candidate]
) -> None:
    """A process that stepped down may join again; it queues behind the current candidates."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    first = new_candidate("first", 2)
    second = new_candidate("second", 2)
    first.election.step_down()
    assert first.election.candidate is None
    first.election.start()
    assert first.election.try_take_over(bootstrap=False) is None
    assert second.election.try_take_over(bootstrap=False) is not None


def test_promote_on_an_empty_environment(zk_client: KazooClient, zk_env: ZkEnv) -> None:
    """Promoting before anything exists creates the environment root and the target."""
    consensus = Consensus(zk_client, zk_env.root)
    promote(consensus, 1, requested_by="test", before_deploy=True)
    assert read_promotion(consensus) == 1


def test_takeover_whose_answer_was_lost_is_adopted_not_repeated(
    store: Consensus, new_client: ClientFactory, zk_env: ZkEnv
) -> None:
    """A takeover that landed but whose answer was lost is recognised: epoch 1, not 2."""
    write_catalog(store, generation=1)
    set_promotion(store, 2)
    lost: list[bool] = []

    @attrs.define
    class LossyConsensus(Consensus):
        def commit(self, ops, *, fence=None):  # type: ignore[no-untyped-def]
            results = super().commit(ops, fence=fence)
            if not lost and any(getattr(op, "key", "") == EPOCH_KEY for op in ops):
                lost.append(True)
                raise ConnectionLostError("answer lost after the commit landed")
            return results

    election = LeaderElection(
        LossyConsensus(new_client(), zk_env.root), "p", 2, release="0.10.0",
        on_change=lambda _e: None
    )
    election.start()
    try:
        leadership = election.try_take_over(bootstrap=False)
    finally:
        election.stop()
    epoch = read_epoch(store)
    assert lost and leadership is not None and epoch is not None
    assert (leadership.epoch, epoch.epoch) == (1, 1)
    assert leadership.fence.version == epoch.version
