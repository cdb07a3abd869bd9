"""A Spark job's progress as a long step's: tasks done of total, and the rows they stand for.

Spark knows how many of a job's tasks are done, not how many rows went through them. While a
job of a paced step runs (:class:`JobProgress` around the action), a thread polls the job
group's stages through the status tracker and reports ``rows * tasks_done / tasks_total`` to
the step's :class:`~catalog.pipeline.pacing.Pacer` (:meth:`~catalog.pipeline.pacing.Pacer.observe`:
progress only; a throttle or a pause holds a Spark step between jobs, never inside one). On
Spark Connect there is no status tracker on this side: the step then counts its rows when the
job ends, as before.
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


class JobProgress:
    """Polls the stages of one job group and reports them to ``pacer`` (see the module)."""

    def __init__(self, spark: Any, pacer: Pacer, rows: int) -> None:
        self._spark = spark
        self._pacer = pacer
        self._rows = rows
        self._group = f"catalog-upgrade-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()

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
        self._report(tracker)  # the job is over: its tasks as they ended

    def _poll(self, tracker: Any) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._report(tracker)

    def _report(self, tracker: Any) -> None:
        try:
            done, total = self._tasks(tracker)
        except Exception as exc:  # the tracker is best effort: the job's end still counts
            log.debug("spark_progress_unreadable", error=repr(exc))
            return
        if total:
            self._pacer.observe(self._rows * done // total, tasks=(done, total))

    def _tasks(self, tracker: Any) -> tuple[int, int]:
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total
