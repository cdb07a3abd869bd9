"""Prometheus metrics of one sidecar process, on its own registry (no global state).

Names follow Prometheus conventions (``catalog_upgrade_`` prefix, base units, ``_total`` for
counters). The sidecar feeds them from three hooks: its state machine (``set_state``,
``set_epoch``, ``observe_phase``), :attr:`catalog.consensus.Consensus.observer` (ZooKeeper
round-trip latency per operation kind) and :attr:`catalog.retry.CasRetry.on_retry`
(compare-and-set retries per error kind).
"""

from __future__ import annotations

from typing import Final

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from catalog.pending import PendingUpgrade
from catalog.pipeline.pacing import StepProgress
from orchestrator.process_node import ProcessState
from orchestrator.status.coverage import CoverageReport

STATES = tuple(state.value for state in ProcessState)

#: The steps of an append that ``catalog_upgrade_append_seconds`` times (docs/operating.md).
APPEND_STEPS = ("parse", "queue", "write", "commit")
# ZooKeeper on loopback answers a get in ~1 ms and a 100-op multi in ~20 ms.
ZK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


@attrs.frozen
class Family:
    """One metric family of a sidecar: the attribute of :class:`SidecarMetrics` that holds it,
    its type, name, help, labels and (a histogram's) buckets."""

    attribute: str
    kind: type[Gauge] | type[Counter] | type[Histogram]
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    def made(self, registry: CollectorRegistry) -> Gauge | Counter | Histogram:
        """The family, registered in ``registry``."""
        if self.buckets is not None:
            return Histogram(
                self.name, self.help, self.labels, buckets=self.buckets, registry=registry
            )
        return self.kind(self.name, self.help, self.labels, registry=registry)


#: Every metric family of a sidecar, as data (``/metrics`` lists them in this order).
FAMILIES: Final[tuple[Family, ...]] = (
    Family(
        "upgrade_pending", Gauge, "catalog_upgrade_upgrade_pending",
        "1 while the serving leader's upgrade is not finalized (the release it came from may "
        "still be promoted back), by version and the version it came from",
        labels=("version", "from_version"),
    ),
    Family(
        "pending_since", Gauge, "catalog_upgrade_upgrade_pending_since_timestamp_seconds",
        "When the pending upgrade switched the catalog (absent when none is pending)",
    ),
    Family(
        "finalize_at", Gauge, "catalog_upgrade_upgrade_finalize_at_timestamp_seconds",
        "When the serving leader finalizes the pending upgrade by itself (+Inf: never)",
    ),
    Family(
        "state", Gauge, "catalog_upgrade_state",
        "1 for the state the process is in, 0 for the others",
        labels=("state",),
    ),
    Family(
        "leader", Gauge, "catalog_upgrade_leader",
        "1 while this process holds leadership",
    ),
    Family(
        "epoch", Gauge, "catalog_upgrade_epoch",
        "The fencing epoch last seen by this process",
    ),
    Family(
        "deploy_generation", Gauge, "catalog_upgrade_deploy_generation",
        "This process's deploy generation",
    ),
    Family(
        "cutover_seconds", Gauge, "catalog_upgrade_cutover_seconds",
        "The write gap of the promotion this leader took over by: from the old leader's last "
        "append committed to this leader's first (0 until known)",
    ),
    Family(
        "phase_seconds", Histogram, "catalog_upgrade_migration_phase_seconds",
        "Time spent in each migration phase (checking, registering schemas, ...)",
        labels=("phase",), buckets=PHASE_BUCKETS,
    ),
    Family(
        "zookeeper_seconds", Histogram, "catalog_upgrade_zookeeper_request_seconds",
        "ZooKeeper round-trip latency per operation kind",
        labels=("kind",), buckets=ZK_BUCKETS,
    ),
    Family(
        "cas_retries", Counter, "catalog_upgrade_cas_retries",
        "Compare-and-set attempts retried, by the error that caused the retry",
        labels=("error",),
    ),
    Family(
        "rows_appended", Counter, "catalog_upgrade_rows_appended",
        "Rows appended through POST /append, per collection",
        labels=("collection",),
    ),
    Family(
        "blobs_collected", Counter, "catalog_upgrade_blobs_collected",
        "Unreferenced blobs deleted by this leader's garbage collection",
    ),
    Family(
        "zookeeper_connected", Gauge, "catalog_upgrade_zookeeper_connected",
        "1 while the ZooKeeper session is connected",
    ),
    Family(
        "blob_store_up", Gauge, "catalog_upgrade_blob_store_up",
        "1 while the blob store answers this process (0 during an outage)",
    ),
    Family(
        "blob_store_full", Gauge, "catalog_upgrade_blob_store_full",
        "1 while the blob store refuses this process's writes for want of space (full, over a "
        "quota or read-only)",
    ),
    Family(
        "append_group", Histogram, "catalog_upgrade_append_group_size",
        "Appends committed together by one group commit",
        buckets=(1, 2, 4, 8, 16, 32, 64),
    ),
    Family(
        "append_seconds", Histogram, "catalog_upgrade_append_seconds",
        "Time appends spend in each step: parse (the body to rows, per append), queue (waiting "
        "for the group commit to take it, per append), write (the group's rows checked and "
        "written to the blob store, per commit) and commit (the ZooKeeper compare-and-set, per "
        "commit)",
        labels=("step",), buckets=ZK_BUCKETS,
    ),
    Family(
        "phase_started", Gauge, "catalog_upgrade_phase_started_timestamp_seconds",
        "When the phase the process is in now began (Unix time; one series, the current phase: "
        "alerts compare its age with the phase's history)",
        labels=("phase",),
    ),
    Family(
        "refusals", Counter, "catalog_upgrade_refusals",
        "Requests the sidecar refused, by the refusal's error code (read-only, writes-paused, "
        "blob-store-unreachable, busy, unauthorized, ...)",
        labels=("error",),
    ),
    Family(
        "http_connections", Gauge, "catalog_upgrade_http_connections",
        "HTTP connections open to the sidecar (--http-max-connections is the limit)",
    ),
    Family(
        "blob_store_failures", Counter, "catalog_upgrade_blob_store_failures",
        "Blob store operations that failed because the store did not answer",
    ),
    Family(
        "shard_batches", Gauge, "catalog_upgrade_shard_batches",
        "Live batches of the shard a collection is appended to, after the leader's last commit "
        "or merge (a read opens each; appends slow down and then stop at the thresholds of "
        "catalog.shard.merges)",
        labels=("collection",),
    ),
    Family(
        "merge_lag", Gauge, "catalog_upgrade_merge_lag_seconds",
        "How long the oldest merge a collection's shard is due has waited (0: none due)",
        labels=("collection",),
    ),
    Family(
        "merges", Counter, "catalog_upgrade_merges",
        "Merges of the write path committed, by collection",
        labels=("collection",),
    ),
    Family(
        "schema_batches", Gauge, "catalog_upgrade_schema_batches",
        "Batches stored under each schema id of a collection's shard (lazy-migration coverage; "
        "the serving leader exports it, schema ids holding nothing are left out)",
        labels=("collection", "schema_id"),
    ),
    Family(
        "schema_rows", Gauge, "catalog_upgrade_schema_rows",
        "Update rows stored under each schema id of a collection's shard",
        labels=("collection", "schema_id"),
    ),
    Family(
        "retirable_schemas", Gauge, "catalog_upgrade_retirable_schemas",
        "Old schemas of a collection that no stored batch and no reader needs any more",
        labels=("collection",),
    ),
    Family(
        "step_rows_done", Gauge, "catalog_upgrade_step_rows_done",
        "Rows the long step under way (a REWRITE copy) got through",
        labels=("step", "collection"),
    ),
    Family(
        "step_rows_total", Gauge, "catalog_upgrade_step_rows_total",
        "Rows the long step under way will go through (estimated from its batches)",
        labels=("step", "collection"),
    ),
    Family(
        "step_eta", Gauge, "catalog_upgrade_step_eta_seconds",
        "Seconds the long step under way has left at its rate (-1: not known yet)",
        labels=("step", "collection"),
    ),
    Family(
        "step_paused", Gauge, "catalog_upgrade_step_paused",
        "1 while the operator holds the long step under way (catalog-upgrade pause)",
        labels=("step", "collection"),
    ),
    Family(
        "step_progressed", Gauge, "catalog_upgrade_step_progress_timestamp_seconds",
        "When the long step under way last got through a batch, or began (Unix time; the "
        "stalled-step alert compares its age)",
        labels=("step", "collection"),
    ),
)


@attrs.define
class SidecarMetrics:
    """The metric families of one process; ``render()`` is the ``/metrics`` body."""

    registry: CollectorRegistry = attrs.field(factory=lambda: CollectorRegistry(auto_describe=True))
    state: Gauge = attrs.field(init=False)
    leader: Gauge = attrs.field(init=False)
    epoch: Gauge = attrs.field(init=False)
    deploy_generation: Gauge = attrs.field(init=False)
    phase_seconds: Histogram = attrs.field(init=False)
    zookeeper_seconds: Histogram = attrs.field(init=False)
    cas_retries: Counter = attrs.field(init=False)
    rows_appended: Counter = attrs.field(init=False)
    blobs_collected: Counter = attrs.field(init=False)
    zookeeper_connected: Gauge = attrs.field(init=False)
    blob_store_up: Gauge = attrs.field(init=False)
    http_connections: Gauge = attrs.field(init=False)
    phase_started: Gauge = attrs.field(init=False)
    refusals: Counter = attrs.field(init=False)
    append_group: Histogram = attrs.field(init=False)
    append_seconds: Histogram = attrs.field(init=False)
    blob_store_failures: Counter = attrs.field(init=False)
    blob_store_full: Gauge = attrs.field(init=False)
    schema_batches: Gauge = attrs.field(init=False)
    schema_rows: Gauge = attrs.field(init=False)
    retirable_schemas: Gauge = attrs.field(init=False)
    upgrade_pending: Gauge = attrs.field(init=False)
    pending_since: Gauge = attrs.field(init=False)
    finalize_at: Gauge = attrs.field(init=False)
    step_rows_done: Gauge = attrs.field(init=False)
    step_rows_total: Gauge = attrs.field(init=False)
    step_eta: Gauge = attrs.field(init=False)
    step_paused: Gauge = attrs.field(init=False)
    step_progressed: Gauge = attrs.field(init=False)
    cutover_seconds: Gauge = attrs.field(init=False)
    shard_batches: Gauge = attrs.field(init=False)
    merge_lag: Gauge = attrs.field(init=False)
    merges: Counter = attrs.field(init=False)
    # The rows of the last step report (-1: none): a change moves the progress timestamp.
    _step_rows: int = attrs.field(default=-1, init=False)

    def __attrs_post_init__(self) -> None:
        for family in FAMILIES:
            setattr(self, family.attribute, family.made(self.registry))
        self.blob_store_up.set(1)
        for step in APPEND_STEPS:
            self.append_seconds.labels(step=step)  # every step is exported from the start
        self.set_state("starting")

    def observe_step(self, step: StepProgress | None) -> None:
        """The long step under way (None: none): one series per gauge, that step's."""
        gauges = (
            self.step_rows_done, self.step_rows_total, self.step_eta, self.step_paused,
            self.step_progressed,
        )  # fmt: skip
        if step is None:
            for gauge in gauges:
                gauge.clear()
            self._step_rows = -1
            return
        labels = {"step": step.step, "collection": step.collection}
        if step.rows_done != self._step_rows:  # a new step, or the same one further
            self._step_rows = step.rows_done
            self.step_progressed.clear()
            self.step_progressed.labels(**labels).set(step.updated_at)
        for gauge in gauges[:4]:
            gauge.clear()
        self.step_rows_done.labels(**labels).set(step.rows_done)
        self.step_rows_total.labels(**labels).set(step.rows_total or 0)
        self.step_eta.labels(**labels).set(-1 if step.eta_seconds is None else step.eta_seconds)
        self.step_paused.labels(**labels).set(1 if step.paused else 0)

    def set_state(self, state: str) -> None:
        for name in STATES:
            self.state.labels(state=name).set(1 if name == state else 0)

    def set_epoch(self, epoch: int | None) -> None:
        if epoch is not None:
            self.epoch.set(epoch)

    def observe_phase(self, phase: str, seconds: float) -> None:
        self.phase_seconds.labels(phase=phase).observe(seconds)

    def enter_phase(self, phase: str, started: float) -> None:
        """The current phase and its start (Unix time): the only series of the gauge."""
        self.phase_started.clear()
        self.phase_started.labels(phase=phase).set(started)

    def observe_append(self, step: str, seconds: float) -> None:
        """One step of an append (one of :data:`APPEND_STEPS`) took ``seconds``."""
        self.append_seconds.labels(step=step).observe(seconds)

    def observe_zookeeper(self, kind: str, seconds: float) -> None:
        """The :attr:`Consensus.observer` hook."""
        self.zookeeper_seconds.labels(kind=kind).observe(seconds)

    def count_cas_retry(self, error: Exception) -> None:
        """The :attr:`CasRetry.on_retry` hook."""
        self.cas_retries.labels(error=type(error).__name__).inc()

    def set_coverage(self, report: CoverageReport) -> None:
        """The leader's latest coverage reading (series of collections gone are dropped)."""
        self.schema_batches.clear()
        self.schema_rows.clear()
        self.retirable_schemas.clear()
        for item in report.collections:
            for use in item.coverage.schemas:
                if use.batches:
                    labels = {"collection": item.name, "schema_id": str(use.schema_id)}
                    self.schema_batches.labels(**labels).set(use.batches)
                    self.schema_rows.labels(**labels).set(use.rows)
            self.retirable_schemas.labels(collection=item.name).set(len(item.coverage.retirable))

    def set_pending(self, pending: PendingUpgrade | None, switched: float | None = None) -> None:
        """The serving leader's view of the pending upgrade (None: the version is final).
        With ``switched`` (the switch on ZooKeeper's clock, catalog.pending.switched_at) both
        times are on ZooKeeper's clock, so no host's clock moves the overdue alert."""
        self.upgrade_pending.clear()
        if pending is None:
            self.pending_since.set(0)
            self.finalize_at.set(0)
            return
        self.upgrade_pending.labels(version=pending.version,
                                    from_version=pending.from_version).set(1)  # fmt: skip
        since = pending.since if switched is None else switched
        self.pending_since.set(since)
        at = pending.finalize_at
        self.finalize_at.set(float("inf") if at is None else since + (at - pending.since))

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
