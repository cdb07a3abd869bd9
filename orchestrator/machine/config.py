"""A sidecar's configuration: release, generation, HTTP address, blob URI, intervals."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import attrs

from catalog.blob.uri import agreed_uri, check_uri, local_uri, normalize_uri
from catalog.errors import (
    BadInputError,
)
from catalog.pipeline.spark.config import SparkConfig
from catalog.shard import GC_GRACE_SECONDS, KEY_RETENTION_SECONDS
from orchestrator.http.authorization import HttpAccess
from orchestrator.http.exchange import ServerLimits
from orchestrator.migrate import (
    COMPACT_MIN_BATCHES,
    FINALIZE_AFTER_SECONDS,
    GC_INTERVAL_SECONDS,
    ORPHAN_GRACE_SECONDS,
)

DEFAULT_BLOB_DIR = Path("var") / "blob"


@attrs.frozen
class SidecarConfig:
    """Everything the command line gives a sidecar."""

    zk: str
    env: str
    release_ref: str
    deploy_generation: int
    blob: str | None = None
    http_host: str = "127.0.0.1"
    http_port: int = 0
    # Where to write the address the server bound once it serves (port 0: the kernel's).
    http_address_file: str | None = None
    # Who may ask what: POST /promote and /append need the write token, and reads need it or
    # the read token; without one, only a loopback listener is allowed unless it is insecure;
    # the hosts answered besides loopback; HTTPS (orchestrator.http.authorization).
    http_access: HttpAccess = attrs.field(factory=HttpAccess)
    # Workers, connections, timeouts and the body limit of the HTTP server (--http-*).
    http_limits: ServerLimits = attrs.field(factory=ServerLimits)
    auto_promote: bool = False
    # How long an Idempotency-Key is recognised after its append (catalog.shard.keylog).
    idempotency_retention: float = KEY_RETENTION_SECONDS
    process_id: str = attrs.field(factory=lambda: default_process_id())
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    finalize_interval: float = 5.0
    # A leader looks for orphan shards (created, never named) every orphan_interval seconds,
    # collecting those older than orphan_grace (orchestrator.migrate.collect_orphan_shards);
    # unless told, a tenth of the grace, from 1 s to a minute.
    orphan_grace: float = ORPHAN_GRACE_SECONDS
    orphan_interval: float = attrs.field(
        default=attrs.Factory(
            lambda self: min(60.0, max(1.0, self.orphan_grace / 10)), takes_self=True
        )
    )
    # A leader sweeps unreferenced blobs every gc_interval seconds, deleting those unreferenced
    # for gc_grace seconds of ZooKeeper time (orchestrator.migrate.collect_garbage); unless
    # told, half the grace, from 1 s to GC_INTERVAL_SECONDS.
    gc_grace: float = GC_GRACE_SECONDS
    gc_interval: float = attrs.field(
        default=attrs.Factory(
            lambda self: min(GC_INTERVAL_SECONDS, max(1.0, self.gc_grace / 2)), takes_self=True
        )
    )
    # In the same sweep, a leader compacts shards listing this many batches or holding batches
    # under an old schema (orchestrator.migrate.compaction); 0 turns it off.
    compact_min_batches: int = COMPACT_MIN_BATCHES
    # The engine of REWRITE copies and how Spark runs (--engine, --spark-master, --spark-conf,
    # --blob-shared).
    engine: str = "auto"
    spark: SparkConfig = attrs.field(factory=SparkConfig)
    # The most rows per second of its long steps (--copy-rate; None: no limit) until the
    # operator's `throttle` sets another (orchestrator.pace).
    copy_rate: float | None = None
    # How long an upgrade this process's leadership switches stays reversible (seconds; None:
    # until ``finalize``), and, for a rollback, the pending upgrade's release (its inverses)
    # and the collections whose rows written under it may be dropped.
    finalize_after: float | None = FINALIZE_AFTER_SECONDS
    rollback_from_ref: str | None = None
    discard_writes_to: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.process_id or "/" in self.process_id or self.process_id in {".", ".."}:
            raise BadInputError(
                f"invalid --process-id {self.process_id!r}: use a non-empty name without '/'",
                process_id=self.process_id,
            )
        if self.deploy_generation < 1:
            raise BadInputError(
                f"--deploy-generation must be at least 1, not {self.deploy_generation}",
                deploy_generation=self.deploy_generation,
            )


def default_process_id() -> str:
    """``<host>-<pid>``: unique per machine while the process lives, readable in status."""
    return f"{socket.gethostname().split('.')[0] or 'host'}-{os.getpid()}"


def resolve_blob_uri(given: str | None, recorded: str | None, env: str) -> str:
    """The blob URI to use: the recorded one, which a different ``--blob`` may not contradict.

    An environment not bootstrapped yet takes ``given``, or ``./var/blob/<env>`` made absolute.
    """
    if given is not None:
        check_uri(given)  # before any message could show it
    if recorded is not None:
        return agreed_uri(given, recorded)
    return normalize_uri(given) if given else local_uri(DEFAULT_BLOB_DIR / env)
