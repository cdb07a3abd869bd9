"""A versioned compare-and-set store on ZooKeeper, with fencing.

Layout: every key is a znode below the environment root ``/catalog-upgrade/<env>``; a value is
the znode's data (compact JSON) and its *version* is the znode's data version. The rules of
docs/design-state.md are enforced here:

* every change is a compare-and-set on a znode version (``cas``) or a multi-op transaction of
  several (``commit``): nothing is read-modify-written without a version check;
* a :class:`Fence` (the epoch znode at the version the writer took over at) can be added to any
  write; ZooKeeper checks it in the same transaction, so a superseded, paused or partitioned
  leader can never write after a newer one took over.

Errors say what happened and whether retrying makes sense:

* :class:`~catalog.errors.VersionMismatchError` -- a race was lost; re-read and retry
  (:class:`catalog.retry.CasRetry` does that);
* :class:`~catalog.errors.FencedError` -- the epoch moved; never retry;
* :class:`~catalog.errors.ConnectionLostError` -- the outcome is unknown; retry only an attempt
  that re-reads first, so that a write that did land is recognised.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import attrs
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.security import OPEN_ACL_UNSAFE

from catalog.consensus.budget import (
    MAX_OPS_PER_TRANSACTION,
    LenErrorWatch,
    checked_request,
    op_bytes,
    plan_chunks,
    request_budget,
)
from catalog.consensus.errors import CONNECTION_ERRORS as CONNECTION_ERRORS  # the home: errors
from catalog.consensus.errors import access_denied, translated
from catalog.consensus.multiread import MultiReader
from catalog.errors import (
    ConnectionLostError,
    ConsensusError,
    CorruptStateError,
    FencedError,
    VersionMismatchError,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

ROOT = "/catalog-upgrade"
# Keep values far below ZooKeeper's 1 MB jute.maxbuffer; callers split or roll up above this.
MAX_VALUE_BYTES = 512 * 1024
# A multi-op request is bounded by jute.maxbuffer as well; callers chunk above this many ops.


def env_root(env: str) -> str:
    """The ZooKeeper root of an environment: BadInputError for a name that is no one znode's
    (empty, ``.``, ``..``, a ``/``, or a character ZooKeeper refuses in a path)."""
    if not env or "/" in env or env in {".", ".."} or _REFUSED_IN_PATHS.search(env):
        from catalog.errors import BadInputError

        raise BadInputError(
            f"invalid environment name {env!r}: use a non-empty name without '/' or a character "
            "ZooKeeper refuses in a path (control characters, emoji and others beyond U+FFFF)"
        )
    return f"{ROOT}/{env}"


#: The characters ZooKeeper refuses in a path (its PathUtils.validatePath, which reads the
#: name in UTF-16: a character beyond U+FFFF is a surrogate pair there).
_REFUSED_IN_PATHS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff]")


def encode_json(value: Any) -> bytes:
    """Compact, deterministic JSON bytes (sorted keys, no spaces)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def decode_json(data: bytes, key: str = "") -> Any:
    """The JSON value of ``data`` (None when empty); CorruptStateError naming ``key`` when the
    bytes are not JSON."""
    if not data:
        return None
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptStateError(
            f"{key or 'a value'} is not JSON: {exc}", key=key, reason="not-json"
        ) from exc


@contextlib.contextmanager
def decoding(key: str, what: str) -> Iterator[None]:
    """Translate a decoder's failure on a malformed value (a missing or mistyped field) into
    CorruptStateError naming ``key`` and what it should have held."""
    try:
        yield
    except CorruptStateError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise CorruptStateError(
            f"{key} does not hold a valid {what}: {detail}", key=key, reason="invalid"
        ) from exc


@attrs.frozen
class Versioned:
    """A value read from the store together with the version a CAS must name."""

    value: bytes
    version: int
    created: float = 0.0  # when the key was created (seconds since the epoch; 0: unknown)
    key: str = ""
    modified: float = 0.0  # when it was last written, on ZooKeeper's clock (0: unknown)

    def json(self) -> Any:
        return decode_json(self.value, self.key)


@attrs.frozen
class Fence:
    """The epoch znode at the version its holder took over at; added to writes as a check."""

    key: str
    version: int


# --- operations of a transaction ----------------------------------------------------------------


@attrs.frozen
class Create:
    key: str
    value: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@attrs.frozen
class SetData:
    key: str
    value: bytes
    version: int  # -1 means "any version": only for keys nobody else writes


@attrs.frozen
class Delete:
    key: str
    version: int = -1


@attrs.frozen
class Check:
    key: str
    version: int


Op = Create | SetData | Delete | Check


@attrs.define
class Consensus:
    """The store of one environment. Keys are paths relative to the environment root."""

    client: KazooClient
    root: str
    observer: Callable[[str, float], None] | None = None
    #: Called with the first key of every fenced transaction just before it is sent: the
    #: orchestrator injects its crash failpoints here (the durable model keeps no such state).
    before_fenced_write: Callable[[str], None] | None = None
    #: Called with the first key of every fenced transaction that landed, before returning
    #: (the orchestrator's lost-answer failpoint raises ConnectionLostError here).
    after_fenced_write: Callable[[str], None] | None = None
    #: The most bytes one request may take (catalog.consensus.budget): never sent over it.
    max_request_bytes: int = attrs.field(factory=request_budget)
    # Large requests whose connection dropped: what the server may refuse as too long.
    _drops: LenErrorWatch = attrs.field(factory=LenErrorWatch, init=False, repr=False)
    _reader: MultiReader = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._reader = MultiReader(self.client)

    # -- paths ------------------------------------------------------------------------------

    def path(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.root}/{key}" if key else self.root

    def key_of(self, path: str) -> str:
        return path[len(self.root) :].strip("/")

    def _observe(self, kind: str, started: float) -> None:
        if self.observer is not None:
            self.observer(kind, time.perf_counter() - started)

    # -- reads ------------------------------------------------------------------------------

    def get(self, key: str) -> Versioned | None:
        """The value and version of ``key``, or None when it does not exist."""
        started = time.perf_counter()
        try:
            with translated(f"reading {key}", key):
                data, stat = self.client.get(self.path(key))
        except NoNodeError:
            return None
        finally:
            self._observe("get", started)
        return Versioned(
            value=data,
            version=stat.version,
            created=stat.ctime / 1000,
            key=key,
            modified=stat.mtime / 1000,
        )

    def get_json(self, key: str) -> tuple[Any, int] | None:
        found = self.get(key)
        return None if found is None else (found.json(), found.version)

    def sync(self) -> None:
        """Bring this session's server up to the ensemble's leader: a read after it sees
        every write that committed before it (ZooKeeper's reads are otherwise only as new as
        the server the session talks to)."""
        with translated("a sync", self.root):
            self.client.sync(self.root)

    def get_many(self, keys: Sequence[str]) -> dict[str, Versioned | None]:
        """Read many keys in few requests (:mod:`catalog.consensus.multiread`), not one per key."""
        started = time.perf_counter()
        out: dict[str, Versioned | None] = {}
        try:
            with translated("a batched read", keys[0] if keys else ""):
                found = self._reader.read([self.path(key) for key in keys])
        finally:
            self._observe("get_many", started)
        for key, read in zip(keys, found, strict=True):
            out[key] = None if read is None else Versioned(
                value=read[0],
                version=read[1].version,
                created=read[1].ctime / 1000,
                key=key,
                modified=read[1].mtime / 1000,
            )  # fmt: skip
        return out

    def children(self, key: str) -> list[str]:
        """Child names of ``key`` (empty when it does not exist), sorted."""
        try:
            with translated(f"listing {key}", key):
                return sorted(self.client.get_children(self.path(key)))
        except NoNodeError:
            return []

    def exists(self, key: str) -> bool:
        with translated(f"for {key}", key):
            return self.client.exists(self.path(key)) is not None

    def stamp(self, key: str, *, synced: bool = False) -> tuple[float, int] | None:
        """What tells one value of ``key`` from any other without reading it: its creation
        time and version (a :class:`Versioned`'s ``created`` and ``version``); None when it
        does not exist. A key deleted and created again has a new creation time. ``synced``:
        a :meth:`sync` goes ahead of the stat in the same round trip (one session's requests
        are answered in order), so the stamp is the one of every write committed before."""
        with translated(f"for {key}", key):
            pending = self.client.sync_async(self.root) if synced else None
            stat = self.client.exists(self.path(key))
            if pending is not None:
                pending.get(timeout=30)
        return None if stat is None else (stat.ctime / 1000, stat.version)

    # -- writes -----------------------------------------------------------------------------

    def ensure(self, *keys: str) -> None:
        """Create empty container znodes (idempotent; no data, so no CAS is needed).

        The shared parent of every environment (``/catalog-upgrade``) is created open, so that
        a secured environment does not lock the others out; everything below gets the client's
        default ACL (``orchestrator.zookeeper.credentials``)."""
        with translated("creating paths", keys[0] if keys else ""):
            if not self.client.exists(ROOT):
                with contextlib.suppress(NodeExistsError):
                    self.client.create(ROOT, b"", acl=OPEN_ACL_UNSAFE)
            for key in ("", *keys):
                self.client.ensure_path(self.path(key))

    def cas(
        self, key: str, value: bytes, expected_version: int, *, fence: Fence | None = None
    ) -> int:
        """Write ``value`` if ``key`` is at ``expected_version`` (-1: must not exist yet).

        Returns the new version. Raises VersionMismatchError carrying the current value.
        """
        if expected_version < 0:
            self.commit([Create(key, value)], fence=fence)
            return 0
        (stat,) = self.commit([SetData(key, value, expected_version)], fence=fence)
        return int(stat.version)

    def commit(self, ops: Sequence[Op], *, fence: Fence | None = None) -> list[Any]:
        """Apply ``ops`` atomically (one ZooKeeper multi), fenced if a fence is given.

        Returns kazoo's per-op results (created paths for creates).
        """
        if not ops:
            return []
        all_ops: list[Op] = [Check(fence.key, fence.version)] if fence is not None else []
        all_ops.extend(ops)
        for op in all_ops:
            if isinstance(op, (Create, SetData)) and len(op.value) > MAX_VALUE_BYTES:
                raise ConsensusError(
                    f"value for {op.key} is {len(op.value)} bytes, above the {MAX_VALUE_BYTES} "
                    "limit: split it or roll it up into blob storage",
                    key=op.key,
                    size=len(op.value),
                )
        total = checked_request(all_ops, self.path, self.max_request_bytes)
        if fence is not None and self.before_fenced_write is not None:
            self.before_fenced_write(ops[0].key)
        started = time.perf_counter()
        txn = self.client.transaction()
        for op in all_ops:
            path = self.path(op.key)
            if isinstance(op, Create):
                txn.create(path, op.value, ephemeral=op.ephemeral, sequence=op.sequence)
            elif isinstance(op, SetData):
                txn.set_data(path, op.value, version=op.version)
            elif isinstance(op, Delete):
                txn.delete(path, version=op.version)
            else:
                txn.check(path, op.version)
        try:
            with translated("a transaction; its outcome is unknown", ops[0].key):
                results = txn.commit()
        except ConnectionLostError as exc:
            self._drops.dropped(total, ops[0].key, self.max_request_bytes, self._answers, exc)
            raise
        finally:
            self._observe("commit", started)
        self._drops.passed(total)
        failed = [
            (op, res)
            for op, res in zip(all_ops, results, strict=True)
            if isinstance(res, KazooException) and not isinstance(res, RolledBackError)
        ]
        if not failed:
            if fence is not None and self.after_fenced_write is not None:
                self.after_fenced_write(ops[0].key)
            return list(results[1:] if fence is not None else results)
        op, error = failed[0]
        if isinstance(error, NoAuthError):
            raise access_denied(op.key) from error
        if fence is not None and op is all_ops[0]:
            raise FencedError(
                f"fenced: epoch moved past version {fence.version} of {fence.key}",
                key=fence.key,
                expected_epoch_version=fence.version,
            )
        current = self.get(op.key) if not isinstance(error, NoNodeError) else None
        if isinstance(error, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)):
            raise VersionMismatchError(
                f"{type(op).__name__.lower()} of {op.key} lost a race ({type(error).__name__})",
                key=op.key,
                current=current,
                version=None if current is None else current.version,
            )
        raise ConsensusError(
            f"transaction failed on {op.key}: {type(error).__name__}", key=op.key
        ) from error

    def _answers(self, wait: float = 3.0) -> bool:
        """Whether a tiny request goes through within ``wait`` seconds (after a reconnect)."""
        deadline = time.monotonic() + wait
        while not self.client.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(Exception):  # any failure: no answer, nothing to conclude
            self.client.exists("/")
            return True
        return False

    def commit_chunked(
        self, ops: Sequence[Op], *, fence: Fence | None = None, size: int = MAX_OPS_PER_TRANSACTION
    ) -> None:
        """Apply many ops as consecutive fenced transactions, each under the request budget
        (by bytes, catalog.consensus.budget) and at most ``size`` ops.

        Only for ops that are individually idempotent-by-check: each chunk is atomic, the whole
        is not, so a crash between chunks must leave a state the caller's re-run completes.
        """
        fixed = (
            0 if fence is None else op_bytes(Check(fence.key, fence.version), self.path(fence.key))
        )
        for chunk in plan_chunks(ops, self.path, self.max_request_bytes, fixed=fixed, max_ops=size):
            self.commit(chunk, fence=fence)

    def delete_tree(self, key: str) -> None:
        """Remove ``key`` and everything below it (test and cleanup helper)."""
        try:
            with translated(f"deleting {key}", key):
                self.client.delete(self.path(key), recursive=True)
        except NoNodeError:
            return
