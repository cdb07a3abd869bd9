"""Pacing a long step (a REWRITE copy): its progress counted by batch, its rate held under an
operator's limit, and a wait while the operator has paused it.

A :class:`Pacer` is told where a step starts (:meth:`Pacer.begin`), how much it will read
(:meth:`Pacer.expect`) and each batch it got through (:meth:`Pacer.advance`). After each batch it
sleeps as long as the limit asks, waits while the step is paused (so a paused step writes
nothing: a copy's append comes after its last batch), and reports a :class:`StepProgress` at
most once per ``every`` seconds. The pace (paused, rows per second) comes from a callable the
caller keeps current (the sidecar watches a ZooKeeper node); ``check`` runs while it sleeps or
waits and may raise to end the step (a process asked to stop, a leader fenced), so a pause never
holds up fencing or a shutdown.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["RATE_WINDOW", "Pace", "Pacer", "StepProgress"]

#: The longest single sleep of a throttled or paused step: how soon it sees a change of pace.
_SLICE = 0.25
#: Seconds of running a step's rate (and so its ETA) is measured over, by default.
RATE_WINDOW = 30.0


@attrs.frozen
class Pace:
    """What the operator set for a generation's long steps."""

    paused: bool = False
    #: The most rows per second (None: as fast as it goes).
    rows_per_second: float | None = None


@attrs.frozen
class StepProgress:
    """Where a long step is: rows and bytes done of the (estimated) total, its rate and ETA.

    ``rate`` counts the time the step ran, not the time it was paused; ``eta_seconds`` is None
    until a rate is known. ``bytes_total`` is estimated from the bytes per row read so far."""

    step: str
    collection: str
    rows_done: int
    rows_total: int | None
    bytes_done: int
    bytes_total: int | None
    started_at: float
    updated_at: float
    rate: float
    eta_seconds: float | None
    paused: bool = False
    limit: float | None = None
    #: On Spark: the job's tasks done of its total (None on the arrow engine).
    tasks_done: int | None = None
    tasks_total: int | None = None

    @property
    def fraction(self) -> float | None:
        if not self.rows_total:
            return None
        return min(1.0, self.rows_done / self.rows_total)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> StepProgress | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{f.name: data[f.name] for f in attrs.fields(cls) if f.name in data})
        except TypeError:
            return None


class Pacer:
    """The pace of one process's long steps, one at a time (see the module's story)."""

    def __init__(
        self,
        pace: Callable[[], Pace] = Pace,
        report: Callable[[StepProgress | None], None] = lambda progress: None,
        check: Callable[[], None] = lambda: None,
        *,
        every: float = 1.0,
        window: float = RATE_WINDOW,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._pace = pace
        self._report = report
        self._check = check
        self._every = every
        self._window = window
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._step: str | None = None
        self._collection = ""
        self._total: int | None = None
        self._rows = 0
        self._resumed = 0  # rows done before the step started here (a resumed copy)
        self._bytes = 0
        self._started_at = 0.0
        self._active = 0.0  # seconds the step ran, pauses left out
        self._since = 0.0  # when the running stretch began (clock)
        self._base: tuple[float, int, float | None] = (0.0, 0, None)  # the throttle's start
        self._reported = float("-inf")
        self._paused = False
        self._tasks: tuple[int, int] | None = None
        # A job's step-wise progress (observe): its first jump and its last, (active seconds,
        # rows) each.
        self._stepwise = False
        self._first: tuple[float, int] | None = None
        self._last: tuple[float, int] | None = None
        self._lock = threading.Lock()
        # (active seconds, rows) after each batch within the rate's window (the first kept).
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    @property
    def progress(self) -> StepProgress | None:
        """The step's progress now (None between steps)."""
        if self._step is None:
            return None
        active = self._active + (0.0 if self._paused else self._clock() - self._since)
        left = None if self._total is None else max(0, self._total - self._rows)
        if self._stepwise:  # a job's tasks: no ETA until its pace is known
            stepped = self._stepped()
            rate, jumped = stepped if stepped is not None else (0.0, active)
            # Counted down from the last jump: between a job's tasks nothing moves, and a
            # rate that sagged until the next one would say the job slowed down.
            eta = None if left is None or not rate else max(0.0, left / rate - (active - jumped))
        else:
            rate = self._rate(active)
            eta = None if left is None or rate <= 0 else left / rate
        ran = self._rows - self._resumed
        per_row = self._bytes / ran if ran > 0 else None
        total_bytes = None if self._total is None or per_row is None else int(per_row * self._total)
        return StepProgress(
            self._step, self._collection, self._rows, self._total, self._bytes, total_bytes,
            self._started_at, self._wall(), round(rate, 1),
            None if eta is None else round(eta, 3), self._paused, self._pace().rows_per_second,
            *(self._tasks or (None, None)),
        )  # fmt: skip

    def _stepped(self) -> tuple[float, float] | None:
        """For progress that moves by a job's tasks (observe): the rate from its first jump to
        its last, and when that was (None before the second jump). Counted from the first
        jump: the first tasks also started the job's workers, and the time the step planned
        before the job says nothing of the job's pace."""
        if self._first is None or self._last is None:
            return None
        (began, first), (jumped, rows) = self._first, self._last
        if jumped <= began or rows <= first:
            return None
        return (rows - first) / (jumped - began), jumped

    def _rate(self, active: float) -> float:
        """Rows per second of running over the last ``window`` seconds of it, counted from the
        first batch through at most: the time before it (planning, a cold start) says little
        about the rest, and a step that slowed down or sped up is judged by what it does now."""
        while len(self._samples) > 2 and active - self._samples[1][0] >= self._window:
            self._samples.popleft()
        if self._samples:
            since, rows = self._samples[0]
            if active > since and self._rows > rows:
                return (self._rows - rows) / (active - since)
        ran = self._rows - self._resumed
        return ran / active if active > 0 and ran > 0 else 0.0

    def begin(self, step: str, collection: str) -> None:
        """A step starts. Paused already, it waits once it knows its rows (:meth:`expect`,
        which every step calls after reading only metadata), so a copy restarted while paused
        shows its checkpoint's progress as it waits, not zero rows of an unknown total."""
        self._step, self._collection = step, collection
        self._total, self._rows, self._bytes = None, 0, 0
        self._resumed = 0
        self._started_at, self._active, self._since = self._wall(), 0.0, self._clock()
        # The limit in force when the step starts counts from its start: a copy of one batch
        # is held to it too.
        self._base = (self._since, 0, self._pace().rows_per_second)
        self._reported = float("-inf")
        self._samples.clear()
        self._tasks = None
        self._stepwise, self._first, self._last = False, None, None
        self._publish(force=True)

    def expect(self, rows: int, *, done: int = 0) -> None:
        """The rows the step will go through (known once it planned), ``done`` of them
        already (a copy resumed from its checkpoint): counted as done, not in the rate."""
        self._total = rows
        if done > self._rows:
            self._rows = done
            self._resumed = done
            self._samples.clear()
            self._base = (self._clock(), done, self._base[2])
        self._publish(force=True)
        self._hold()

    def advance(self, rows: int, nbytes: int = 0) -> None:
        """A batch of ``rows`` (``nbytes`` in memory) is through: throttle, hold while paused,
        report."""
        if self._step is None:
            return
        self._rows += rows
        self._bytes += nbytes
        self._throttle()
        # Sampled once the throttle let the batch through, as a report is: the rate is then
        # of whole batches' turns (work and wait), and a throttled ETA holds the limit's pace.
        self._samples.append((self._active + self._clock() - self._since, self._rows))
        self._hold()
        self._publish()

    def observe(
        self, rows_done: int, *, tasks: tuple[int, int] | None = None, running: bool = False
    ) -> None:
        """Progress an engine saw while a job of the step runs (Spark's tasks), from any
        thread: counted and reported, never throttled or held (the job cannot stop midway).
        Rows only move forward; :meth:`advance` then counts the rest when the job ends.
        ``running``: the rows include those of running tasks, so they move smoothly and the
        ETA comes from the recent rate, as for batches; otherwise they move by ``tasks``."""
        with self._lock:
            if self._step is None:
                return
            active = self._active + (0.0 if self._paused else self._clock() - self._since)
            if running:
                self._stepwise, self._first, self._last = False, None, None
            elif tasks is not None:
                self._stepwise = True
            if rows_done > self._rows:
                self._rows = rows_done
                self._samples.append((active, self._rows))
                if self._stepwise:
                    self._last = (active, self._rows)
                    self._first = self._first or self._last
            if tasks is not None:
                self._tasks = tasks
            self._publish()

    @property
    def rows_done(self) -> int:
        """Rows counted so far in this step."""
        return self._rows

    def end(self) -> None:
        """The step is done: its last progress is reported, then none."""
        if self._step is None:
            return
        if self._total is not None:
            self._total = max(self._total, self._rows)
        self._publish(force=True)
        self._step = None
        self._report(None)

    def _throttle(self) -> None:
        limit = self._pace().rows_per_second
        base_at, base_rows, base_limit = self._base
        if limit != base_limit:  # a new limit counts from now
            self._base = (self._clock(), self._rows, limit)
            return
        if not limit:
            return
        due = base_at + (self._rows - base_rows) / limit
        while (wait := due - self._clock()) > 0:
            self._check()
            self._sleep(min(wait, _SLICE))
            pace = self._pace()
            if pace.paused or pace.rows_per_second != limit:
                return  # paused: held at once (_hold); a new limit counts from now

    def _hold(self) -> None:
        """Wait while the step is paused; the time paused counts in neither rate nor ETA."""
        if not self._pace().paused:
            return
        self._active += self._clock() - self._since
        self._paused = True
        self._publish(force=True)
        try:
            while self._pace().paused:
                self._check()
                self._publish()
                self._sleep(_SLICE)
        finally:
            self._paused = False
            self._since = self._clock()
            self._base = (self._since, self._rows, self._pace().rows_per_second)
        self._publish(force=True)

    def _publish(self, *, force: bool = False) -> None:
        now = self._clock()
        if force or now - self._reported >= self._every:
            self._reported = now
            self._report(self.progress)
