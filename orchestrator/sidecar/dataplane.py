"""The sidecar's data plane, called from HTTP threads: readiness, status, promote, append, read.

It only reads the machine's state and writes through kazoo (thread-safe); a promotion goes to
the main thread through the inbox. Refusals are domain errors (``catalog.errors``) that carry
their data; :mod:`orchestrator.sidecar.http` alone turns them into HTTP statuses.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final

import pyarrow as pa
import structlog

from catalog.environment import CatalogState, read_catalog
from catalog.errors import (
    BlobStoreFullError,
    BlobUnreachableError,
    BusyError,
    CatalogError,
    ConnectionLostError,
    FencedError,
    IdempotencyKeyReusedError,
    LeadershipExpiredError,
    MigratingError,
    MigrationRefusedError,
    NoShardError,
    NotLeaderError,
    UnknownCollectionError,
    UnreadableTimeError,
    VersionMismatchError,
    WritesPausedError,
)
from catalog.release import Builtin, Release
from catalog.retry import CasRetry
from catalog.schema import fingerprint, migrate_batch, schema_json
from catalog.shard import (
    DIFF,
    TS,
    Rows,
    Shard,
    ShardState,
    WriteMark,
    append_rows,
    find_schema_id,
    read_states,
    update_schema,
    written_as,
)
from catalog.shard.readers import ReaderRegistry
from orchestrator.election import Leadership, read_epoch
from orchestrator.migrate import request_finalization
from orchestrator.process_node import FINAL_STATES
from orchestrator.sidecar.config import SidecarConfig
from orchestrator.sidecar.connection import SidecarConnection
from orchestrator.sidecar.groupcommit import GroupCommit, Pending
from orchestrator.sidecar.http import AppendRequest
from orchestrator.sidecar.idempotency import KeyedRequests, WriteIdentity
from orchestrator.sidecar.ipc import stream_to_table
from orchestrator.sidecar.machine import SidecarMachine
from orchestrator.sidecar.merger import Merger
from orchestrator.sidecar.metrics import SidecarMetrics
from orchestrator.sidecar.ndjson import rows_to_table
from orchestrator.sidecar.objectstore import BlobStoreHealth
from orchestrator.sidecar.progress import Progress
from orchestrator.sidecar.readiness import Readiness, SidecarConditions, sidecar_readiness
from orchestrator.sidecar.states import Promote, State
from orchestrator.status.web import history_document, status_document

log = structlog.get_logger(__name__)

PROMOTE_TIMEOUT = 30.0
#: Seconds an append waits, during a cut-over to this process, for it to serve: what it
#: answers then (its own commit) comes sooner than a refusal the client would retry after.
CUTOVER_HOLD_SECONDS = 5.0
#: States after which a cut-over is over, served or not.
_CUT_OVER: Final = frozenset({State.SERVING, *FINAL_STATES})


class SidecarDataPlane:
    """What the HTTP server asks of the process (:class:`~orchestrator.sidecar.http.SidecarApi`)."""

    def __init__(
        self,
        config: SidecarConfig,
        release: Release,
        metrics: SidecarMetrics,
        connection: SidecarConnection,
        machine: SidecarMachine,
        progress: Progress,
        inbox: Callable[[object], None],
    ) -> None:
        self._config = config
        self._release = release
        self._metrics = metrics
        self._connection = connection
        self._machine = machine
        self._progress = progress
        self._inbox = inbox
        self._keyed = KeyedRequests()
        self._groups: dict[str, GroupCommit] = {}
        self._groups_lock = threading.Lock()
        # The state each shard's last commit left (the leader is its only writer): what a
        # keyed request's pre-check reads, and what the next commit's first attempt starts
        # from, instead of ZooKeeper. Stale is safe: the compare-and-set refuses it and the
        # retry re-reads, and a commit re-checks every member against the state it uses.
        self._states: dict[str, ShardState] = {}
        self._leader_shards: tuple[object, dict[str, str]] = (None, {})
        self._append_retry = CasRetry(
            max_attempts=20, deadline=5.0, on_retry=metrics.count_cas_retry
        )
        # The writer's turn on each shard: a commit of appends, or a merge's commit.
        self._turns: dict[str, threading.Lock] = {}
        self._turns_lock = threading.Lock()
        self._merger = Merger(
            metrics,
            self._merging,
            lambda shard_id: self._shard(connection.require(), machine.blob, shard_id),
            self._turn,
            self._merged,
        )
        # Reads at the latest time hold the process's registration of their shard
        # (catalog.shard.readers), on the connection it was made on; and the schema each
        # shard was last read with (what the registration tells coverage).
        self._registry: tuple[object, ReaderRegistry] | None = None
        self._reads_with: dict[str, int | None] = {}
        #: When this process last committed an append (wall clock; None: never), what its
        #: exit event records for the next leader's cut-over (orchestrator.sidecar.cutover).
        self.last_commit_at: float | None = None
        # Set once this leader is fenced by a promotion: it answers reads until its
        # successor's catalog switch (hand_over).
        self._handing_over = False

    def readiness(self) -> Readiness:
        machine, connection = self._machine, self._connection
        return sidecar_readiness(
            SidecarConditions(
                zk=self._config.zk,
                state=self._progress.state,
                phase=self._progress.phase,
                connected=connection.connected,
                registered=connection.registered,
                writes_paused=connection.writes_paused,
                leading=machine.leadership is not None,
                unreadable=machine.health.unreadable,
                store=machine.store,
                step=self._progress.step,
                paused=machine.paused(),
            )
        )

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return status_document(self._connection.require(), coverage=coverage)

    def history_json(self) -> list[dict[str, Any]]:
        return history_document(self._connection.require())

    def collections_json(self) -> Mapping[str, Any]:
        """The collections this release serves, each with its schema as appends must send it
        and reads give it (``GET /collections``)."""
        return {
            "version": str(self._release.version),
            "collections": [
                {
                    "name": b.name,
                    "global_id": b.global_id,
                    "kind": b.kind,
                    "fingerprint": fingerprint(b.schema),
                    "fields": schema_json(b.schema),
                }
                for b in sorted(self._release.builtins, key=lambda b: b.name)
            ],
        }

    def metrics_text(self) -> bytes:
        return self._metrics.render()

    def refused(self, error: str) -> None:
        self._metrics.refusals.labels(error=error).inc()

    def promote(
        self, deploy_generation: int | None, requested_by: str | None = None
    ) -> Mapping[str, Any]:
        """Ask the main thread to promote (default: this generation); ``requested_by`` (the
        caller's credential name and address) is recorded with the promotion and logged."""
        self._connection.require()
        generation = (
            deploy_generation if deploy_generation is not None else self._config.deploy_generation
        )
        request = Promote(generation, Future(), requested_by)
        self._inbox(request)
        try:
            return request.done.result(timeout=PROMOTE_TIMEOUT)
        except FutureTimeout:
            request.done.cancel()
            raise BusyError(
                f"the process did not handle the promotion within {PROMOTE_TIMEOUT:g} s "
                "(migrating?)",
                timeout=PROMOTE_TIMEOUT,
            ) from None

    def finalize(self, expect_version: str | None, requested_by: str) -> Mapping[str, Any]:
        """Decide to finalize the pending upgrade (any process may; the serving leader does
        the work, fenced)."""
        answer = request_finalization(
            self._connection.require(),
            requested_by=requested_by,
            reason="operator",
            expect_version=expect_version,
        )
        return answer.to_json()

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
        take turns (:class:`~orchestrator.sidecar.idempotency.KeyedRequests`).
        """
        collection, body, idempotency_key = (
            request.collection, request.body, request.idempotency_key
        )  # fmt: skip
        self._await_cutover()
        leadership = self._machine.appending()
        state = self._progress.state
        if self._machine.leadership is None:
            raise self._not_leader(state)
        if leadership is None:
            raise WritesPausedError(
                f"leader writes are paused: state is {state.value}", state=state.value
            )
        builtin = self._builtin(collection)
        identity = WriteIdentity.of(idempotency_key, body)
        with self._keyed.turn(identity) as turn:
            store = self._machine.store
            store.refuse_writes()  # fail fast during an outage: nothing is tried, nothing lands
            prefix = identity.key_prefix
            if prefix is not None:  # a retry gets its first answer before its body is read
                with self._outcome(lambda: False):
                    shard = self._append_retry(lambda: self._resolve(leadership, builtin))
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
            consensus, blob = self._connection.require(), self._machine.blob
            found = read_catalog(consensus)
            check = self._machine.check
            ids = {ref.shard_id for ref in found[0].collections.values()} if found else set()
            ids |= set(check.replacement_shards.values()) if check is not None else set()
            states = read_states(consensus, sorted(ids))
            for shard_id, state in states.items():
                if state is not None and state.writes.segments:
                    self._shard(consensus, blob, shard_id).keys.warm(state.writes.segments)
        except Exception as exc:  # a cold cache is slower, never wrong
            log.debug("key_logs_not_warmed", error=repr(exc))

    def hand_over(self) -> bool:
        """This leader was fenced by a promotion: it goes on answering reads, through the
        catalog, while the catalog is at its release's version (until a successor of another
        release switches it). Each read first syncs with ZooKeeper's leader and reads the
        catalog (:meth:`_readable`), so it sees every append acknowledged before it, whoever
        made it: a client that follows the leader reads without a gap. True when the catalog
        is at this release's version now."""
        self._handing_over = True
        try:
            self._readable()
        except FencedError as refused:
            log.info("not_handing_over", reason=refused.message)
            return False
        return True

    def _readable(self) -> CatalogState:
        """During a hand-over: the catalog (read after a ``sync``) while it is at this
        process's release; else FencedError, why a read goes to the successor (the catalog
        moved on, or cannot be read: ZooKeeper unreachable)."""
        try:
            consensus = self._connection.require()
            consensus.sync()
            found = read_catalog(consensus)
        except CatalogError as exc:
            raise self._handed_on(f"cannot read its catalog ({exc.message})") from exc
        version = None if found is None else found[0].version
        if found is not None and version == str(self._release.version):
            return found[0]
        raise self._handed_on(f"the catalog is at version {version} now", catalog_version=version)

    def _handed_on(self, why: str, **fields: Any) -> FencedError:
        """Why a read during a hand-over goes to the successor: the one wording of it."""
        return FencedError(
            f"process {self._config.process_id} was fenced by a promotion, and {why}: read "
            "through its successor",
            deploy_generation=self._config.deploy_generation,
            **fields,
        )

    def _await_cutover(self) -> None:
        """While this process's generation is promoted and it does not serve yet (it takes
        over, it migrates), an append waits for it to serve, at most
        :data:`CUTOVER_HOLD_SECONDS`, instead of being refused at once: the client that
        follows the leader gets its answer as soon as the new leader commits, not a
        ``Retry-After`` later. Any other process answers at once."""
        if self._machine.promotion != self._config.deploy_generation:
            return
        machine, progress = self._machine, self._progress
        progress.wait_until(
            lambda: progress.state in _CUT_OVER or machine.appending() is not None,
            CUTOVER_HOLD_SECONDS,
        )

    def _not_leader(self, state: State) -> Exception:
        """Why a process that does not lead refuses an append. While the epoch still names it
        (it lost its session while leading and rejoins the election, or it is taking over),
        the environment has a serving leader again within the session timeout plus 1 s
        (docs/design-contract.md): 503 with Retry-After, a pause to wait out. Otherwise it
        is read-only: 409, append through the leader the epoch names."""
        led = self._machine.journal.led
        try:
            epoch = read_epoch(self._connection.require())
            ours = epoch is not None and epoch.leader == self._config.process_id
        except ConnectionLostError:
            epoch, ours = None, led  # it led, and cannot tell yet whether it still may: wait
        if ours:
            return WritesPausedError(
                f"process {self._config.process_id} lost its leadership and is taking it "
                f"back: state is {state.value}",
                state=state.value,
            )
        leader = f" ({epoch.leader})" if epoch is not None and epoch.leader else ""
        return NotLeaderError(
            f"process {self._config.process_id} is read-only: append through the leader{leader}",
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

    def _wait(self) -> float:
        """How long an attempt waits for a suspended session: a third of the session timeout
        (at most 5 s). A ZooKeeper server that died moves the client to another meanwhile, and
        a ConnectionLoss is retried by the write's identity; only a session still suspended
        after that answers 503."""
        return min(5.0, self._config.session_timeout / 3)

    def _resolve(self, leadership: Any, builtin: Builtin) -> Shard:
        """The shard a leader appends to for ``builtin``. The catalog's shards do not change
        while one leadership serves (switches happen in its migration, before it serves), so
        they are read once per leadership."""
        leadership.check(self._wait())
        known, shards = self._leader_shards
        if known is not leadership:
            shards = {}
            self._leader_shards = (leadership, shards)
        shard_id = shards.get(builtin.global_id)
        if shard_id is None:
            shard = self._shard_of(builtin)
            shards[builtin.global_id] = shard.shard_id
            return shard
        return self._shard(self._connection.require(), self._machine.blob, shard_id)

    def _outcome(self, sent: Callable[[], bool]) -> contextlib.AbstractContextManager[None]:
        return write_outcome(self._machine.store, self._progress, self._wait(), sent)

    def _commit(self, builtin: Builtin, members: Sequence[Pending]) -> None:
        """One commit of a group of appends to ``builtin``; settles each member.

        The first attempt starts from the state the last commit left, each later one re-reads
        it; each leaves out the members the state already holds (their key landed before:
        answered ``replayed``; or, after an attempt of this commit whose outcome was not seen,
        possibly in it: answered as written) and those whose key holds another body (422): so
        every member is exactly once, whatever the pre-check saw."""
        leadership = self._machine.appending()
        if leadership is None:
            raise WritesPausedError(
                "leader writes are paused: this process no longer serves as leader",
                state=self._progress.state.value,
            )
        wait = self._wait()
        started = time.monotonic()
        for member in members:
            self._metrics.observe_append("queue", started - member.queued)
        sent = False
        attempt, sending = started, 0.0  # when the attempt began; when it sent (0: not yet)
        unknown = False  # an attempt's outcome was not seen: it may have landed
        remaining = list(members)
        name = builtin.name

        def rows(state: ShardState) -> Rows | None:
            still, tables, waits = [], [], []
            schema_id = find_schema_id(state, builtin.schema)
            for member in remaining:
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
                    member.settle(_answer(name, shard, found, replayed=not unknown), None)
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
            if waits and state is known:  # the upgrade may be final since: refuse on a fresh read
                raise VersionMismatchError(
                    f"shard {shard.shard_id}: a member waits on the state the last commit left; "
                    "read it again",
                    key=shard.key,
                )
            for member, refusal in waits:
                member.settle(None, refusal)
            behind = self._merger.refusal(name, shard.shard_id, state) if still else None
            for member in still if behind is not None else ():
                member.settle(None, behind)
            remaining[:] = still if behind is None else []
            if not remaining:
                return None
            return Rows(
                pa.concat_tables(tables),
                schema_id=schema_id if schema_id is not None else state.schema_id,
                group=[(m.identity.write_id, m.table.num_rows) for m in still],
            )

        def before_read() -> None:
            nonlocal attempt, sending
            attempt, sending = time.monotonic(), 0.0
            leadership.check(wait)

        def before_send() -> None:
            nonlocal sent, sending
            leadership.check(wait)
            sent = True
            sending = time.monotonic()
            self._metrics.observe_append("write", sending - attempt)

        def on_unknown() -> None:
            nonlocal unknown
            unknown = True

        try:
            with self._outcome(lambda: sent):
                shard = self._append_retry(lambda: self._resolve(leadership, builtin))
                self._merger.slow_down(shard.shard_id, self._states.get(shard.shard_id))
                with self._turn_of(shard.shard_id):
                    known = self._states.get(shard.shard_id)
                    result = append_rows(
                        shard,
                        rows,
                        fence=leadership.fence,
                        retry=lambda: self._append_retry,
                        before_read=before_read,
                        before_send=before_send,
                        known=known,
                        on_unknown=on_unknown,
                    )
        except BaseException:
            self._states.clear()  # re-read before the next pre-check and commit
            raise
        finally:
            if sending:  # the last attempt's compare-and-set, answered or not
                self._metrics.observe_append("commit", time.monotonic() - sending)
        self._states[shard.shard_id] = result.state
        self._merger.committed(name, shard.shard_id, result.state)
        self._machine.store.written()
        if result.mark is not None:
            self.last_commit_at = committed = time.time()
            self._machine.cutover.committed(committed)
        if result.mark is None:  # every member was settled by what the state held
            return
        lower, upper = result.mark.lower, result.mark.upper
        rows_written = sum(m.table.num_rows for m in remaining)
        self._metrics.rows_appended.labels(collection=name).inc(rows_written)
        self._metrics.append_group.observe(len(remaining))
        for member in remaining:
            mark = WriteMark(member.identity.write_id, lower, upper, member.table.num_rows)
            member.settle(_answer(name, shard, mark, replayed=False), None)

    def _merging(self) -> Leadership | None:
        """The leadership the write path's merges write under: a serving leader's."""
        leadership = self._machine.leadership
        return leadership if self._progress.state is State.SERVING else None

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

    def read_table(self, collection: str, as_of: int | None) -> pa.Table:
        """The snapshot of ``collection`` as this release reads it (with ``_ts`` and
        ``_diff``); an unreachable blob store is a state (503), as for appends. During a
        cut-over to this process a read waits for the catalog switch, as an append does:
        until then the catalog names the old release's shards (a replacement still lacks
        the old leader's last appends), and a read served meanwhile would take the CPU the
        migration needs. Past the wait, a read of an old shard this release cannot make is
        refused for a retry (MigratingError, 503), by a read-only process as a write is."""
        if self._handing_over:
            return self._read_handing_over(collection, as_of)
        self._await_cutover()
        try:
            table = self._snapshot(collection, as_of)
        except MigrationRefusedError as exc:
            promoted = self._machine.promotion == self._config.deploy_generation
            if not (promoted or self._machine.leadership):  # read-only: the leader reads it
                raise _read_only_refusal(self._config.process_id, collection, exc) from exc
            if self._machine.appending():
                raise
            # Before its switch: the old release's shards, readable once switched (a REWRITE).
            raise MigratingError(
                f"process {self._config.process_id} is migrating: it reads {collection} once "
                f"its catalog switch committed ({exc.message})",
                collection=collection,
            ) from exc
        except BlobUnreachableError as exc:
            self._machine.store.failed(exc)
            raise
        self._machine.store.answered()
        return table

    def _read_handing_over(self, collection: str, as_of: int | None) -> pa.Table:
        """A read during a hand-over (:meth:`hand_over`): served through the catalog while it
        is at this release's version, else refused as fenced, for the client to follow the
        successor."""
        catalog = self._readable()
        try:
            return self._snapshot(collection, as_of, catalog)
        except MigrationRefusedError as exc:
            raise self._handed_on(f"cannot read {collection} ({exc.message})") from exc

    def _snapshot(
        self, collection: str, as_of: int | None, catalog: CatalogState | None = None
    ) -> pa.Table:
        """``collection`` as of ``as_of`` (its latest when None), through ``catalog`` (read
        now when None)."""
        builtin = self._builtin(collection)
        leadership = self._machine.appending() if catalog is None else None
        if leadership is not None:  # the serving leader knows its shards: no catalog read
            shard = self._resolve(leadership, builtin)
        else:
            shard = self._shard_of(builtin, catalog)
        if as_of is None:  # the process's registration: nothing written per read
            reads_with = self._reads_with.get(shard.shard_id)
            with self._readers(shard).reading(shard, reads_with) as state:
                self._reads_with[shard.shard_id] = find_schema_id(state, builtin.schema)
                if state.upper == 0:
                    return update_schema(builtin.schema).empty_table()
                table = shard.snapshot(None, state=state)
        else:
            table = self._snapshot_at(shard, builtin, as_of)
        source = pa.schema([f for f in table.schema if f.name not in (TS, DIFF)])
        if not source.equals(builtin.schema):
            table = migrate_batch(table, source, builtin.schema, projection=True)
        return table

    def _readers(self, shard: Shard) -> ReaderRegistry:
        """This process's reader registrations on ``shard``'s ZooKeeper connection."""
        registry = self._registry
        if registry is None or registry[0] is not shard.consensus:
            registry = (shard.consensus, ReaderRegistry(shard.consensus, self._config.process_id))
            if self._registry is not None:
                self._registry[1].stop()
            self._registry = registry
        return registry[1]

    def _snapshot_at(self, shard: Shard, builtin: Builtin, as_of: int) -> pa.Table:
        """A read at an explicit time, under a per-read lease holding ``since`` below it."""
        collection = builtin.name
        state = shard.state()
        if not state.since <= as_of < state.upper:
            raise UnreadableTimeError(
                f"as_of {as_of} is outside the times {collection} can be read at: "
                f"[{state.since}, {state.upper}) (below: compacted; from the upper on: not "
                "written yet)",
                collection=collection,
                as_of=as_of,
                since=state.since,
                upper=state.upper,
            )
        reads_with = find_schema_id(state, builtin.schema)
        holder = self._config.process_id
        with shard.lease(holder=holder, as_of=as_of, schema_id=reads_with, state=state) as lease:
            return shard.snapshot(as_of, state=lease.state)

    def _builtin(self, collection: str) -> Builtin:
        builtin = self._release.builtin(collection)
        if builtin is None:
            raise UnknownCollectionError(
                f"release {self._release.version} has no builtin collection {collection} "
                "(name it SCHEMA.NAME)",
                collection=collection,
            )
        return builtin

    def _shard_of(self, builtin: Builtin, catalog: CatalogState | None = None) -> Shard:
        """The shard this process reads and writes for ``builtin``.

        A follower reads its own replacement shard where it has one (what it will serve once
        promoted); otherwise the collection's shard in ``catalog`` (read now when None).
        """
        consensus = self._connection.require()
        blob = self._machine.blob
        check = self._machine.check
        if self._machine.leadership is None and check is not None and not self._handing_over:
            shard_id = check.replacement_shards.get(builtin.global_id)
            if shard_id is not None:
                return self._shard(consensus, blob, shard_id)
        if catalog is None:
            found = read_catalog(consensus)
            catalog = found[0] if found else None
        ref = catalog.collections.get(builtin.global_id) if catalog else None
        if ref is None:
            raise NoShardError(
                f"collection {builtin.name} has no shard yet (environment not bootstrapped, or "
                "the builtin is new in this release and not promoted)",
                collection=builtin.name,
            )
        return self._shard(consensus, blob, ref.shard_id)

    def _shard(self, consensus: Any, blob: Any, shard_id: str) -> Shard:
        return Shard(consensus, blob, shard_id, key_retention=self._config.idempotency_retention)


@contextlib.contextmanager
def write_outcome(
    store: BlobStoreHealth, progress: Progress, wait: float, sent: Callable[[], bool]
) -> Iterator[None]:
    """Errors of a write attempt as the client must see them: a blob store outage is a
    state (503), a lost session before anything was sent pauses writes (503), after a
    send the outcome is unknown (the error as it is)."""
    try:
        yield
    except BlobUnreachableError as exc:  # the batch never reached the store: not landed
        store.failed(exc)
        raise
    except BlobStoreFullError as exc:  # the store took nothing: not landed
        store.filled(exc)
        raise
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


def _read_only_refusal(process_id: str, collection: str, exc: CatalogError) -> NotLeaderError:
    """A read a read-only process cannot make: its release cannot read the shards the catalog
    names (the other release's type changes, around a promotion or a rollback). The leader
    reads them, so the client follows it, as for a write (409 ``read-only``)."""
    return NotLeaderError(
        f"process {process_id} is read-only and its release cannot read {collection} as the "
        f"catalog holds it ({exc.message}): read through the leader",
        collection=collection,
    )
