"""Reading every environment of an ensemble in four pipelined round trips.

1. the environments: the children of ``/catalog-upgrade``;
2. for all of them at once: the catalog, the epoch, the pending upgrade, the list of processes
   and the list of event logs;
3. for all of them at once: every process node, and the listing of the read-only event logs of
   generations newer than the catalog's (usually none);
4. where it matters only: the newest event of each of those logs (how a green generation whose
   processes are gone ended: failed, refused, fenced), the promotion target where a newer
   generation runs, the upgrade history where a leader migrates (to judge its phase).

Each round trip sends all its reads before it waits for the first answer, packed in
``multiRead`` requests of a few hundred reads each (catalog.consensus.multiread), so ten thousand
environments cost four round trips of a few hundred requests, not seventy thousand. What one
environment's nodes hold is decoded by the same codecs as ``status`` (orchestrator.status.read);
a node that cannot be read or decoded becomes that environment's error, never the survey's. An
ensemble that does not answer, or stops answering, is one row with its error.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from catalog.consensus import CONNECTION_ERRORS, ROOT, Versioned
from catalog.consensus.multiread import MultiReader, ReadBatch
from catalog.environment import (
    CATALOG_KEY,
    EVENTS_KEY,
    HISTORY_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
    generation_of_catalog,
)
from catalog.errors import EXIT_REFUSED, CorruptStateError
from orchestrator.clock import MAX_CLOCK_OFFSET_SECONDS
from orchestrator.fleet.ensembles import Ensemble
from orchestrator.fleet.model import EnvironmentRow, GreenGeneration, LeaderView
from orchestrator.history import UpgradeRecord
from orchestrator.process_node import Processes, ProcessNode, decode_processes
from orchestrator.status.read import HEAD_KEYS, Heads, Readable, process_warnings
from orchestrator.zookeeper.clients import close, why_unreachable

__all__ = ["EnsembleSurvey", "survey"]

log = structlog.get_logger(__name__)

#: A live process's heartbeat is at most this old (its interval is seconds; a session that
#: stops writing expires): the margin before our clock counts as ahead of ZooKeeper's.
_HEARTBEAT_SLACK: Final = 60.0
#: Read in every environment; the others only where they matter (:func:`_later`).
_SOMETIMES: Final = (PROMOTION_KEY, HISTORY_KEY)
_ALWAYS: Final = tuple(key for key in HEAD_KEYS if key not in _SOMETIMES)


@attrs.frozen
class EnsembleSurvey:
    """One ensemble's environments as read at ``read_at``, and how long the reads took."""

    ensemble: Ensemble
    rows: tuple[EnvironmentRow, ...]
    read_at: float
    seconds: float
    error: str | None = None
    #: Seconds our clock ran ahead of ZooKeeper's when past the bound (ages were judged on
    #: ZooKeeper's clock), else None.
    clock_offset: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.ensemble.name,
            "zk": self.ensemble.zk,
            "environments": sum(1 for r in self.rows if r.environment is not None),
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "clock_offset": self.clock_offset,
        }


class _Unreachable(Exception):
    """The ensemble stopped answering during the survey."""


def survey(
    ensemble: Ensemble, *, timeout: float, client: KazooClient | None = None
) -> EnsembleSurvey:
    """Every environment of ``ensemble``; with ``client`` (started), reads through it (the
    fleet server keeps one per ensemble), else connects for this survey and closes."""
    started = time.perf_counter()
    read_at = time.time()
    own = client is None
    try:
        if client is None:
            client = ensemble.client()
            try:
                client.start(timeout=timeout)
            except (KazooTimeoutError, OSError) as exc:
                close(client)
                servers = why_unreachable(ensemble.zk)
                raise _Unreachable(
                    f"ZooKeeper at {ensemble.zk} did not answer within {timeout:g} s"
                    + (f": {servers}" if servers else "")
                ) from exc
        try:
            reader = _Reader(
                MultiReader(client).batch(), ensemble.name, read_at, timeout, ensemble.zk
            )
            rows = reader.read()
            read_at = reader.read_at
        finally:
            if own:
                close(client)
    except _Unreachable as exc:
        log.warning("fleet_ensemble_unreachable", ensemble=ensemble.name, error=str(exc))
        row = EnvironmentRow(ensemble.name, None, read_at, error=str(exc))
        return EnsembleSurvey(ensemble, (row,), read_at, time.perf_counter() - started, str(exc))
    seconds = time.perf_counter() - started
    log.debug(
        "fleet_ensemble_read", ensemble=ensemble.name, environments=len(rows), seconds=seconds
    )
    return EnsembleSurvey(ensemble, tuple(rows), read_at, seconds, clock_offset=reader.clock_offset)


@attrs.define
class _Reader:
    #: The survey's reads, sent a round at a time in multiRead requests.
    reads: ReadBatch
    ensemble: str
    read_at: float
    timeout: float
    #: The ensemble's connection string (the commands a row prints name it).
    zk: str
    #: How far our clock runs ahead of ZooKeeper's, when past the bound (:meth:`_judged_at`).
    clock_offset: float | None = None

    def read(self) -> list[EnvironmentRow]:
        try:
            names = sorted(self.reads.get_children_async(ROOT).get(timeout=self.timeout))
        except NoNodeError:
            return []
        except NoAuthError as exc:
            raise _Unreachable(f"not allowed to list {ROOT}") from exc
        except CONNECTION_ERRORS as exc:
            raise _Unreachable(f"ZooKeeper stopped answering listing {ROOT}: {exc!r}") from exc
        problems: dict[str, list[str]] = defaultdict(list)
        # Round trip 2: what every environment has; the rest only where it matters.
        heads = {name: self._gets(name, _ALWAYS) for name in names}
        listings = {name: self._list(f"{name}/{PROCESSES_KEY}") for name in names}
        event_listings = {name: self._list(f"{name}/{EVENTS_KEY}") for name in names}
        values = {name: self._values(name, calls, problems) for name, calls in heads.items()}
        generations = {name: _generation(values[name]) for name in names}  # decoded once
        process_names = {name: self._children(name, listings[name], problems) for name in names}
        # Round trip 3: every process node; the logs of generations newer than the catalog.
        process_calls = {
            name: self._gets(name, [f"{PROCESSES_KEY}/{p}" for p in found])
            for name, found in process_names.items()
        }
        newer = {
            name: _newer_logs(
                self._children(name, event_listings[name], problems), generations[name]
            )
            for name in names
        }
        log_calls = {
            name: [(key, self._list(f"{name}/{EVENTS_KEY}/{key}")) for key in keys]
            for name, keys in newer.items()
        }
        processes = {
            name: {
                key.rsplit("/", 1)[-1]: value
                for key, value in self._values(name, process_calls[name], problems).items()
            }
            for name in names
        }
        decoded = {name: decode_processes(found) for name, found in processes.items()}
        # Round trip 4: how those generations ended (their newest event); the promotion where a
        # newer generation runs; the history where a leader migrates (to judge its phase).
        last_calls = {
            name: [
                (
                    f"{key}/{newest}",
                    self.reads.get_async(f"{ROOT}/{name}/{EVENTS_KEY}/{key}/{newest}"),
                )
                for key, listing in log_calls[name]
                for newest in _newest(self._children(name, listing, problems))
            ]
            for name in names
        }
        later = {
            name: self._gets(name, _later(values[name], generations[name], decoded[name]))
            for name in names
        }
        self.read_at = self._judged_at(processes)
        return [
            _row(
                self.ensemble,
                self.zk,
                name,
                self.read_at,
                {
                    **dict.fromkeys(_SOMETIMES),
                    **values[name],
                    **self._values(name, later[name], problems),
                },
                decoded[name],
                self._values(name, last_calls[name], problems),
                problems.get(name, []),
            )
            for name in names
        ]

    def _judged_at(self, processes: Mapping[str, Mapping[str, Versioned | None]]) -> float:
        """The time ages are judged at: ours, unless it is off ZooKeeper's clock, as the freshest
        heartbeat of a live process shows it (written every few seconds, at most
        :data:`_HEARTBEAT_SLACK` old), by more than the bound processes lead within; then that
        heartbeat's time, so a reader's skewed clock calls nothing overdue or stuck."""
        stamps = [v.modified for nodes in processes.values() for v in nodes.values() if v]
        freshest = max((t for t in stamps if t > 0), default=None)
        if freshest is None:
            return self.read_at
        ahead = self.read_at - freshest
        if -MAX_CLOCK_OFFSET_SECONDS <= ahead <= MAX_CLOCK_OFFSET_SECONDS + _HEARTBEAT_SLACK:
            return self.read_at
        self.clock_offset = round(ahead, 3)
        log.warning(
            "fleet_clock_off",
            ensemble=self.ensemble,
            seconds_ahead=self.clock_offset,
            judged="at the freshest heartbeat's time (ZooKeeper's clock)",
        )
        return freshest

    def _gets(self, env: str, keys: Iterable[str]) -> list[tuple[str, Any]]:
        return [(key, self.reads.get_async(f"{ROOT}/{env}/{key}")) for key in keys]

    def _list(self, key: str) -> Any:
        return self.reads.get_children_async(f"{ROOT}/{key}")

    def _values(
        self, env: str, pending: Iterable[tuple[str, Any]], problems: dict[str, list[str]]
    ) -> dict[str, Versioned | None]:
        out: dict[str, Versioned | None] = {}
        for key, result in pending:
            try:
                data, stat = result.get(timeout=self.timeout)
            except NoNodeError:
                out[key] = None
            except NoAuthError:
                out[key] = None
                problems[env].append(
                    f"not allowed to read {key} (a secured environment: give the ensemble a "
                    "read_auth it grants)"
                )
            except CONNECTION_ERRORS as exc:
                raise _Unreachable(
                    f"ZooKeeper stopped answering during the survey: {exc!r}"
                ) from exc
            else:
                out[key] = Versioned(data, stat.version, stat.ctime / 1000, key, stat.mtime / 1000)
        return out

    def _children(self, env: str, result: Any, problems: dict[str, list[str]]) -> list[str]:
        try:
            return sorted(result.get(timeout=self.timeout))
        except NoNodeError:
            return []
        except NoAuthError:
            problems[env].append(f"not allowed to list {PROCESSES_KEY}")
            return []
        except CONNECTION_ERRORS as exc:
            raise _Unreachable(f"ZooKeeper stopped answering during the survey: {exc!r}") from exc


def _generation(heads: Mapping[str, Versioned | None]) -> int:
    """The catalog's generation (0: none, or unreadable, which the row reports)."""
    try:
        return generation_of_catalog(heads.get(CATALOG_KEY)) or 0
    except CorruptStateError:
        return 0


def _later(
    heads: Mapping[str, Versioned | None], generation: int, processes: Processes
) -> list[str]:
    """What else to read of an environment: the promotion target when a process runs a
    generation newer than the catalog's (is it promoted?), the history when a process
    migrates (is its phase taking too long?)."""
    nodes = processes.nodes.values()
    keys = []
    if any(node.deploy_generation > generation for node in nodes) or heads.get(CATALOG_KEY) is None:
        keys.append(PROMOTION_KEY)
    if any(node.state == "migrating" for node in nodes):
        keys.append(HISTORY_KEY)
    return keys


def _newer_logs(names: list[str], generation: int) -> list[str]:
    """The read-only logs (``v<version>-g<gen>``) of generations newer than the catalog's."""
    out = []
    for name in names:
        _version, sep, gen = name.rpartition("-g")
        if name.startswith("v") and sep and gen.isdigit() and int(gen) > generation:
            out.append(name)
    return out


def _newest(names: list[str]) -> list[str]:
    """The newest event of a log (``e-<seq>``), as a list of at most one."""
    events = [n for n in names if n.startswith("e-") and n[2:].isdigit()]
    return [max(events, key=lambda n: int(n[2:]))] if events else []


def _endings(found: Mapping[str, Versioned | None], running: set[int]) -> list[str]:
    """Generations whose read-only processes ended failed, refused or fenced, and have none
    running now: ``g3 0.12.0 refused: <message>``."""
    out = []
    for key, value in sorted(found.items()):
        log_key = key.rsplit("/", 1)[0]
        version, _sep, gen = log_key[1:].rpartition("-g")
        if value is None or not gen.isdigit() or int(gen) in running:
            continue
        try:
            event = value.json()
        except (CorruptStateError, ValueError):
            continue
        if not isinstance(event, Mapping) or event.get("kind") not in ("failed", "fenced"):
            continue
        error = event.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        refused = isinstance(error, Mapping) and error.get("exit_code") == EXIT_REFUSED
        kind = "refused" if refused else str(event["kind"])
        out.append(f"g{gen} {version} {kind}" + (f": {message}" if message else ""))
    return out


def _row(
    ensemble: str,
    zk: str,
    env: str,
    read_at: float,
    heads_found: Mapping[str, Versioned | None],
    decoded: Processes,
    endings_found: Mapping[str, Versioned | None],
    problems: list[str],
) -> EnvironmentRow:
    errors: list[dict[str, str]] = []
    readable = Readable(errors)
    heads = Heads.decode(heads_found, readable)
    for _name, exc in sorted(decoded.unreadable.items()):
        readable.report(exc)
    processes = sorted(decoded.nodes.values(), key=lambda p: (p.deploy_generation, p.id))
    history, history_warning = _phase_history(heads_found.get(HISTORY_KEY))
    catalog, epoch, pending = heads.catalog, heads.epoch, heads.pending
    leader = None
    if epoch is not None:
        node = next((p for p in processes if p.id == epoch.leader), None)
        leader = LeaderView(
            id=epoch.leader,
            registered=node is not None,
            state=None if node is None else node.state,
            phase=None if node is None else node.phase,
            phase_since=None if node is None else node.phase_since,
            version=None if node is None else node.version,
            http=None if node is None else node.http,
        )
    generation = catalog.deploy_generation if catalog is not None else 0
    green = _green(processes, generation, heads.promotion)
    finalization, since, finalize_at = None, None, None
    if pending is not None:
        finalization = "pending" if pending.finalizing is None else "finalizing"
        since, finalize_at = pending.since, pending.finalize_at
    elif catalog is not None:
        finalization = "final"
        since = None if catalog.finalized is None else catalog.finalized.at
    warnings = process_warnings(processes, env, zk)
    if history_warning:
        warnings.append(history_warning)
    versions = {p.version for p in processes}
    if catalog is not None:
        versions.add(catalog.version)
    return EnvironmentRow(
        ensemble=ensemble,
        environment=env,
        read_at=read_at,
        bootstrapped=catalog is not None,
        version=None if catalog is None else catalog.version,
        deploy_generation=None if catalog is None else catalog.deploy_generation,
        epoch=None if epoch is None else epoch.epoch,
        promotion_target=heads.promotion,
        leader=leader,
        green=green,
        finalization=finalization,
        finalization_since=since,
        finalize_at=finalize_at,
        pending_version=None if pending is None else pending.version,
        from_version=None if pending is None else pending.from_version,
        processes=len(processes),
        failed=(
            *(f"{p.id} failed" for p in processes if p.state == "failed"),
            *_endings(endings_found, {p.deploy_generation for p in processes}),
        ),
        versions=tuple(sorted(versions)),
        phase_history=history,
        warnings=tuple(warnings),
        drift=any(isinstance(p.plan, Mapping) and p.plan.get("drift") for p in processes),
        errors=tuple([*problems, *(f"{e['key']}: {e['error']}" for e in errors)]),
    )


def _green(
    processes: list[ProcessNode], generation: int, promotion: int | None
) -> tuple[GreenGeneration, ...]:
    by_generation: dict[int, list[ProcessNode]] = defaultdict(list)
    for process in processes:
        if process.deploy_generation > generation:
            by_generation[process.deploy_generation].append(process)
    return tuple(
        GreenGeneration(
            deploy_generation=gen,
            version=members[0].version,
            processes=len(members),
            states=tuple(sorted({p.state for p in members})),
            since=min((p.started_at for p in members if p.started_at), default=None),
            promoted=promotion is not None and promotion >= gen,
            paused=any(
                isinstance(p.progress, Mapping) and bool(p.progress.get("paused")) for p in members
            ),
        )
        for gen, members in sorted(by_generation.items())
    )


def _phase_history(found: Versioned | None) -> tuple[dict[str, float], str | None]:
    """The median seconds of each phase over the environment's recorded upgrades."""
    if found is None or not found.value:
        return {}, None
    try:
        data = found.json()
        if not isinstance(data, list):
            raise TypeError(f"expected a list, found {type(data).__name__}")
        records = [UpgradeRecord.from_json(item) for item in data]
    except (CorruptStateError, TypeError, ValueError, KeyError) as exc:
        return {}, f"upgrade history unreadable: {exc}"
    seconds: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for phase in record.phases:
            seconds[phase.name].append(phase.seconds)
    return {name: statistics.median(values) for name, values in seconds.items()}, None
