"""The sidecar's data plane, called from HTTP threads: readiness, status, promote, append, read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from http import HTTPStatus
from typing import Any

import pyarrow as pa
import structlog

from catalog.environment import read_catalog
from catalog.errors import (
    ConnectionLostError,
    VersionMismatchError,
)
from catalog.release import Builtin
from catalog.schema import migrate_batch
from catalog.shard import DIFF, TS, AppendResult, Shard
from orchestrator.migrate import (
    find_schema_id,
)
from orchestrator.process_node import READY_STATES
from orchestrator.sidecar.core import SidecarCore
from orchestrator.sidecar.http import HttpError, Readiness, ReadinessCheck
from orchestrator.sidecar.idempotency import WriteIdentity
from orchestrator.sidecar.rows import jsonable, rows_to_table
from orchestrator.sidecar.states import State, _Promote
from orchestrator.status.web import history_document, status_document
from orchestrator.zk import why_unreachable

log = structlog.get_logger(__name__)


class SidecarDataPlane(SidecarCore):
    """What the HTTP server asks of the process; only reads its state, writes through kazoo."""

    def readiness(self) -> Readiness:
        state = self._state
        connected = self._connected.is_set()
        # Only when the session is not connected: ask the servers why (no quorum? all down?).
        servers = "" if connected else why_unreachable(self.config.zk, timeout=0.5)
        checks = [
            ReadinessCheck(
                "zookeeper",
                connected,
                f"not connected to {self.config.zk}" + (f": {servers}" if servers else ""),
            ),
            ReadinessCheck("registered", self._registered, "process node not registered"),
            ReadinessCheck(
                "state",
                state in READY_STATES,
                f"state is {state.value}" + (f" ({self._phase})" if self._phase else ""),
            ),
        ]
        unreadable = self._unreadable
        checks.append(
            ReadinessCheck(
                "durable-state",
                unreadable is None,
                "" if unreadable is None else f"cannot read {unreadable.key}: {unreadable.message}",
            )
        )
        if self._leadership is not None:
            checks.append(
                ReadinessCheck(
                    "writes",
                    not self._writes_paused.is_set(),
                    "leader writes paused: ZooKeeper session suspended"
                    + (f" ({servers})" if servers else ""),
                )
            )
        return Readiness(tuple(checks))

    def status_json(self, coverage: bool = False) -> Mapping[str, Any]:
        return status_document(self._require_consensus(), coverage=coverage)

    def history_json(self) -> list[dict[str, Any]]:
        return history_document(self._require_consensus())

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def promote(self, deploy_generation: int | None) -> Mapping[str, Any]:
        self._require_consensus()
        request = _Promote(
            deploy_generation if deploy_generation is not None else self.config.deploy_generation,
            Future(),
        )
        self._inbox.put(request)
        try:
            return request.done.result(timeout=30)
        except FutureTimeout:
            request.done.cancel()
            raise HttpError(
                HTTPStatus.GATEWAY_TIMEOUT,
                "busy",
                "the process did not handle the promotion within 30 s (migrating?)",
            ) from None

    def append(
        self, collection: str, body: bytes, idempotency_key: str | None = None
    ) -> Mapping[str, Any]:
        """Append the JSON-lines rows of ``body`` to ``collection`` exactly once.

        The append's identity is recorded in the shard's write ledger with the rows, so a lost
        answer is resolved by it. With ``idempotency_key`` the identity derives from the key
        (and the body): a retry with the same key and body returns the first answer
        (``replayed``) and writes nothing, while its append is among the last
        ``WRITE_MEMORY`` of the collection; the same key with another body is refused (422).
        """
        leadership = self._leadership
        if leadership is None:
            raise HttpError(
                HTTPStatus.CONFLICT,
                "read-only",
                f"process {self.config.process_id} is read-only: append through the leader",
                state=self._state.value,
            )
        if self._state is not State.SERVING:
            raise HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "writes-paused",
                f"leader writes are paused: state is {self._state.value}",
                state=self._state.value,
            )
        builtin = self._builtin(collection)
        identity = WriteIdentity.of(idempotency_key, body)
        table = rows_to_table(body, builtin.schema)
        # A session suspended for a moment (its ZooKeeper server died, the client moves to
        # another) pauses the request rather than failing it: every attempt waits up to a
        # third of the session timeout for the session, and a ConnectionLoss is retried by
        # the write's identity. Only a session still suspended after that answers 503.
        wait = min(5.0, self.config.session_timeout / 3)
        attempts = 0
        replayed = sent = False
        shard: Shard | None = None

        def attempt() -> AppendResult:
            nonlocal attempts, replayed, sent, shard
            attempts += 1
            leadership.check(wait)
            shard = self._shard_of(builtin)
            state = shard.state()
            identity.check_reuse(state.writes.marks, collection)
            # Only an append that landed before this request is a replay; one whose answer
            # this request lost (found on a later attempt) is this request's own write.
            landed = state.writes.find(identity.write_id) if attempts == 1 else None
            if landed is not None:
                replayed = True
                return AppendResult(True, landed.upper, state, landed, replayed=True)
            upper = state.upper
            batch = table.append_column(
                pa.field(TS, pa.uint64(), nullable=False),
                pa.array([upper] * table.num_rows, pa.uint64()),
            ).append_column(
                pa.field(DIFF, pa.int64(), nullable=False),
                pa.array([1] * table.num_rows, pa.int64()),
            )
            leadership.check(wait)
            # The id of this release's schema, not the latest: a newer leader that registered
            # a schema on this shard and crashed before its switch must not stop our writes.
            schema_id = find_schema_id(state, builtin.schema)
            if schema_id is None:
                # Registered only inside a wider schema (migrate.registration_schema): write
                # that one, the fields this release does not know as nulls.
                schema_id = state.schema_id
                batch = migrate_batch(batch, builtin.schema, state.live_schema, projection=True)
            sent = True
            result = shard.compare_and_append(
                batch,
                upper,
                upper + 1,
                schema_id=schema_id,
                fence=leadership.fence,
                write_id=identity.write_id,
            )
            if not result.ok:
                raise VersionMismatchError(
                    f"upper of {shard.shard_id} moved to {result.upper}",
                    key=shard.key,
                    upper=result.upper,
                )
            return result

        try:
            result = self._append_retry(attempt)
        except ConnectionLostError as exc:
            if sent:
                raise  # an attempt may have landed: the outcome is unknown, not refused
            raise HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "writes-paused",
                f"leader writes are paused: the ZooKeeper session is suspended (waited {wait:g} s)",
                state=self._state.value,
            ) from exc
        assert result.mark is not None and shard is not None
        if not replayed:
            self.metrics.rows_appended.labels(collection=collection).inc(table.num_rows)
        return {
            "collection": collection,
            "shard_id": shard.shard_id,
            "rows": result.mark.rows,
            "ts": result.mark.lower,
            "upper": result.mark.upper,
            "replayed": replayed,
        }

    def read(self, collection: str, as_of: int | None) -> Iterable[Mapping[str, Any]]:
        builtin = self._builtin(collection)
        shard = self._shard_of(builtin)
        reads_with = find_schema_id(shard.state(), builtin.schema)
        with shard.lease(holder=self.config.process_id, as_of=as_of, schema_id=reads_with):
            if as_of is None and shard.state().upper == 0:
                return []
            table = shard.snapshot(as_of)
        source = pa.schema([f for f in table.schema if f.name not in (TS, DIFF)])
        if not source.equals(builtin.schema):
            table = migrate_batch(table, source, builtin.schema, projection=True)
        return [{k: jsonable(v) for k, v in row.items()} for row in table.to_pylist()]

    def _builtin(self, collection: str) -> Builtin:
        builtin = self.release.builtin(collection)
        if builtin is None:
            raise HttpError(
                HTTPStatus.NOT_FOUND,
                "unknown-collection",
                f"release {self.release.version} has no builtin collection {collection} "
                "(name it SCHEMA.NAME)",
                collection=collection,
            )
        return builtin

    def _shard_of(self, builtin: Builtin) -> Shard:
        """The shard this process reads and writes for ``builtin``.

        A follower reads its own replacement shard where it has one (what it will serve once
        promoted); otherwise the collection's shard in the catalog.
        """
        consensus = self._require_consensus()
        assert self._blob is not None
        check = self._check
        if self._leadership is None and check is not None:
            shard_id = check.replacement_shards.get(builtin.global_id)
            if shard_id is not None:
                return Shard(consensus, self._blob, shard_id)
        found = read_catalog(consensus)
        ref = found[0].collections.get(builtin.global_id) if found else None
        if ref is None:
            raise HttpError(
                HTTPStatus.NOT_FOUND,
                "no-shard",
                f"collection {builtin.name} has no shard yet (environment not bootstrapped, or "
                "the builtin is new in this release and not promoted)",
                collection=builtin.name,
            )
        return Shard(consensus, self._blob, ref.shard_id)
