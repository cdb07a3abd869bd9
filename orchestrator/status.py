"""The upgrade status, read from ZooKeeper alone; its JSON and rich-table renderings.

:func:`read_status` answers "what is the upgrade status?" without asking any sidecar: it reads
the environment's catalog, epoch, promotion target, process nodes, shard states, finalization
queue and event log in two pipelined round trips (never one per collection), into the frozen
:class:`UpgradeStatus`. ``UpgradeStatus.to_json()`` is the ``status --json`` contract of
DESIGN.md section 8 (plus extra fields); :func:`render_table` is the terminal view;
:func:`watch_status` drives ``status --watch`` from ZooKeeper watches with a 1 s refresh.

Fields relied on in nodes other modules write:

* ``processes/<id>``: the process-status JSON of the orchestrator contract (``id``, ``version``,
  ``deploy_generation``, ``mode``, ``state``, ``phase``, ``phase_since``, ``plan``, ``error``,
  ``host``, ``pid``, ``session``, ``epoch``, ``http``, ``heartbeat``, ``started_at``); missing
  fields read as null.
* ``shards/<shard_id>``: the shard state JSON; its ``schemas`` list (one entry per registered
  schema) gives the current schema id ``len(schemas) - 1``. ``schema_count`` (an int) is
  accepted too; anything else reads as an unknown (null) schema id.
* a process's ``plan`` (``CheckResult.summary()``): per-collection mechanisms are taken from a
  ``migrations`` or ``collections`` list of ``{"global_id", "name", "mechanism"}`` objects, or a
  ``collections`` mapping ``global_id -> {"mechanism": ...}``; other shapes are shown as is.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs
from kazoo.exceptions import NoNodeError
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from catalog.consensus import CONNECTION_ERRORS, Consensus, Versioned
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    EVENTS_KEY,
    FINALIZE_KEY,
    MIGRATION_SHARD_ID,
    PROCESSES_KEY,
    PROMOTION_KEY,
    SHARDS_KEY,
    CatalogState,
)
from catalog.errors import BadInputError, BlobError, ConnectionLostError, ShardError
from orchestrator.election import EpochInfo
from orchestrator.events import UpgradeEvent, read_events, record_event

__all__ = [
    "CatalogSummary",
    "CollectionStatus",
    "LeaderStatus",
    "MigrationEntry",
    "ProcessStatus",
    "UpgradeEvent",
    "UpgradeStatus",
    "plan_mechanisms",
    "read_events",
    "read_status",
    "record_event",
    "render_table",
    "schema_id_of",
    "watch_status",
]

DEFAULT_EVENTS: Final = 20
DEFAULT_ROWS: Final = 20
UNCHANGED: Final = "unchanged"

_STATE_STYLE: Final = {
    "starting": "dim",
    "checking": "cyan",
    "ready": "green",
    "migrating": "yellow",
    "serving": "bold green",
    "fenced": "magenta",
    "failed": "bold red",
}


# --- the model ---------------------------------------------------------------------------------


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@attrs.frozen
class ProcessStatus:
    """One registered process, as its ephemeral ``processes/<id>`` node says."""

    id: str
    version: str | None = None
    deploy_generation: int | None = None
    mode: str | None = None
    state: str | None = None
    phase: str | None = None
    phase_since: float | None = None
    plan: Any = None
    error: Any = None
    host: str | None = None
    pid: int | None = None
    session: str | None = None
    epoch: int | None = None
    http: str | None = None
    heartbeat: float | None = None
    started_at: float | None = None

    @classmethod
    def from_json(cls, process_id: str, data: Mapping[str, Any]) -> ProcessStatus:
        return cls(
            id=str(data.get("id") or process_id),
            version=_opt_str(data.get("version")),
            deploy_generation=_opt_int(data.get("deploy_generation")),
            mode=_opt_str(data.get("mode")),
            state=_opt_str(data.get("state")),
            phase=_opt_str(data.get("phase")),
            phase_since=_opt_float(data.get("phase_since")),
            plan=data.get("plan"),
            error=data.get("error"),
            host=_opt_str(data.get("host")),
            pid=_opt_int(data.get("pid")),
            session=_opt_str(data.get("session")),
            epoch=_opt_int(data.get("epoch")),
            http=_opt_str(data.get("http")),
            heartbeat=_opt_float(data.get("heartbeat")),
            started_at=_opt_float(data.get("started_at")),
        )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False)


@attrs.frozen
class LeaderStatus:
    """The leader the epoch znode names, joined with its process node when it is registered."""

    epoch: EpochInfo
    process: ProcessStatus | None

    @property
    def id(self) -> str | None:
        return self.epoch.leader

    @property
    def registered(self) -> bool:
        """False when the leader's process is gone (crashed or stepped down, not yet replaced)."""
        return self.process is not None

    def to_json(self) -> dict[str, Any]:
        base = self.process.to_json() if self.process is not None else {"id": self.epoch.leader}
        return {
            **base,
            "id": self.epoch.leader,
            "deploy_generation": self.epoch.deploy_generation,
            "epoch": self.epoch.epoch,
            "session": self.epoch.session,
            "host": self.epoch.host or base.get("host"),
            "pid": self.epoch.pid if self.epoch.pid is not None else base.get("pid"),
            "taken_over_at": self.epoch.taken_over_at,
            "registered": self.registered,
        }


@attrs.frozen
class CatalogSummary:
    """The durable catalog's headline: ``Vc``, ``Gc``, and the fencing epoch."""

    version: str | None
    deploy_generation: int | None
    epoch: int | None
    promotion_target: int | None
    blob_uri: str | None = None
    updated_at: float | None = None
    collections: int = 0

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class CollectionStatus:
    """One builtin collection: where it lives now and its shard's current schema id."""

    global_id: str
    name: str
    shard_id: str
    schema_id: int | None
    mechanism: str | None = None  # from the focus process's plan; None when no plan is known

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class MigrationEntry:
    """A migration-shard entry ``(GlobalId, Version, DeployGeneration) -> ShardId``."""

    global_id: str
    version: str
    deploy_generation: int
    shard_id: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class UpgradeStatus:
    """Everything ``status`` shows, read in one pass at ``read_at``."""

    environment: str
    catalog: CatalogSummary
    bootstrapped: bool
    leader: LeaderStatus | None
    processes: tuple[ProcessStatus, ...]
    collections: tuple[CollectionStatus, ...]
    migration_entries: tuple[MigrationEntry, ...]
    pending_finalization: tuple[str, ...]
    events: tuple[UpgradeEvent, ...]
    read_at: float
    plan_source: str | None = None  # the process whose plan gave the collections' mechanisms
    warnings: tuple[str, ...] = ()  # parts that could not be read (shown, never fatal)

    def to_json(self) -> dict[str, Any]:
        """The ``status --json`` document (DESIGN.md section 8, plus extra fields)."""
        return {
            "environment": self.environment,
            "bootstrapped": self.bootstrapped,
            "read_at": self.read_at,
            "catalog": self.catalog.to_json(),
            "leader": None if self.leader is None else self.leader.to_json(),
            "processes": [p.to_json() for p in self.processes],
            "collections": [c.to_json() for c in self.collections],
            "migration_entries": [e.to_json() for e in self.migration_entries],
            "pending_finalization": list(self.pending_finalization),
            "events": [e.to_json() for e in self.events],
            "plan_source": self.plan_source,
            "warnings": list(self.warnings),
        }


# --- reading -------------------------------------------------------------------------------------


def schema_id_of(shard_state: Any) -> int | None:
    """The current schema id of a shard state JSON (``len(schemas) - 1``), None if unknown."""
    if not isinstance(shard_state, Mapping):
        return None
    schemas = shard_state.get("schemas")
    if isinstance(schemas, list) and schemas:
        return len(schemas) - 1
    count = shard_state.get("schema_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count - 1
    return None


def plan_mechanisms(plan: Any) -> dict[str, str]:
    """``global_id`` and ``name`` -> mechanism, from a plan summary (shapes: module doc)."""
    if not isinstance(plan, Mapping):
        return {}
    out: dict[str, str] = {}
    for field in ("migrations", "collections"):
        entries = plan.get(field)
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, Mapping) and entry.get("mechanism"):
                    for key in ("global_id", "name"):
                        if entry.get(key):
                            out[str(entry[key])] = str(entry["mechanism"])
        elif isinstance(entries, Mapping):
            for key, entry in entries.items():
                mechanism = entry.get("mechanism") if isinstance(entry, Mapping) else entry
                if isinstance(mechanism, str):
                    out[str(key)] = mechanism
    return out


def _children_many(consensus: Consensus, keys: Iterable[str]) -> dict[str, list[str]]:
    """Children of several keys in one pipelined round trip (missing keys: no children)."""
    client = consensus.client
    asyncs = [(key, client.get_children_async(consensus.path(key))) for key in keys]
    out: dict[str, list[str]] = {}
    try:
        for key, result in asyncs:
            try:
                out[key] = sorted(result.get())
            except NoNodeError:
                out[key] = []
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError("ZooKeeper did not answer listing the environment") from exc
    return out


def _json_of(found: Versioned | None) -> Any:
    if found is None or not found.value:
        return None
    try:
        return found.json()
    except ValueError:  # a node someone wrote by hand; shown as missing, not a crash
        return None


def _environment_name(consensus: Consensus) -> str:
    return consensus.root.rstrip("/").rsplit("/", 1)[-1]


def _focus_process(
    processes: Iterable[ProcessStatus], leader_id: str | None
) -> ProcessStatus | None:
    """Whose plan describes the upgrade: the leader's, else the newest generation's."""
    with_plan = [p for p in processes if p.plan]
    for process in with_plan:
        if process.id == leader_id:
            return process
    if not with_plan:
        return None
    return max(with_plan, key=lambda p: (p.deploy_generation or -1, p.id))


def read_migration_entries(
    consensus: Consensus, blob_uri: str | None, *, shard_exists: bool = True
) -> tuple[tuple[MigrationEntry, ...], str | None]:
    """The migration shard's live entries (their batches are Parquet blobs), and a warning.

    Empty when the environment has no migration shard (``shard_exists`` False skips the
    look-up). A blob store that cannot be read gives no entries and a warning: status still
    shows everything ZooKeeper holds.
    """
    if blob_uri is None or not shard_exists:
        return (), None
    from catalog.blob import BlobStore
    from catalog.migration import MigrationShard

    try:
        found = MigrationShard(consensus, BlobStore.from_uri(blob_uri)).entries()
    except (BlobError, ShardError, BadInputError) as exc:
        return (), f"migration shard entries unreadable: {exc.message}"
    entries = (
        MigrationEntry(
            global_id=e.global_id,
            version=str(e.version),
            deploy_generation=int(e.deploy_generation),
            shard_id=e.shard_id,
        )
        for e in found
    )
    return tuple(sorted(entries, key=attrs.astuple)), None


def read_status(consensus: Consensus, *, events: int = DEFAULT_EVENTS) -> UpgradeStatus:
    """The environment's upgrade status, from ZooKeeper alone, in two pipelined round trips."""
    read_at = time.time()
    # Round trip 1: the headline nodes and the directories.
    heads = consensus.get_many([CATALOG_KEY, EPOCH_KEY, PROMOTION_KEY])
    children = _children_many(consensus, [PROCESSES_KEY, FINALIZE_KEY])
    catalog_json = _json_of(heads[CATALOG_KEY])
    catalog = CatalogState.from_json(catalog_json) if isinstance(catalog_json, Mapping) else None
    epoch_found = heads[EPOCH_KEY]
    epoch = EpochInfo.from_versioned(epoch_found) if epoch_found is not None else None
    promotion_json = _json_of(heads[PROMOTION_KEY])
    promotion = (
        _opt_int(promotion_json.get("deploy_generation"))
        if isinstance(promotion_json, Mapping)
        else None
    )
    # Round trip 2: every process node and every referenced shard's state.
    process_keys = [f"{PROCESSES_KEY}/{name}" for name in children[PROCESSES_KEY]]
    shard_ids = sorted(catalog.shard_ids()) if catalog is not None else []
    shard_keys = [f"{SHARDS_KEY}/{shard_id}" for shard_id in shard_ids]
    migration_key = f"{SHARDS_KEY}/{MIGRATION_SHARD_ID}"
    if catalog is not None:
        shard_keys.append(migration_key)
    found = consensus.get_many([*process_keys, *shard_keys])
    processes: list[ProcessStatus] = []
    for name, key in zip(children[PROCESSES_KEY], process_keys, strict=True):
        data = _json_of(found[key])
        if isinstance(data, Mapping):  # a node gone between listing and reading is skipped
            processes.append(ProcessStatus.from_json(name, data))
    processes.sort(key=lambda p: (p.deploy_generation or -1, p.id))
    leader = None
    if epoch is not None:
        leader = LeaderStatus(
            epoch=epoch, process=next((p for p in processes if p.id == epoch.leader), None)
        )
    focus = _focus_process(processes, epoch.leader if epoch is not None else None)
    mechanisms = plan_mechanisms(focus.plan) if focus is not None else {}
    collections: list[CollectionStatus] = []
    if catalog is not None:
        for gid, ref in sorted(catalog.collections.items()):
            mechanism = mechanisms.get(gid) or mechanisms.get(ref.name)
            if focus is not None and mechanism is None:
                mechanism = UNCHANGED
            collections.append(
                CollectionStatus(
                    global_id=gid,
                    name=ref.name,
                    shard_id=ref.shard_id,
                    schema_id=schema_id_of(_json_of(found[f"{SHARDS_KEY}/{ref.shard_id}"])),
                    mechanism=mechanism,
                )
            )
    summary = CatalogSummary(
        version=catalog.version if catalog is not None else None,
        deploy_generation=catalog.deploy_generation if catalog is not None else None,
        epoch=epoch.epoch if epoch is not None else None,
        promotion_target=promotion,
        blob_uri=catalog.blob_uri if catalog is not None else None,
        updated_at=(catalog.updated_at or None) if catalog is not None else None,
        collections=len(collections),
    )
    entries, warning = read_migration_entries(
        consensus,
        catalog.blob_uri if catalog is not None else None,
        shard_exists=found.get(migration_key) is not None,
    )
    return UpgradeStatus(
        environment=_environment_name(consensus),
        catalog=summary,
        bootstrapped=catalog is not None,
        leader=leader,
        processes=tuple(processes),
        collections=tuple(collections),
        migration_entries=entries,
        pending_finalization=tuple(children[FINALIZE_KEY]),
        events=tuple(read_events(consensus, events)),
        read_at=read_at,
        plan_source=focus.id if focus is not None else None,
        warnings=(warning,) if warning else (),
    )


# --- watching ------------------------------------------------------------------------------------


def _arm_watches(consensus: Consensus, changed: threading.Event) -> None:
    """One-shot watches on everything status shows (except shard states), set pipelined."""
    client = consensus.client

    def fire(_event: object) -> None:
        changed.set()

    pending = [
        client.exists_async(consensus.path(key), watch=fire)
        for key in (CATALOG_KEY, EPOCH_KEY, PROMOTION_KEY)
    ]
    listings = [
        client.get_children_async(consensus.path(key), watch=fire)
        for key in (PROCESSES_KEY, FINALIZE_KEY, EVENTS_KEY)
    ]
    names: list[str] = []
    try:
        for result in pending:
            result.get()
        for key, result in zip((PROCESSES_KEY, FINALIZE_KEY, EVENTS_KEY), listings, strict=True):
            try:
                listed = result.get()
            except NoNodeError:
                client.exists(consensus.path(key), watch=fire)
                continue
            if key == PROCESSES_KEY:
                names = list(listed)
        for result in [
            client.exists_async(consensus.path(f"{PROCESSES_KEY}/{name}"), watch=fire)
            for name in names
        ]:
            result.get()
    except CONNECTION_ERRORS as exc:
        raise ConnectionLostError("ZooKeeper did not answer setting status watches") from exc


def watch_status(
    consensus: Consensus,
    on_status: Callable[[UpgradeStatus], None],
    stop: threading.Event,
    *,
    refresh: float = 1.0,
    events: int = DEFAULT_EVENTS,
) -> None:
    """Call ``on_status`` with a fresh status on every change (watches) and every ``refresh`` s.

    Runs until ``stop`` is set. The timed refresh keeps "since" ages and heartbeats current.
    """
    changed = threading.Event()
    while not stop.is_set():
        changed.clear()
        _arm_watches(consensus, changed)
        on_status(read_status(consensus, events=events))
        deadline = time.monotonic() + refresh
        while not stop.is_set() and not changed.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            changed.wait(min(remaining, 0.1))


# --- rendering ------------------------------------------------------------------------------------


def _age(then: float | None, now: float) -> str:
    if then is None:
        return "-"
    seconds = max(0.0, now - then)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.1f}d ago"


def _clock(then: float) -> str:
    return dt.datetime.fromtimestamp(then, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _error_text(error: Any) -> str:
    if not error:
        return ""
    if isinstance(error, Mapping):
        name = error.get("error")
        message = error.get("message")
        text = f"{name}: {message}" if name and message else str(message or name or dict(error))
        if error.get("suggestion"):
            text += f" (fix: {error['suggestion']})"
        return text
    return str(error)


def _state_text(state: str | None) -> Text:
    return Text(_dash(state), style=_STATE_STYLE.get(state or "", ""))


def _catalog_table(status: UpgradeStatus) -> Table:
    catalog = status.catalog
    table = Table(title="catalog", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("version", _dash(catalog.version))
    table.add_row("deploy generation", _dash(catalog.deploy_generation))
    table.add_row("epoch", _dash(catalog.epoch))
    table.add_row("promotion target", _dash(catalog.promotion_target))
    table.add_row("collections", str(catalog.collections))
    table.add_row("blob storage", _dash(catalog.blob_uri))
    leader = status.leader
    if leader is None:
        table.add_row("leader", "none")
    else:
        where = f"{_dash(leader.epoch.host)} pid {_dash(leader.epoch.pid)}"
        state = leader.process.state if leader.process is not None else "not registered"
        table.add_row(
            "leader",
            f"{leader.id} (generation {leader.epoch.deploy_generation}, epoch "
            f"{leader.epoch.epoch}, session {_dash(leader.epoch.session)}, {where}, {state})",
        )
    return table


def _processes_table(status: UpgradeStatus, now: float) -> Table:
    table = Table(title=f"processes ({len(status.processes)})", title_justify="left")
    for column in (
        "id",
        "version",
        "gen",
        "mode",
        "state",
        "phase",
        "since",
        "host/pid",
        "session",
    ):
        table.add_column(column, no_wrap=column != "id", overflow="fold")
    table.add_column("error", overflow="fold", ratio=2)
    for p in status.processes:
        table.add_row(
            p.id,
            _dash(p.version),
            _dash(p.deploy_generation),
            _dash(p.mode),
            _state_text(p.state),
            _dash(p.phase),
            _age(p.phase_since, now),
            f"{_dash(p.host)}/{_dash(p.pid)}",
            _dash(p.session),
            Text(_error_text(p.error), style="red"),
        )
    return table


def _counts(values: Iterable[Any]) -> str:
    counted = Counter("-" if v is None else str(v) for v in values)
    return ", ".join(f"{key}: {count}" for key, count in sorted(counted.items()))


def _collections_tables(status: UpgradeStatus, all_rows: bool, limit: int) -> list[Table]:
    collections = status.collections
    summary = Table(
        title=f"collections ({len(collections)})", show_header=False, title_justify="left"
    )
    summary.add_column("field", style="bold")
    summary.add_column("value", overflow="fold")
    if status.plan_source is not None:
        summary.add_row(
            f"mechanism (plan of {status.plan_source})", _counts(c.mechanism for c in collections)
        )
    summary.add_row("schema id", _counts(c.schema_id for c in collections))
    summary.add_row("migration entries", str(len(status.migration_entries)))
    summary.add_row("pending finalization", str(len(status.pending_finalization)))
    tables = [summary]
    shown = collections if all_rows else collections[:limit]
    if shown:
        hidden = len(collections) - len(shown)
        title = "collections" + (
            f" (first {len(shown)}; --all shows {hidden} more)" if hidden else ""
        )
        rows = Table(title=title, title_justify="left")
        for column in ("global id", "name", "shard", "schema id", "mechanism"):
            rows.add_column(column, overflow="fold")
        for c in shown:
            rows.add_row(c.global_id, c.name, c.shard_id, _dash(c.schema_id), _dash(c.mechanism))
        tables.append(rows)
    entries = status.migration_entries if all_rows else status.migration_entries[:limit]
    if entries:
        table = Table(title="migration shard entries", title_justify="left")
        for column in ("global id", "version", "generation", "shard"):
            table.add_column(column, overflow="fold")
        for e in entries:
            table.add_row(e.global_id, e.version, str(e.deploy_generation), e.shard_id)
        tables.append(table)
    pending = status.pending_finalization if all_rows else status.pending_finalization[:limit]
    if pending:
        table = Table()
        table.add_column("pending finalization (shard)", overflow="fold")
        for shard_id in pending:
            table.add_row(shard_id)
        tables.append(table)
    return tables


def _events_table(status: UpgradeStatus) -> Table:
    table = Table(title=f"recent events ({len(status.events)})", title_justify="left")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("details", overflow="fold")
    for event in status.events:
        details = " ".join(f"{k}={v}" for k, v in sorted(event.fields.items()))
        table.add_row(_clock(event.at), event.kind, details)
    return table


def render_table(
    status: UpgradeStatus,
    *,
    all_rows: bool = False,
    limit: int = DEFAULT_ROWS,
    now: float | None = None,
) -> RenderableType:
    """The terminal view: catalog, processes, collections summary (first ``limit`` rows unless
    ``all_rows``), migration entries, pending finalizations and recent events."""
    now = status.read_at if now is None else now
    parts: list[RenderableType] = []
    if not status.bootstrapped:
        parts.append(
            Text(f"environment {status.environment} is empty (not bootstrapped)", style="bold")
        )
        if status.catalog.promotion_target is not None or status.leader is not None:
            parts.append(_catalog_table(status))
    else:
        parts.append(Text(f"environment {status.environment}", style="bold"))
        parts.append(_catalog_table(status))
    if status.processes:
        parts.append(_processes_table(status, now))
    elif status.bootstrapped:
        parts.append(Text("no process registered"))
    if status.bootstrapped:
        parts.extend(_collections_tables(status, all_rows, limit))
    if status.events:
        parts.append(_events_table(status))
    for warning in status.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    return Group(*parts)
