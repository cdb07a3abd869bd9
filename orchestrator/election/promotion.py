"""The promotion target: raising it, and waiting until the promoted generation's leader serves."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from catalog.consensus import (
    CONNECTION_ERRORS,
    Check,
    Consensus,
    SetData,
    Versioned,
    decode_json,
    decoding,
    encode_json,
)
from catalog.consensus.errors import access_denied
from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until, watched_data
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    PROCESSES_KEY,
    PROMOTION_KEY,
    CatalogState,
    candidate_key,
    generation_of_catalog,
)
from catalog.errors import (
    EXIT_FENCED,
    EXIT_REFUSED,
    BadInputError,
    CatalogError,
    ConnectionLostError,
    FencedError,
    MigrationRefusedError,
)
from catalog.retry import CasRetry
from orchestrator.events import record_event
from orchestrator.fencing import generation_fence
from orchestrator.process_node import FINAL_STATES, ProcessNode, ProcessState, decode_processes
from orchestrator.zookeeper.credentials import may_write


@attrs.frozen
class Promotion:
    """The promotion node: the generation asked to lead, who asked and when, and the target it
    replaced. The one codec of ``promotion`` (the CLI, the HTTP promote and a bootstrapping
    takeover write it; the election, ``promote --wait``, status and the history read it)."""

    deploy_generation: int
    requested_by: str | None = None
    requested_at: float | None = None
    previous: int | None = None

    @classmethod
    def decode(cls, data: bytes | None, key: str = PROMOTION_KEY) -> Promotion | None:
        """The promotion stored at ``key`` (None: nothing promoted yet, an empty node);
        CorruptStateError naming the key when it holds something else."""
        if not data:
            return None
        value = decode_json(data, key)
        with decoding(key, "promotion target"):
            if not isinstance(value, dict):
                raise TypeError(f"expected an object, found {type(value).__name__}")
            previous = value.get("previous")
            return cls(
                deploy_generation=int(value["deploy_generation"]),
                requested_by=value.get("requested_by"),
                requested_at=value.get("requested_at"),
                previous=None if previous is None else int(previous),
            )

    @classmethod
    def of(cls, found: Versioned | None) -> Promotion | None:
        """:meth:`decode` of a node read with its version (None: absent or empty)."""
        return None if found is None else cls.decode(found.value, found.key or PROMOTION_KEY)

    def encode(self) -> bytes:
        return encode_json(attrs.asdict(self))


def promotion_of(found: Versioned | None) -> int | None:
    """The promoted generation a read node holds (None: nothing promoted yet)."""
    promotion = Promotion.of(found)
    return None if promotion is None else promotion.deploy_generation


def read_promotion_request(consensus: Consensus) -> Promotion | None:
    """The promotion node, or None when nothing was promoted yet."""
    return Promotion.of(consensus.get(PROMOTION_KEY))


def read_promotion(consensus: Consensus) -> int | None:
    """The promotion target generation, or None when nothing was promoted yet."""
    return promotion_of(consensus.get(PROMOTION_KEY))


log = structlog.get_logger(__name__)

# How often a promotion looks again for the generation's first process.
_REGISTER_POLL = 0.2


#: How long ``promote`` waits for a process of the generation to register (one just started
#: takes a second or two) before it refuses the generation as not running.
REGISTER_WAIT_SECONDS = 30.0


def promote(
    consensus: Consensus,
    deploy_generation: int,
    *,
    requested_by: str,
    before_deploy: bool = False,
    register_wait: float = REGISTER_WAIT_SECONDS,
    on_waiting: Callable[[str], None] | None = None,
) -> None:
    """Set the promotion target to ``deploy_generation`` (idempotent for the current target).

    Refuses (FencedError, exit 3) a target below the catalog's generation: a stale ``promote``
    never undoes a takeover. Below the current target it is a *take-back*: allowed while no
    process of that target took over (the catalog is still below it), in one transaction that
    checks the catalog did not move. A generation no process registered (neither its process
    node nor an election candidate) is refused (MigrationRefusedError, exit 4, 409, rule
    ``generation-not-running``: a typo would fence the serving leader with nobody to take
    over), unless ``before_deploy`` says the operator promotes ahead of its processes on
    purpose, or it takes the target back to the catalog's own generation; a process that is
    starting is waited for up to ``register_wait`` seconds first (0: refused at once, as the
    sidecar's ``POST /promote`` does), and ``on_waiting`` hears at once what is awaited. A
    generation below 1 is BadInputError, and nothing is written.
    """
    if deploy_generation < 1:
        raise BadInputError(
            f"cannot promote generation {deploy_generation}: deploy generations start at 1",
            deploy_generation=deploy_generation,
        )

    def attempt() -> bool:
        found = consensus.get_many([CATALOG_KEY, PROMOTION_KEY])
        catalog_found = found[CATALOG_KEY]
        current = generation_of_catalog(catalog_found)
        promoted = found[PROMOTION_KEY]
        target = promotion_of(promoted)
        taking_back = (
            target is not None
            and deploy_generation < target
            and catalog_found is not None
            and current is not None
            and deploy_generation >= current
        )
        fenced = generation_fence(
            deploy_generation,
            catalog=current,
            promoted=None if taking_back else target,
            acting=f"cannot promote generation {deploy_generation}",
        )
        if fenced is not None:
            raise fenced
        if target == deploy_generation:
            return False
        # A credential that may not write is told at once, not after the registration wait.
        target_key = PROMOTION_KEY if promoted is not None else ""
        if not may_write(consensus.client, consensus.path(target_key)):
            raise access_denied(target_key or PROMOTION_KEY)
        if not before_deploy and not (taking_back and deploy_generation == current):
            _refuse_not_running(consensus, deploy_generation, register_wait, on_waiting)
        _refuse_past_pending(consensus, deploy_generation)
        value = Promotion(deploy_generation, requested_by, time.time(), target).encode()
        if promoted is None:
            consensus.ensure()
            consensus.cas(PROMOTION_KEY, value, -1)
        elif taking_back:
            assert catalog_found is not None
            # Only while no process of the target took over: its takeover moves the catalog.
            consensus.commit(
                [SetData(PROMOTION_KEY, value, promoted.version),
                 Check(CATALOG_KEY, catalog_found.version)]
            )  # fmt: skip
            log.warning("promotion_taken_back", target=target, to=deploy_generation)
        else:
            consensus.cas(PROMOTION_KEY, value, promoted.version)
        return True

    if CasRetry()(attempt):
        log.info("promoted", deploy_generation=deploy_generation, requested_by=requested_by)
        with contextlib.suppress(ConnectionLostError):  # the log is informational
            record_event(
                consensus,
                "promoted",
                deploy_generation=deploy_generation,
                requested_by=requested_by,
            )


def _refuse_not_running(
    consensus: Consensus,
    deploy_generation: int,
    wait: float,
    on_waiting: Callable[[str], None] | None,
) -> None:
    """Refuse to promote a generation no process registered (its node or its candidacy)
    within ``wait`` seconds; ``on_waiting`` hears once that it waits, and for what."""
    from orchestrator.process_node import read_processes

    def registered() -> bool:
        return any(
            node.deploy_generation == deploy_generation
            for node in read_processes(consensus).nodes.values()
        ) or bool(consensus.children(candidate_key(deploy_generation)))

    deadline = time.monotonic() + wait
    told = False
    while not registered():
        if time.monotonic() >= deadline:
            break
        if not told and on_waiting is not None:
            on_waiting(
                f"no process of generation {deploy_generation} is registered yet: waiting up "
                f"to {wait:g} s for one to start (--register-wait)"
            )
            told = True
        time.sleep(_REGISTER_POLL)
    else:
        return
    raise MigrationRefusedError(
        f"no process of generation {deploy_generation} is registered: promoting it would fence "
        "the serving leader with nobody to take over",
        rule="generation-not-running",
        deploy_generation=deploy_generation,
        suggestion=f"start generation {deploy_generation}'s processes first (check the number: "
        "`catalog-upgrade status` lists every process), or pass --before-deploy to promote "
        "ahead of them on purpose",
    )


def _refuse_past_pending(consensus: Consensus, deploy_generation: int) -> None:
    """Refuse (exit 4, rule ``upgrade-pending``) to promote a release newer than a pending
    upgrade: finalize it first (``finalize``), or roll it back. A promotion of the pending
    version itself (a redeploy) or of the release it came from (the rollback) passes; so
    does a generation with no registered process yet (its leader finalizes the pending
    upgrade before its own, so the environment is never left without a serving leader)."""
    from catalog.pending import read_pending
    from catalog.release import Version
    from orchestrator.process_node import read_processes

    found = read_pending(consensus)
    if found is None or found[0].finalizing is not None:
        return
    pending = found[0]
    versions = {
        node.version
        for node in read_processes(consensus).nodes.values()
        if node.deploy_generation == deploy_generation
    }
    newer = sorted(v for v in versions if Version.parse(v) > Version.parse(pending.version))
    if newer:
        raise MigrationRefusedError(
            f"cannot promote generation {deploy_generation} (release {newer[0]}): the upgrade "
            f"{pending.from_version} -> {pending.version} (generation "
            f"{pending.deploy_generation}) is pending, and promoting past it would end its "
            f"rollback window silently",
            rule="upgrade-pending",
            deploy_generation=deploy_generation,
            pending_version=pending.version,
            suggestion=f"run `catalog-upgrade finalize --version {pending.version}` first, or "
            f"roll back to {pending.from_version}",
        )


# Errors after which the outcome of a read is unknown but a later look may succeed.
_TRANSIENT: Final[tuple[type[BaseException], ...]] = (ConnectionLostError, *CONNECTION_ERRORS)


def _error_exit_code(error: Any) -> int | None:
    if isinstance(error, Mapping):
        code = error.get("exit_code")
        return int(code) if isinstance(code, int) else None
    return None


def _error_message(error: Any) -> str:
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("error") or json.dumps(dict(error)))
    return str(error)


def _failure(process: ProcessNode, deploy_generation: int) -> CatalogError:
    """The error a waiting ``promote`` reports for a failed process of the promoted generation."""
    error = process.error
    code = _error_exit_code(error)
    message = (
        f"generation {deploy_generation}: process {process.id} "
        f"{process.state}: {_error_message(error) if error else 'no reason given'}"
    )
    details = {"process_id": process.id, "state": process.state, "cause": error}
    if code == EXIT_REFUSED:
        return MigrationRefusedError(message, deploy_generation=deploy_generation, **details)
    if code == EXIT_FENCED or process.process_state is ProcessState.FENCED:
        return FencedError(message, deploy_generation=deploy_generation, **details)
    return CatalogError(message, deploy_generation=deploy_generation, reason="failed", **details)


def wait_promoted(consensus: Consensus, deploy_generation: int, timeout: float) -> None:
    """Return once generation ``deploy_generation``'s leader finished its migration.

    Done means: the catalog is at that generation, the epoch names a leader of it, and that
    leader's process node says ``serving``. Raises FencedError when a newer generation was
    promoted or took over meanwhile, MigrationRefusedError (exit 4) when the leader failed with a
    refusal, CatalogError when every process of the generation failed, and CatalogError with
    ``reason="timeout"`` (exit 1) when ``timeout`` seconds pass. Driven by ZooKeeper watches on
    the catalog, epoch, promotion and process nodes; no polling loop.
    """
    client = consensus.client
    last = "nothing observed yet"

    def look(watch: Watch) -> bool | NotYet:
        nonlocal last
        try:
            outcome, last = _promotion_progress(consensus, client, deploy_generation, watch)
        except _TRANSIENT:
            outcome, last = None, "ZooKeeper connection lost; waiting for it to come back"
        if isinstance(outcome, CatalogError):
            raise outcome
        return True if outcome is True else NOT_YET

    try:
        wait_until(look, timeout)
    except WaitTimeout:
        raise CatalogError(
            f"generation {deploy_generation} did not finish its migration within "
            f"{timeout:g} s: {last}",
            deploy_generation=deploy_generation,
            reason="timeout",
            last_observed=last,
        ) from None


def _get_watched(client: KazooClient, path: str, watch: Watch) -> bytes | None:
    found = watched_data(client, path, watch)
    return None if found is None else found[0]


def _promotion_progress(
    consensus: Consensus,
    client: KazooClient,
    deploy_generation: int,
    watcher: Callable[[WatchedEvent | None], None],
) -> tuple[bool | CatalogError | None, str]:
    """One look at the environment, leaving watches on everything read."""
    promotion = Promotion.decode(_get_watched(client, consensus.path(PROMOTION_KEY), watcher))
    target = None if promotion is None else promotion.deploy_generation
    waiting = f"waiting for generation {deploy_generation}"
    fenced = generation_fence(
        deploy_generation, promoted=None if target is None else int(target), acting=waiting
    )
    if fenced is not None:
        return fenced, f"generation {target} promoted"
    catalog_data = _get_watched(client, consensus.path(CATALOG_KEY), watcher)
    catalog = CatalogState.decode(catalog_data) if catalog_data else None
    fenced = generation_fence(
        deploy_generation,
        catalog=None if catalog is None else catalog.deploy_generation,
        acting=waiting,
    )
    if fenced is not None:
        assert catalog is not None
        return fenced, f"catalog at generation {catalog.deploy_generation}"
    epoch_data = _get_watched(client, consensus.path(EPOCH_KEY), watcher)
    epoch = decode_json(epoch_data, EPOCH_KEY) if epoch_data else None
    processes = _generation_processes(consensus, client, deploy_generation, watcher)
    leader_id = epoch.get("leader") if isinstance(epoch, dict) else None
    if not isinstance(epoch, dict) or int(epoch.get("deploy_generation", -1)) != deploy_generation:
        if processes and all(p.in_states(FINAL_STATES) for p in processes.values()):
            first = processes[min(processes)]
            return _failure(first, deploy_generation), "every process failed"
        return None, (
            f"no leader of generation {deploy_generation} yet "
            f"({len(processes)} process(es) of it registered)"
        )
    leader = processes.get(str(leader_id))
    if leader is None:
        return None, f"leader {leader_id} of generation {deploy_generation} is not registered"
    state = leader.state
    if leader.in_states(FINAL_STATES):
        return _failure(leader, deploy_generation), f"leader {leader_id} {state}"
    if (
        catalog is not None
        and catalog.deploy_generation == deploy_generation
        and leader.process_state is ProcessState.SERVING
    ):
        return True, f"leader {leader_id} serving"
    phase = leader.phase
    return None, f"leader {leader_id} is {state}" + (f" ({phase})" if phase else "")


def _generation_processes(
    consensus: Consensus,
    client: KazooClient,
    deploy_generation: int,
    watcher: Callable[[WatchedEvent | None], None],
) -> dict[str, ProcessNode]:
    base = consensus.path(PROCESSES_KEY)
    try:
        names = client.get_children(base, watch=watcher)
    except NoNodeError:
        if client.exists(base, watch=watcher) is not None:
            watcher(None)
        return {}
    pending = [(name, client.get_async(f"{base}/{name}", watch=watcher)) for name in names]
    values: dict[str, bytes | None] = {}
    for name, result in pending:
        try:
            values[name], _stat = result.get()
        except NoNodeError:
            values[name] = None
    processes = decode_processes(values)
    processes.raise_unreadable()  # promote --wait cannot tell such a process's state
    return {
        name: node
        for name, node in processes.nodes.items()
        if node.deploy_generation == deploy_generation
    }
