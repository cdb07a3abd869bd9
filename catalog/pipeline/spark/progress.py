"""A Spark job's progress as a long step's: tasks done of total, and the rows read so far.

While a job of a paced step runs (:class:`JobProgress` around the action), a thread polls the
job group's stages through the status tracker, and reports to the step's
:class:`~catalog.pipeline.pacing.Pacer` (:meth:`~catalog.pipeline.pacing.Pacer.observe`:
progress only; a throttle or a pause holds a Spark step between jobs, never inside one):

* the rows its scan has read, running tasks included, when the job has one scan: the scan's
  ``number of output rows`` in the SQL status store, which executors report with their
  heartbeats (every :data:`HEARTBEAT_INTERVAL`, set on the sessions this project starts). The
  progress then moves smoothly, and its ETA follows the job's recent pace;
* otherwise ``rows * tasks_done / tasks_total``: progress by steps, a task at a time.

On Spark Connect there is no status tracker on this side: the step then counts its rows when
the job ends, as before.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any, Final

import structlog

from catalog.pipeline.pacing import Pacer

__all__ = ["JobProgress"]

log = structlog.get_logger(__name__)

#: How often the tracker is polled.
POLL_SECONDS: Final = 0.5
#: The fewest tasks a watched job splits its files into: a task is a step of its progress, so
#: each stands for at most a few percent of the rows, and the first (which starts Python
#: workers and warms the JVM) is a small part of the whole.
MIN_TASKS: Final = 32
_MIN_PARTITIONS = "spark.sql.files.minPartitionNum"
#: How often executors send the metrics of running tasks (Spark's default: 10 s): twice per
#: poll, so a poll sees rows at most a quarter second old.
HEARTBEAT_INTERVAL: Final = "250ms"
#: The SQL metric of a scan that counts the rows it read.
_SCAN_ROWS = "number of output rows"


class JobProgress:
    """Polls the stages of one job group and reports them to ``pacer`` (see the module)."""

    def __init__(self, spark: Any, pacer: Pacer, rows: int, base: int = 0) -> None:
        """``rows``: what the job reads; ``base``: the step's rows before it (a slice of a
        copy counts on from the slices before)."""
        self._spark = spark
        self._pacer = pacer
        self._rows = rows
        self._base = base
        self._group = f"catalog-upgrade-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        # (execution id, its scan's row metric, None without one scan) once found.
        self._scan: tuple[int, int | None] | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around the action: the job runs in this group while the thread polls it."""
        try:
            context = self._spark.sparkContext
            tracker = context.statusTracker()
        except Exception:  # Spark Connect: no SparkContext on this side
            yield
            return
        context.setJobGroup(self._group, "catalog-upgrade long step")
        conf = self._spark.conf
        split = conf.get(_MIN_PARTITIONS, None)
        conf.set(_MIN_PARTITIONS, str(max(MIN_TASKS, int(split or 0))))
        thread = threading.Thread(
            target=self._poll, args=(tracker,), name="spark-progress", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join(timeout=5)
            context.setJobGroup("", "")
            if split is None:
                conf.unset(_MIN_PARTITIONS)
            else:
                conf.set(_MIN_PARTITIONS, split)
        self._report(tracker, ended=True)

    def _poll(self, tracker: Any) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._report(tracker)

    def _report(self, tracker: Any, *, ended: bool = False) -> None:
        """Reports the job's tasks and rows. ``ended``: the action has returned, so every task
        is done, whatever the tracker says yet (it is fed by Spark's listener bus, which may
        still be behind on the last tasks' ends)."""
        try:
            jobs = tracker.getJobIdsForGroup(self._group)
            done, total = self._tasks(tracker, jobs)
        except Exception as exc:  # the tracker is best effort: the job's end still counts
            log.debug("spark_progress_unreadable", error=repr(exc))
            return
        if not total:
            return
        if ended:
            done = total
        stepped = self._rows * done // total
        try:
            read = self._scanned(jobs)
        except Exception as exc:  # the SQL status store is Spark's internals: best effort
            log.debug("spark_scan_rows_unreadable", error=repr(exc))
            read = None
        if read is None:
            self._pacer.observe(self._base + stepped, tasks=(done, total))
        else:  # a task's rows count once it is done, whatever its scan read: while one
            # runs, the step is short of its total (its last rows may be read, not written)
            rows = stepped if done == total else max(stepped, min(read, self._rows - 1))
            self._pacer.observe(self._base + rows, tasks=(done, total), running=True)

    def _tasks(self, tracker: Any, jobs: list[int]) -> tuple[int, int]:
        done = total = 0
        for job_id in jobs:
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _scanned(self, jobs: list[int]) -> int | None:
        """The rows the job's scan read so far, running tasks included; None when the job's
        SQL execution is not found or reads through more than one scan (its rows would not be
        the step's)."""
        if not jobs:
            return None
        store = self._spark._jsparkSession.sharedState().statusStore()
        if self._scan is None:
            self._scan = self._find_scan(store, jobs[0])
        if self._scan is None or self._scan[1] is None:
            return None
        identity, accumulator = self._scan
        value = store.executionMetrics(identity).get(accumulator)
        return int(value.get().replace(",", "")) if value.isDefined() else 0

    @staticmethod
    def _find_scan(store: Any, job_id: int) -> tuple[int, int | None] | None:
        """The SQL execution running ``job_id`` and its one scan's row metric (None when it has
        several scans, or none); None while the execution is not listed."""
        executions = store.executionsList()
        for index in reversed(range(executions.size())):
            execution = executions.apply(index)
            if not execution.jobs().contains(job_id):
                continue
            identity = execution.executionId()
            scans = []
            nodes = store.planGraph(identity).allNodes()
            for n in range(nodes.size()):
                node = nodes.apply(n)
                if node.name().startswith("Scan"):
                    metrics = node.metrics()
                    scans += [
                        metrics.apply(m).accumulatorId()
                        for m in range(metrics.size())
                        if metrics.apply(m).name() == _SCAN_ROWS
                    ]
            return identity, scans[0] if len(scans) == 1 else None
        return None
