"""The sidecar's data plane, called from HTTP threads: readiness, status, promote, append, read.

It only reads the machine's state and writes through kazoo (thread-safe); a promotion goes to
the main thread through the inbox. Refusals are domain errors (``catalog.errors``) that carry
their data; :mod:`orchestrator.sidecar.http` alone turns them into HTTP statuses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pyarrow as pa

from catalog.environment import read_catalog
from catalog.errors import (
    BlobUnreachableError,
    BusyError,
    ConnectionLostError,
    NoShardError,
    NotLeaderError,
    UnknownCollectionError,
    WritesPausedError,
)
from catalog.release import Builtin, Release
from catalog.retry import CasRetry
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, Rows, Shard, WriteMark, append_rows, find_schema_id
from orchestrator.process_node import READY_STATES
from orchestrator.sidecar.config import SidecarConfig
from orchestrator.sidecar.connection import SidecarConnection
from orchestrator.sidecar.idempotency import KeyedRequests, WriteIdentity
from orchestrator.sidecar.machine import SidecarMachine
from orchestrator.sidecar.metrics import SidecarMetrics
from orchestrator.sidecar.progress import Progress
from orchestrator.sidecar.readiness import Readiness, ReadinessCheck
from orchestrator.sidecar.rows import jsonable, rows_to_table
from orchestrator.sidecar.states import Promote, State
from orchestrator.status.web import history_document, status_document
from orchestrator.zk import why_unreachable

PROMOTE_TIMEOUT = 30.0


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
        self._append_retry = CasRetry(
            max_attempts=20, deadline=5.0, on_retry=metrics.count_cas_retry
        )

    def readiness(self) -> Readiness:
        progress = self._progress
        state = progress.state
        connected = self._connection.connected
        # Only when the session is not connected: ask the servers why (no quorum? all down?).
        servers = "" if connected else why_unreachable(self._config.zk, timeout=0.5)
        checks = [
            ReadinessCheck(
                "zookeeper",
                connected,
                f"not connected to {self._config.zk}" + (f": {servers}" if servers else ""),
            ),
            ReadinessCheck(
                "registered", self._connection.registered, "process node not registered"
            ),
            ReadinessCheck(
                "state",
                state in READY_STATES,
                f"state is {state.value}" + (f" ({progress.phase})" if progress.phase else ""),
            ),
        ]
        unreadable = self._machine.health.unreadable
        checks.append(
            ReadinessCheck(
                "durable-state",
                unreadable is None,
                "" if unreadable is None else f"cannot read {unreadable.key}: {unreadable.message}",
            )
        )
        if self._machine.leadership is not None:
            store = self._machine.store
            checks.append(
                ReadinessCheck(
                    "blob-store",
                    store.unreachable is None,
                    f"blob store unreachable since {store.detail()}",
                )
            )
            checks.append(
                ReadinessCheck(
                    "writes",
                    not self._connection.writes_paused,
                    "leader writes paused: ZooKeeper session suspended"
                    + (f" ({servers})" if servers else ""),
                )
            )
        return Readiness(tuple(checks))

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return status_document(self._connection.require(), coverage=coverage)

    def history_json(self) -> list[dict[str, Any]]:
        return history_document(self._connection.require())

    def metrics_text(self) -> bytes:
        return self._metrics.render()

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

    def append(
        self, collection: str, body: bytes, idempotency_key: str | None = None
    ) -> Mapping[str, Any]:
        """Append the JSON-lines rows of ``body`` to ``collection`` exactly once.

        The append's identity is recorded in the shard's write ledger with the rows, so a lost
        answer is resolved by it. With ``idempotency_key`` the identity derives from the key
        (and the body): a retry with the same key and body returns the first answer
        (``replayed``) and writes nothing, for the key retention after the first
        (``--idempotency-retention``), looked up before the body is read; the same key with
        another body is refused (IdempotencyKeyReusedError). Concurrent requests with one key
        take turns (:class:`~orchestrator.sidecar.idempotency.KeyedRequests`).
        """
        leadership = self._machine.leadership
        state = self._progress.state
        if leadership is None:
            raise NotLeaderError(
                f"process {self._config.process_id} is read-only: append through the leader",
                state=state.value,
            )
        if state is not State.SERVING:
            raise WritesPausedError(
                f"leader writes are paused: state is {state.value}", state=state.value
            )
        builtin = self._builtin(collection)
        identity = WriteIdentity.of(idempotency_key, body)
        with self._keyed.turn(identity):
            return self._append(leadership, builtin, collection, identity, body)

    def _append(
        self,
        leadership: Any,
        builtin: Builtin,
        collection: str,
        identity: WriteIdentity,
        body: bytes,
    ) -> Mapping[str, Any]:
        store = self._machine.store
        store.refuse_writes()  # fail fast during an outage: nothing is tried, nothing lands
        # A session suspended for a moment (its ZooKeeper server died, the client moves to
        # another) pauses the request rather than failing it: every attempt waits up to a
        # third of the session timeout for the session, and a ConnectionLoss is retried by
        # the write's identity. Only a session still suspended after that answers 503.
        wait = min(5.0, self._config.session_timeout / 3)
        sent = False
        prefix = identity.key_prefix

        def rows(current: Any) -> Rows:
            if prefix is not None:
                identity.check_reuse(shard.find_key(current, prefix), collection)
            return Rows(table, schema=builtin.schema)

        def before_send() -> None:
            nonlocal sent
            leadership.check(wait)
            sent = True

        def resolve() -> Shard:
            leadership.check(wait)
            return self._shard_of(builtin)

        try:
            shard = self._append_retry(resolve)
            if prefix is not None:  # a retry gets its first answer before its body is read
                first = shard.find_key(shard.state(), prefix)
                identity.check_reuse(first, collection)
                if first is not None:
                    store.answered()
                    return _answer(collection, shard, first, replayed=True)
            table = rows_to_table(body, builtin.schema)
            result = append_rows(
                shard,
                rows,
                fence=leadership.fence,
                write_id=identity.write_id,
                retry=lambda: self._append_retry,
                before_read=lambda: leadership.check(wait),
                before_send=before_send,
            )
        except BlobUnreachableError as exc:  # the batch never reached the store: not landed
            store.failed(exc)
            raise
        except ConnectionLostError as exc:
            if sent:
                raise  # an attempt may have landed: the outcome is unknown, not refused
            raise WritesPausedError(
                f"leader writes are paused: the ZooKeeper session is suspended (waited {wait:g} s)",
                state=self._progress.state.value,
            ) from exc
        store.answered()
        assert result.mark is not None
        if not result.replayed:
            self._metrics.rows_appended.labels(collection=collection).inc(table.num_rows)
        return _answer(collection, shard, result.mark, replayed=result.replayed)

    def read(self, collection: str, as_of: int | None) -> Iterable[Mapping[str, Any]]:
        try:
            rows = self._read(collection, as_of)
        except BlobUnreachableError as exc:
            self._machine.store.failed(exc)
            raise
        self._machine.store.answered()
        return rows

    def _read(self, collection: str, as_of: int | None) -> list[dict[str, Any]]:
        builtin = self._builtin(collection)
        shard = self._shard_of(builtin)
        reads_with = find_schema_id(shard.state(), builtin.schema)
        with shard.lease(holder=self._config.process_id, as_of=as_of, schema_id=reads_with):
            if as_of is None and shard.state().upper == 0:
                return []
            table = shard.snapshot(as_of)
        source = pa.schema([f for f in table.schema if f.name not in (TS, DIFF)])
        if not source.equals(builtin.schema):
            table = migrate_batch(table, source, builtin.schema, projection=True)
        return [{k: jsonable(v) for k, v in row.items()} for row in table.to_pylist()]

    def _builtin(self, collection: str) -> Builtin:
        builtin = self._release.builtin(collection)
        if builtin is None:
            raise UnknownCollectionError(
                f"release {self._release.version} has no builtin collection {collection} "
                "(name it SCHEMA.NAME)",
                collection=collection,
            )
        return builtin

    def _shard_of(self, builtin: Builtin) -> Shard:
        """The shard this process reads and writes for ``builtin``.

        A follower reads its own replacement shard where it has one (what it will serve once
        promoted); otherwise the collection's shard in the catalog.
        """
        consensus = self._connection.require()
        blob = self._machine.blob
        check = self._machine.check
        if self._machine.leadership is None and check is not None:
            shard_id = check.replacement_shards.get(builtin.global_id)
            if shard_id is not None:
                return self._shard(consensus, blob, shard_id)
        found = read_catalog(consensus)
        ref = found[0].collections.get(builtin.global_id) if found else None
        if ref is None:
            raise NoShardError(
                f"collection {builtin.name} has no shard yet (environment not bootstrapped, or "
                "the builtin is new in this release and not promoted)",
                collection=builtin.name,
            )
        return self._shard(consensus, blob, ref.shard_id)

    def _shard(self, consensus: Any, blob: Any, shard_id: str) -> Shard:
        return Shard(consensus, blob, shard_id, key_retention=self._config.idempotency_retention)


def _answer(collection: str, shard: Shard, mark: WriteMark, *, replayed: bool) -> dict[str, Any]:
    return {
        "collection": collection,
        "shard_id": shard.shard_id,
        "rows": mark.rows,
        "ts": mark.lower,
        "upper": mark.upper,
        "replayed": replayed,
    }
