"""The sidecar's writer: an append from its HTTP body to its answer, exactly once.

An append is checked alone (its collection, its key's first answer, its rows against the
release's schema), then joins its collection's group commit
(:mod:`orchestrator.dataplane.groupcommit`). One commit writes the group's rows as one batch
under the leader's fence (:func:`catalog.shard.append_rows`), each attempt leaving out the
members the state already holds, so every member is exactly once whatever an earlier attempt
did. After each commit the writer's merger (:mod:`orchestrator.dataplane.merger`) decides what to
merge next; a merge commits in the writer's turn on the shard, so no commit of appends runs
meanwhile. The state each commit leaves is where the next one starts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.environment import read_catalog
from catalog.errors import (
    BlobStoreFullError,
    BlobUnreachableError,
    CatalogError,
    ConnectionLostError,
    LeadershipExpiredError,
    MigrationRefusedError,
    VersionMismatchError,
)
from catalog.release import Builtin
from catalog.retry import CasRetry
from catalog.shard import (
    Rows,
    Shard,
    ShardState,
    WriteMark,
    append_rows,
    find_schema_id,
    read_states,
    written_as,
)
from orchestrator.dataplane.groupcommit import GroupCommit, Pending
from orchestrator.dataplane.idempotency import (
    IdempotencyKeyReusedError,
    KeyedRequests,
    WriteIdentity,
)
from orchestrator.dataplane.merger import Merger
from orchestrator.dataplane.serving import NotLeaderError, Serving
from orchestrator.election import Leadership, read_epoch
from orchestrator.http.exchange import MAX_APPEND_ROWS
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.machine.objectstore import BlobStoreHealth
from orchestrator.machine.progress import Progress
from orchestrator.machine.states import State
from orchestrator.wire.ipc import stream_to_table
from orchestrator.wire.ndjson import rows_to_table

log = structlog.get_logger(__name__)


@attrs.frozen
class AppendRequest:
    """One ``POST /append``: what the HTTP layer hands the data plane (one value, so the
    API's implementations share its shape)."""

    collection: str
    body: bytes
    #: The ``Idempotency-Key`` header, if sent.
    idempotency_key: str | None = None
    #: The body is an Arrow IPC stream (else JSON lines).
    arrow: bool = False
    #: The most rows one append may carry (``--http-max-append-rows``).
    max_rows: int = MAX_APPEND_ROWS



class WritesPausedError(CatalogError):
    """The leader cannot write now (not serving, or its ZooKeeper session is suspended)."""

    code = "writes-paused"


class CommitContendedError(CatalogError):
    """Every attempt of a commit lost its compare-and-set to other writes of the shard (its
    merges, the leader's sweep) until the commit's retries ran out: nothing of it was
    written; retry with the same key."""

    code = "commit-contended"


class SidecarWriter:
    """Appends of one process: a group commit per collection, the write path's merges, and
    the state each shard's last commit left (the leader is its only writer)."""

    def __init__(self, serving: Serving, metrics: SidecarMetrics) -> None:
        self._serving = serving
        self._metrics = metrics
        self._keyed = KeyedRequests()
        self._groups: dict[str, GroupCommit] = {}
        self._groups_lock = threading.Lock()
        # The state each shard's last commit left: what a keyed request's pre-check reads,
        # and what the next commit's first attempt starts from, instead of ZooKeeper. Stale
        # is safe: the compare-and-set refuses it and the retry re-reads, and a commit
        # re-checks every member against the state it uses.
        self._states: dict[str, ShardState] = {}
        self._append_retry = CasRetry(
            max_attempts=20, deadline=5.0, on_retry=metrics.count_cas_retry
        )
        # The writer's turn on each shard: a commit of appends, or a merge's commit.
        self._turns: dict[str, threading.Lock] = {}
        self._turns_lock = threading.Lock()
        self._merger = Merger(metrics, self._merging, serving.shard, self._turn, self._merged)
        #: When this process last committed an append (wall clock; None: never), what its
        #: exit event records for the next leader's cut-over (orchestrator.machine.cutover).
        self.last_commit_at: float | None = None

    def append(self, request: AppendRequest) -> Mapping[str, Any]:
        """Append the rows of the request's ``body`` (JSON lines, or with ``arrow`` an Arrow
        IPC stream) to its ``collection`` exactly once; at most ``max_rows`` of them
        (TooManyRowsError).

        The append's identity is recorded in the shard's write ledger with the rows, so a lost
        answer is resolved by it. With ``idempotency_key`` the identity derives from the key
        (and the body): a retry with the same key and body returns the first answer
        (``replayed``) and writes nothing, for the key retention after the first
        (``--idempotency-retention``), looked up before the body is read; the same key with
        another body is refused (IdempotencyKeyReusedError). Concurrent requests with one key
        take turns (:class:`~orchestrator.dataplane.idempotency.KeyedRequests`).
        """
        collection, body, idempotency_key = (
            request.collection, request.body, request.idempotency_key
        )  # fmt: skip
        serving = self._serving
        serving.await_cutover()
        leadership = serving.machine.appending()
        state = self._serving.progress.state
        if self._serving.machine.leadership is None:
            raise self._not_leader(state)
        if leadership is None:
            raise WritesPausedError(
                f"leader writes are paused: state is {state.value}", state=state.value
            )
        builtin = self._serving.builtin(collection)
        identity = WriteIdentity.of(idempotency_key, body)
        with self._keyed.turn(identity) as turn:
            store = self._serving.machine.store
            store.refuse_writes()  # fail fast during an outage: nothing is tried, nothing lands
            prefix = identity.key_prefix
            if prefix is not None:  # a retry gets its first answer before its body is read
                with self._outcome(lambda: False):
                    shard = self._append_retry(lambda: serving.leader_shard(leadership, builtin))
                    known = self._states.get(shard.shard_id)
                    latest = (known or shard.state()).writes
                    first = shard.find_key(latest, prefix)
                identity.check_reuse(first, collection)
                if first is not None:
                    store.answered()
                    return _answer(collection, shard, first, replayed=True)
            parsing = time.monotonic()
            if request.arrow:
                table = stream_to_table(body, builtin.schema, request.max_rows)
            else:
                table = rows_to_table(body, builtin.schema, request.max_rows)
            self._metrics.observe_append("parse", time.monotonic() - parsing)
            group, pending = self._group(builtin), Pending(identity, table)
            turn.lasts_until(pending.when_settled)  # past the deadline, the key stays taken
            return group.submit(pending)

    def warm(self) -> None:
        """Ahead of a promotion, in the background: read into the process's cache the key
        logs of the shards this process would append to once it leads (the catalog's, and
        its own replacements), so its first keyed appends do not each read them. Best
        effort: a failure only leaves the cache cold."""
        threading.Thread(target=self._warm, name="warm-key-logs", daemon=True).start()

    def _warm(self) -> None:
        try:
            consensus = self._serving.connection.require()
            found = read_catalog(consensus)
            check = self._serving.machine.check
            ids = {ref.shard_id for ref in found[0].collections.values()} if found else set()
            ids |= set(check.replacement_shards.values()) if check is not None else set()
            states = read_states(consensus, sorted(ids))
            for shard_id, state in states.items():
                if state is not None and state.writes.segments:
                    self._serving.shard(shard_id).keys.warm(state.writes.segments)
        except Exception as exc:  # a cold cache is slower, never wrong
            log.debug("key_logs_not_warmed", error=repr(exc))

    def _not_leader(self, state: State) -> Exception:
        """Why a process that does not lead refuses an append. While the epoch still names it
        (it lost its session while leading and rejoins the election, or it is taking over),
        or while its generation is promoted and no leader of it took over yet, the
        environment has a serving leader again within the session timeout plus 1 s
        (docs/design-contract.md): 503 with Retry-After, a pause to wait out. Otherwise it
        is read-only: 409, append through the leader the epoch names."""
        led = self._serving.machine.journal.led
        generation = self._serving.config.deploy_generation
        try:
            epoch = read_epoch(self._serving.connection.require())
            ours = epoch is not None and epoch.leader == self._serving.process_id
        except ConnectionLostError:
            epoch, ours = None, led  # it led, and cannot tell yet whether it still may: wait
        if ours:
            doing = "lost its leadership and is taking it back" if led else "is taking over"
            return WritesPausedError(
                f"process {self._serving.process_id} {doing}: state is {state.value}",
                state=state.value,
            )
        taking_over = epoch is None or epoch.deploy_generation < generation
        if self._serving.promoted and taking_over:
            return WritesPausedError(
                f"generation {generation} is promoted and its leader is taking over: "
                f"state is {state.value}",
                state=state.value,
            )
        leader = f" ({epoch.leader})" if epoch is not None and epoch.leader else ""
        return NotLeaderError(
            f"process {self._serving.process_id} is read-only: append through the "
            f"leader{leader}",
            state=state.value,
        )

    def _group(self, builtin: Builtin) -> GroupCommit:
        with self._groups_lock:
            group = self._groups.get(builtin.global_id)
            if group is None:
                group = self._groups[builtin.global_id] = GroupCommit(
                    lambda members: self._commit(builtin, members)
                )
            return group

    def _outcome(self, sent: Callable[[], bool]) -> contextlib.AbstractContextManager[None]:
        serving = self._serving
        return write_outcome(serving.machine.store, serving.progress, serving.session_wait(), sent)

    def _commit(self, builtin: Builtin, members: Sequence[Pending]) -> None:
        """One commit of a group of appends to ``builtin``; settles each member
        (:class:`GroupAttempts` says what each attempt writes)."""
        leadership = self._serving.machine.appending()
        if leadership is None:
            raise WritesPausedError(
                "leader writes are paused: this process no longer serves as leader",
                state=self._serving.progress.state.value,
            )
        started = time.monotonic()
        for member in members:
            self._metrics.observe_append("queue", started - member.queued)
        attempts: GroupAttempts | None = None
        try:
            with self._outcome(lambda: attempts is not None and attempts.sent):
                shard = self._append_retry(lambda: self._serving.leader_shard(leadership, builtin))
                self._merger.slow_down(shard.shard_id, self._states.get(shard.shard_id))
                with self._turn_of(shard.shard_id):
                    attempts = GroupAttempts(
                        builtin, shard, list(members), leadership, self._serving.session_wait(),
                        self._metrics, self._merger, self._states.get(shard.shard_id), started,
                    )  # fmt: skip
                    result = append_rows(
                        shard,
                        attempts,
                        fence=leadership.fence,
                        retry=lambda: self._append_retry,
                        known=attempts.known,
                    )
        except BaseException:
            self._states.clear()  # re-read before the next pre-check and commit
            raise
        finally:
            if attempts is not None and attempts.sending:  # the last compare-and-set's time
                self._metrics.observe_append("commit", time.monotonic() - attempts.sending)
        assert attempts is not None  # made before append_rows, which returned
        self._states[shard.shard_id] = result.state
        self._merger.committed(builtin.name, shard.shard_id, result.state)
        self._serving.machine.store.written()
        if result.mark is not None:
            self.last_commit_at = committed = time.time()
            self._serving.machine.cutover.committed(committed)
            attempts.settle(result.mark)

    def _merging(self) -> Leadership | None:
        """The leadership the write path's merges write under: a serving leader's."""
        leadership = self._serving.machine.leadership
        return leadership if self._serving.progress.state is State.SERVING else None

    @contextlib.contextmanager
    def _turn(self, shard_id: str) -> Iterator[None]:
        """The writer's turn on ``shard_id`` for a merge's commit: no commit of appends runs
        meanwhile, and the next one reads the state the merge left."""
        with self._turn_of(shard_id):
            try:
                yield
            finally:
                self._states.pop(shard_id, None)

    def _turn_of(self, shard_id: str) -> threading.Lock:
        """The lock of the writer's turn on ``shard_id``."""
        with self._turns_lock:
            return self._turns.setdefault(shard_id, threading.Lock())

    def _merged(self, shard_id: str, state: ShardState) -> None:
        """A merge committed ``state``: the next commit starts from it unless a commit
        left a newer one (stale is safe, as for commits: the compare-and-set refuses it)."""
        known = self._states.get(shard_id)
        if known is None or known.version < state.version:
            self._states[shard_id] = state


@attrs.define
class GroupAttempts:
    """One commit of a group of appends to one collection, attempt by attempt: the writer's
    :class:`~catalog.shard.append.Attempts`.

    The first attempt starts from the state the last commit left (``known``), each later one
    re-reads it; each leaves out the members the state already holds (their key landed
    before: answered ``replayed``; or, after an attempt of this commit whose outcome was not
    seen, possibly in it: answered as written) and those whose key holds another body (422):
    so every member is exactly once, whatever the pre-check saw. Around each attempt the
    leader's lease is checked, and the append's steps are timed."""

    builtin: Builtin
    shard: Shard
    members: list[Pending]  # those still to write: every other one is settled
    leadership: Leadership
    wait: float  # how long a check waits for a suspended session
    metrics: SidecarMetrics
    merger: Merger
    known: ShardState | None
    attempt: float  # when the attempt began
    sending: float = 0.0  # when it sent its compare-and-set (0: not yet)
    sent: bool = False  # an attempt sent: its outcome may be unknown
    unknown: bool = False  # an attempt's outcome was not seen: it may have landed

    def rows(self, state: ShardState) -> Rows | None:
        builtin, shard, name = self.builtin, self.shard, self.builtin.name
        still, tables, waits = [], [], []
        schema_id = find_schema_id(state, builtin.schema)
        for member in self.members:
            identity = member.identity
            if identity.key_prefix is None:
                found = shard.find_write(state.writes, identity.write_id)
            else:  # one look-up: this body's mark, another body's, or none
                found = shard.find_key(state.writes, identity.key_prefix)
                try:
                    identity.check_reuse(found, name)
                except IdempotencyKeyReusedError as exc:
                    member.settle(None, exc)
                    continue
            if found is not None:
                member.settle(_answer(name, shard, found, replayed=not self.unknown), None)
                continue
            table = member.table
            if schema_id is None:  # pending: each member is checked alone, and only it waits
                try:
                    table, _ = written_as(shard.shard_id, table, builtin.schema, state)
                except MigrationRefusedError as exc:
                    waits.append((member, exc))
                    continue
            still.append(member)
            tables.append(table)
        if waits and state is self.known:  # the upgrade may be final since: refuse on a fresh read
            raise VersionMismatchError(
                f"shard {shard.shard_id}: a member waits on the state the last commit left; "
                "read it again",
                key=shard.key,
            )
        for member, refusal in waits:
            member.settle(None, refusal)
        behind = self.merger.refusal(name, shard.shard_id, state) if still else None
        for member in still if behind is not None else ():
            member.settle(None, behind)
        self.members = still if behind is None else []
        if not self.members:
            return None
        return Rows(
            pa.concat_tables(tables),
            schema_id=schema_id if schema_id is not None else state.schema_id,
            group=[(m.identity.write_id, m.table.num_rows) for m in still],
        )

    def before_read(self) -> None:
        self.attempt, self.sending = time.monotonic(), 0.0
        self.leadership.check(self.wait)

    def before_send(self) -> None:
        self.leadership.check(self.wait)
        self.sent = True
        self.sending = time.monotonic()
        self.metrics.observe_append("write", self.sending - self.attempt)

    def on_unknown(self) -> None:
        self.unknown = True

    def settle(self, mark: WriteMark) -> None:
        """The commit wrote the members left at ``mark``'s times: each gets its answer."""
        name = self.builtin.name
        self.metrics.rows_appended.labels(collection=name).inc(
            sum(m.table.num_rows for m in self.members)
        )
        self.metrics.append_group.observe(len(self.members))
        for member in self.members:
            own = WriteMark(member.identity.write_id, mark.lower, mark.upper, member.table.num_rows)
            member.settle(_answer(name, self.shard, own, replayed=False), None)


@contextlib.contextmanager
def write_outcome(
    store: BlobStoreHealth, progress: Progress, wait: float, sent: Callable[[], bool]
) -> Iterator[None]:
    """Errors of a write attempt as the client must see them: a blob store outage is a
    state (503), a commit that lost every race is refused for a retry (503), a lost session
    before anything was sent pauses writes (503), after a send the outcome is unknown (the
    error as it is)."""
    try:
        yield
    except BlobUnreachableError as exc:  # the batch never reached the store: not landed
        store.failed(exc)
        raise
    except BlobStoreFullError as exc:  # the store took nothing: not landed
        store.filled(exc)
        raise
    except VersionMismatchError as exc:  # the last attempt's compare-and-set failed: not landed
        raise CommitContendedError(
            f"the commit lost its compare-and-set to other writes of the shard until its "
            f"retries ran out ({exc.message}); nothing was written: retry with the same key",
            retry_after=1,
        ) from exc
    except ConnectionLostError as exc:
        if sent():
            raise  # an attempt may have landed: the outcome is unknown, not refused
        raise WritesPausedError(
            f"leader writes are paused: the ZooKeeper session is suspended (waited {wait:g} s)",
            state=progress.state.value,
        ) from exc
    except LeadershipExpiredError as exc:
        # A session that expired ended the leadership, not a successor: the process
        # takes it back (docs/design-contract.md), so the client waits, as above.
        if sent():
            raise
        raise WritesPausedError(
            "leader writes are paused: the ZooKeeper session expired and the process is "
            "taking its leadership back",
            state=progress.state.value,
        ) from exc


def _answer(collection: str, shard: Shard, mark: WriteMark, *, replayed: bool) -> dict[str, Any]:
    return {
        "collection": collection,
        "shard_id": shard.shard_id,
        "rows": mark.rows,
        "ts": mark.lower,
        "upper": mark.upper,
        "replayed": replayed,
    }


