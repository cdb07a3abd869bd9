"""Reads of a shard: snapshots as of a time, migrated to a reader schema and consolidated."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from catalog.blob import BlobStore
from catalog.consensus import (
    CONNECTION_ERRORS,
)
from catalog.consensus.watch import (
    NOT_YET,
    NotYet,
    WaitTimeout,
    Watch,
    wait_until,
    watched_data,
)
from catalog.consolidate import (
    DIFF,
    TS,
    consolidate,
    is_nested,
    repeated,
)
from catalog.errors import (
    BlobMissingError,
    ConnectionLostError,
    CorruptBlobError,
)
from catalog.retry import Retry
from catalog.schema import (
    check_reader,
    migrate_batch,
    partner_child,
)
from catalog.schema.restore import restore_table
from catalog.schema.walk import as_data_type
from catalog.shard.ops import finalized_error
from catalog.shard.shard_access import ShardAccess
from catalog.shard.state import (
    READ_ATTEMPTS,
    BatchRef,
    ShardState,
    body_key,
    shard_error,
    update_schema,
)
from catalog.shard.updates import (
    already_consolidated,
)

log = structlog.get_logger(__name__)


def snapshot_reader(state: ShardState, reader_schema: pa.Schema | None) -> pa.Schema:
    """The schema a snapshot of ``state`` returns: ``reader_schema`` once fenced against the
    stored schemas (default: the latest live schema); a finalized shard is refused."""
    if state.finalized:
        raise finalized_error(state)
    if reader_schema is None:
        return state.live_schema
    check_reader(state.schema, reader_schema)
    return reader_schema


def snapshot_time(state: ShardState, as_of: int | None) -> int | None:
    """``as_of`` checked against the frontiers (default ``upper - 1``; None: an empty shard):
    it must be complete (below ``upper``) and not compacted away (at or above ``since``)."""
    if as_of is None:
        return None if state.upper == 0 else state.upper - 1
    if as_of >= state.upper:
        raise shard_error(
            f"as_of {as_of} not yet complete: upper is {state.upper}",
            state.shard_id,
            "not-complete",
            as_of=as_of,
            upper=state.upper,
        )
    if as_of < state.since:
        raise shard_error(
            f"as_of {as_of} is below since {state.since}: those times were compacted",
            state.shard_id,
            "compacted",
            as_of=as_of,
            since=state.since,
        )
    return as_of


def by_writer(refs: Sequence[BatchRef]) -> dict[tuple[int, bool], list[BatchRef]]:
    """``refs`` grouped by schema id and by whether Spark's writer wrote them (the files of a
    group are read together: they store the same types)."""
    groups: dict[tuple[int, bool], list[BatchRef]] = {}
    for ref in refs:
        groups.setdefault((ref.schema_id, ref.spark_types), []).append(ref)
    return groups


def read_batches(
    blob: BlobStore,
    shard_id: str,
    refs: Sequence[BatchRef],
    source: pa.Schema,
    columns: Sequence[str],
) -> pa.Table:
    """The ``columns`` of batches ``refs`` (one group of :func:`by_writer`, of live schema
    ``source``) in the types the shard stores: a Spark-written group is restored to them."""
    table = blob.get_batches(
        [r.key(shard_id) for r in refs], columns=list(columns), expected_rows=[r.rows for r in refs]
    )
    if refs and refs[0].spark_types:
        stored = update_schema(source)
        table = restore_table(table, pa.schema([stored.field(n) for n in columns]))
    return table


def wait_for_upper(shard: ShardAccess, as_of: int, timeout: float) -> ShardState:
    """The state once its upper passed ``as_of`` (or it was finalized), else at timeout."""
    latest = shard.state()

    def look(watch: Watch) -> ShardState | NotYet:
        nonlocal latest
        # The upper lives in the body of a split state (a finalization writes it too).
        watched = body_key(shard.shard_id) if latest.split else shard.key
        try:
            found = watched_data(shard.consensus.client, shard.consensus.path(watched), watch)
        except CONNECTION_ERRORS as exc:
            raise ConnectionLostError(f"ZooKeeper did not answer for {shard.shard_id}") from exc
        if found is None:
            raise shard_error(f"shard {shard.shard_id} does not exist", shard.shard_id, "not-found")
        latest = shard.state()
        return latest if latest.upper > as_of or latest.finalized else NOT_YET

    try:
        return wait_until(look, timeout, safety=None)
    except WaitTimeout:
        return latest


def snapshot(
    shard: ShardAccess,
    as_of: int | None = None,
    reader_schema: pa.Schema | None = None,
    *,
    timeout: float | None = None,
    state: ShardState | None = None,
) -> pa.Table:
    """The shard's contents as of ``as_of`` (default: ``upper - 1``), consolidated.

    Columns: ``reader_schema`` (default: the latest live schema), then ``_ts`` and
    ``_diff``. Every returned row has ``_ts == as_of`` and a non-zero ``_diff``: times at or
    below ``as_of`` are indistinguishable in a snapshot, so they are collapsed. A reader
    schema that is not a projection of the shard's latest schema raises ReaderFencedError.
    ``as_of >= upper`` raises ShardError (reason ``not-complete``) at once, or after waiting
    up to ``timeout`` seconds (a data watch, not polling); ``as_of < since`` raises
    ShardError (reason ``compacted``). A finalized shard raises ShardFinalizedError.
    Batches replaced under the read (compaction) make it re-read the state; hold a
    :meth:`lease` to keep finalization away during long reads (and read its ``state``: one
    read just now, instead of reading it again here).
    """
    known: ShardState = shard.state() if state is None else state

    def attempt() -> pa.Table:
        nonlocal known
        if as_of is not None and as_of >= known.upper and timeout:
            known = wait_for_upper(shard, as_of, timeout)
        return _snapshot(shard, known, as_of, reader_schema)

    def moved(exc: Exception) -> bool:
        """Blobs vanished under the read: retry on the newer state, if there is one."""
        nonlocal known
        if not isinstance(exc, BlobMissingError):
            return False
        current = shard.state()
        if current.finalized:
            raise finalized_error(current) from exc
        if current.revision == known.revision:
            return False
        shard.log.info("snapshot_state_moved", version=current.revision)
        known = current
        return True

    retry = Retry(
        retryable=(CorruptBlobError,),
        max_attempts=READ_ATTEMPTS + 1,
        deadline=None,
        base_delay=0.0,
        should_retry=moved,
    )
    return retry(attempt)


def snapshot_of(
    shard: ShardAccess,
    state: ShardState,
    as_of: int | None = None,
    reader_schema: pa.Schema | None = None,
) -> pa.Table:
    """:meth:`snapshot` of a state already read (no re-read, no wait, no retry).

    For read-then-CAS loops: the result is exactly the contents as of ``as_of`` (default
    ``state.upper - 1``) that a compare-and-append expecting ``state.upper`` builds on.
    """
    return _snapshot(shard, state, as_of, reader_schema)


def _snapshot(
    shard: ShardAccess, state: ShardState, as_of: int | None, reader_schema: pa.Schema | None
) -> pa.Table:
    reader = snapshot_reader(state, reader_schema)
    result_schema = update_schema(reader)
    time = snapshot_time(state, as_of)
    if time is None:
        return result_schema.empty_table()
    as_of = time
    refs = [b for b in shard.batches(state) if b.lower <= as_of]
    tables = load(shard, state, refs, reader, as_of=as_of, times=False)
    if not tables:
        return result_schema.empty_table()
    merged = pa.concat_tables(tables)
    if len(refs) == 1 and already_consolidated(state, refs[0], reader):
        consolidated = merged
    else:
        consolidated = consolidate(merged)
    times = repeated(as_of, pa.uint64(), consolidated.num_rows)
    columns = [*consolidated.columns[:-1], times, consolidated.column(DIFF)]
    return pa.Table.from_arrays(columns, schema=result_schema)


#: The chunks a snapshot built on the one before may have before they are made one.
_MOST_CHUNKS = 16


@attrs.frozen
class Held:
    """A latest-time snapshot kept to build the next one on (:func:`snapshot_after`): the upper
    of the state it read, its schema, and its rows, consolidated, without ``_ts``."""

    upper: int
    schema: pa.Schema
    rows: pa.Table

    @classmethod
    def of(cls, state: ShardState, table: pa.Table) -> Held | None:
        """What to keep of ``table``, the latest snapshot of ``state``; None when ``since`` is
        past its time (a compaction may move its rows' times up among later ones)."""
        if state.upper == 0 or state.since > state.upper - 1:
            return None
        rows = table.drop_columns([TS])
        return cls(state.upper, pa.schema(list(rows.schema)[:-1]), rows)


def snapshot_after(shard: ShardAccess, state: ShardState, held: Held) -> pa.Table | None:
    """The latest snapshot of ``state`` built on ``held``, a latest snapshot of an earlier state
    of the shard, reading only the rows written since; None when it cannot be, and the caller
    takes the whole :func:`snapshot`.

    Every row written before ``held``'s upper has a time below it, and every row written since
    has one at or above it: appends are at the upper, a merge keeps its rows' times, and a
    compaction only moves times up to ``since``, which is still below ``held``'s upper
    (checked). So whatever merged them, the rows written since are the rows at or above that
    upper, and consolidation never adds one of them to an older one (their times differ). A
    batch's bounds are its rows' times: one wholly below is not read, one wholly above is read
    whole, and one a merge made of rows from both sides is read and cut at the upper. The
    rows written since are consolidated; when none equals a held one (checked on the columns
    that can be compared: not nested, no null on either side, which two equal rows share),
    their union with the held rows is consolidated too, and it is the snapshot. A schema
    change, a finalized shard, a retraction or a repeat of a held row takes the whole snapshot
    (None)."""
    reader = snapshot_reader(state, None)
    time = snapshot_time(state, None)
    if (
        time is None
        or state.finalized
        or not reader.equals(held.schema)
        or state.upper < held.upper
        or state.since >= held.upper
    ):
        return None
    newer = [b for b in shard.batches(state) if b.upper > held.upper]
    if newer:
        try:
            tables = load(shard, state, newer, reader, after=held.upper, times=False)
        except BlobMissingError:  # merged away meanwhile: the whole snapshot re-reads
            return None
        new = consolidate(pa.concat_tables(tables))
        if _may_meet(held.rows, new):
            return None
        rows = pa.concat_tables([held.rows, new]) if new.num_rows else held.rows
        if rows.num_columns and rows.column(0).num_chunks > _MOST_CHUNKS:
            rows = rows.combine_chunks()  # each read adds a chunk: every step pays for each
    else:
        rows = held.rows
    times = repeated(time, pa.uint64(), rows.num_rows)
    columns = [*rows.columns[:-1], times, rows.column(DIFF)]
    return pa.Table.from_arrays(columns, schema=update_schema(reader))


def _may_meet(held: pa.Table, new: pa.Table) -> bool:
    """Whether a row of ``new`` may equal one of ``held``: true unless some columns that a join
    compares as consolidation does (not nested, not floating point, no null on either side)
    tell them all apart."""
    if not held.num_rows or not new.num_rows:
        return False
    keys = [
        f.name
        for f in new.schema
        if f.name != DIFF
        and not is_nested(f.type)
        and not pa.types.is_dictionary(f.type)
        and not pa.types.is_floating(f.type)
        and new.column(f.name).null_count == 0
        and held.column(f.name).null_count == 0
    ]
    if not keys:
        return True
    try:
        # One column whose new values no held row has tells them apart: a probe of the held
        # rows against a set of the few new values, no table built of the held ones.
        for key in keys:
            if not pc.any(pc.is_in(held.column(key), value_set=new.column(key))).as_py():
                return False
        met = held.select(keys).join(new.select(keys), keys=keys, join_type="left semi")
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return True  # a type these kernels do not take: assume they may
    return met.num_rows > 0


def load(
    shard: ShardAccess,
    state: ShardState,
    refs: Sequence[BatchRef],
    target: pa.Schema,
    *,
    as_of: int | None = None,
    after: int | None = None,
    times: bool = True,
    on_group: Callable[[int, int], None] | None = None,
) -> list[pa.Table]:
    """The batches ``refs``, read one schema id at a time and migrated to ``target``.

    Only the columns ``target`` keeps are read (a projection's dropped columns and deleted
    fields never leave the file); without ``times`` the tables have no ``_ts`` column. Rows
    are cut to times at most ``as_of`` and at least ``after`` (None: no bound), reading
    ``_ts`` only where a batch's bounds pass them. ``on_group(rows, bytes)`` is told of each
    schema id's batches once read (a long step's progress: catalog.pipeline.pacing).
    """
    out: list[pa.Table] = []
    for (schema_id, _), group in sorted(by_writer(refs).items()):
        source = state.live(schema_id)
        below = as_of is not None and any(r.upper - 1 > as_of for r in group)
        above = after is not None and any(r.lower < after for r in group)
        cut = below or above
        carried = (TS, DIFF) if times or cut else (DIFF,)
        kept = as_data_type(source)  # a renamed field by its id or declared former name
        used = {c.name for f in target if (c := partner_child(kept, f)) is not None}
        columns = [f.name for f in source if f.name in used]
        table = read_batches(shard.blob, shard.shard_id, group, source, [*columns, *carried])
        if cut:
            ts = table.column(TS)
            if below:
                table = table.filter(pc.less_equal(ts, pa.scalar(as_of, pa.uint64())))
                ts = table.column(TS)
            if above:
                table = table.filter(pc.greater_equal(ts, pa.scalar(after, pa.uint64())))
            if not times:
                table, carried = table.drop_columns([TS]), (DIFF,)
        migrated = migrate_batch(table, source, target, passthrough=carried, projection=True)
        assert isinstance(migrated, pa.Table)
        out.append(migrated)
        if on_group is not None:
            on_group(migrated.num_rows, migrated.nbytes)
    return out
