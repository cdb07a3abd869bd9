"""The core of a shard handle: its state, batches, rollups and the CAS every change goes through."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Check, Consensus, Fence, decode_json, encode_json
from catalog.environment import SHARDS_KEY
from catalog.errors import (
    CorruptBlobError,
    VersionMismatchError,
)
from catalog.retry import CasRetry
from catalog.shard.ledger import WRITE_MEMORY
from catalog.shard.ops import create_op, evolve_op
from catalog.shard.state import (
    MAX_ROLLUPS,
    ROLLUP_THRESHOLD,
    BatchRef,
    EvolveResult,
    RollupRef,
    ShardState,
    _shard_error,
    shard_key,
)
from catalog.shard.stored import change_ops, read_states

log = structlog.get_logger(__name__)


@attrs.define
class ShardCore:
    """What every concern of a :class:`~catalog.shard.Shard` handle builds on.

    Handles are cheap and hold no durable state (only a cache of immutable rollups); create one
    per thread or share one. ``rollup_threshold``, ``max_rollups`` and ``write_memory`` exist for
    tests; every writer of a shard should use the same values (any values are correct, only
    sizes, and how long a lost answer stays resolvable, differ).
    """

    consensus: Consensus
    blob: BlobStore
    shard_id: str
    retry: Callable[[], CasRetry] = CasRetry
    rollup_threshold: int = ROLLUP_THRESHOLD
    max_rollups: int = MAX_ROLLUPS
    write_memory: int = WRITE_MEMORY
    _rollups: dict[str, tuple[BatchRef, ...]] = attrs.field(factory=dict, init=False)

    @property
    def key(self) -> str:
        return shard_key(self.shard_id)

    @property
    def _log(self) -> Any:
        return log.bind(shard=self.shard_id)

    def create(
        self, schema: pa.Schema, *, fence: Fence | None = None, exist_ok: bool = False
    ) -> ShardState:
        """Create the shard with first schema ``schema`` (id 0), upper 0, since 0.

        With ``exist_ok`` an existing shard is returned as is; otherwise ShardError (reason
        ``exists``).
        """
        op, state = create_op(self.shard_id, schema)
        self.consensus.ensure(SHARDS_KEY)
        try:
            self.consensus.commit([op], fence=fence)
        except VersionMismatchError as exc:
            if exist_ok:
                return self.state()
            raise _shard_error(
                f"shard {self.shard_id} already exists", self.shard_id, "exists"
            ) from exc
        self._log.info("shard_created", schema_fields=schema.names)
        return state

    def state(self) -> ShardState:
        """The current state; ShardError (reason ``not-found``) when the shard does not exist."""
        found = read_states(self.consensus, [self.shard_id])[self.shard_id]
        if found is None:
            raise _shard_error(f"shard {self.shard_id} does not exist", self.shard_id, "not-found")
        return found

    def exists(self) -> bool:
        return self.consensus.exists(self.key)

    def batches(self, state: ShardState | None = None) -> list[BatchRef]:
        """Every batch of ``state`` (default: current), rolled-up ones first, in append order."""
        state = self.state() if state is None else state
        out: list[BatchRef] = []
        for rollup in state.rollups:
            out.extend(self._rollup_entries(rollup))
        out.extend(state.batches)
        return out

    def _rollup_entries(self, rollup: RollupRef) -> tuple[BatchRef, ...]:
        cached = self._rollups.get(rollup.name)
        if cached is None:
            raw = decode_json(self.blob.get_bytes(rollup.key(self.shard_id)))
            cached = tuple(BatchRef.from_json(b) for b in raw["batches"])
            if len(cached) != rollup.batches:
                raise CorruptBlobError(
                    f"rollup {rollup.key(self.shard_id)} lists {len(cached)} batches, "
                    f"the state recorded {rollup.batches}",
                    key=rollup.key(self.shard_id),
                    reason="row-count",
                )
            self._rollups[rollup.name] = cached
        return cached

    def _write_rollup(self, entries: Sequence[BatchRef]) -> RollupRef:
        rollup = RollupRef(
            name=uuid.uuid4().hex,
            batches=len(entries),
            rows=sum(b.rows for b in entries),
            lower=min(b.lower for b in entries),
            upper=max(b.upper for b in entries),
        )
        body = encode_json({"shard_id": self.shard_id, "batches": [b.to_json() for b in entries]})
        self.blob.put_bytes(rollup.key(self.shard_id), body)
        self._rollups[rollup.name] = tuple(entries)
        return rollup

    def _cas(
        self, old: ShardState, new: ShardState, fence: Fence | None, guards: Sequence[Check] = ()
    ) -> ShardState:
        ops, new = change_ops(old, new)
        if ops or guards:
            self.consensus.commit([*ops, *guards], fence=fence)
        return new

    def _check_guards(self, guards: Sequence[Check]) -> None:
        """Raise ShardError (``guard-moved``) when a guard's key is gone or at another version."""
        if not guards:
            return
        found = self.consensus.get_many([g.key for g in guards])
        moved = []
        for guard in guards:
            current = found[guard.key]
            if current is None or (guard.version >= 0 and current.version != guard.version):
                moved.append(guard.key)
        if moved:
            raise _shard_error(
                f"append to shard {self.shard_id} refused: {', '.join(moved)} changed",
                self.shard_id,
                "guard-moved",
                keys=moved,
            )

    def _update(
        self, change: Callable[[ShardState], ShardState | None], fence: Fence | None
    ) -> ShardState:
        """Read, apply ``change`` (None: nothing to do), CAS; retried on lost races."""

        def attempt() -> ShardState:
            current = self.state()
            new = change(current)
            return current if new is None else self._cas(current, new, fence)

        return self.retry()(attempt)

    def compare_and_evolve_schema(
        self, expected_id: int, schema: pa.Schema, *, fence: Fence | None = None
    ) -> EvolveResult:
        """Register live ``schema`` as the next schema id if the latest id is ``expected_id``.

        Identical to the latest: ok, no write. Latest id differs: not ok, carrying the current
        id and schema. Incompatible with the history: SchemaIncompatibleError. Races with other
        writers that leave the latest id unchanged are retried internally.
        """

        def attempt() -> EvolveResult:
            current = self.state()
            if current.schema_id != expected_id:
                return EvolveResult(False, current.schema_id, current.live_schema, current)
            op, new = evolve_op(current, schema)
            if op is not None:
                self.consensus.commit([op], fence=fence)
                self._log.info("schema_evolved", schema_id=new.schema_id)
            return EvolveResult(True, new.schema_id, new.live_schema, new)

        return self.retry()(attempt)

    def _packed(
        self, state: ShardState, batches: Sequence[BatchRef]
    ) -> tuple[ShardState, list[str]]:
        """``state`` listing exactly ``batches``, the older ones rolled up if there are many."""
        if len(batches) <= self.rollup_threshold:
            return attrs.evolve(state, batches=tuple(batches), rollups=()), []
        cut = ((len(batches) - 1) // self.rollup_threshold) * self.rollup_threshold
        rollup = self._write_rollup(batches[:cut])
        new = attrs.evolve(state, batches=tuple(batches[cut:]), rollups=(rollup,))
        return new, [rollup.key(self.shard_id)]
