"""The cut-over of one promotion as the new leader sees it: its timeline and its write gap.

Marks, each a wall-clock time:

* ``target written``: the promotion node's own time (when ``promote`` moved the target);
* ``took over``: this process's takeover transaction committed. From then on no write of an
  older leader can land: it is fenced (its writes carry the epoch's version);
* the migration's phases as the leader entered them (``registering schemas``, ``rewriting``,
  ``switching catalog``...);
* ``appends taken``: the catalog switch committed; appends go on from here while the
  leader finishes its migration (retractions, a finalization decided already);
* ``serving``: the migration done;
* ``first append``: the first append committed;
* ``old leader's last commit``: what the old leader recorded with its exit event
  (``last_commit_at``), for the write gap: from it to our first append.

Once the first append is committed, the main thread's next beat (:meth:`Cutover.settle`) looks
for the old leader's exit event, logs the timeline once (``cutover``: each mark in seconds
after the target was written) and sets ``catalog_upgrade_cutover_seconds`` to the write gap.
An old leader's event that is not there within :data:`LOOK_SECONDS` of the first append (it
was killed, or still drains) leaves the gap unknown: the timeline is logged without it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from catalog.consensus import Consensus
from catalog.errors import ConnectionLostError
from orchestrator.events import read_events
from orchestrator.machine.metrics import SidecarMetrics

#: Seconds after the first append that the old leader's exit event is looked for.
LOOK_SECONDS: Final = 30.0
#: The exit events of an old leader (it records ``last_commit_at`` with them).
_EXITS: Final = frozenset({"fenced", "failed"})


class Cutover:
    """The marks of the promotion this process took over by (see the module's story)."""

    def __init__(self, metrics: SidecarMetrics, generation: int) -> None:
        self._metrics = metrics
        self._generation = generation
        self._lock = threading.Lock()
        self._marks: list[tuple[str, float]] = []
        self._target_at: float | None = None
        self._first: float | None = None
        self._settled = True  # nothing to settle until a takeover

    def took_over(self, target_written: float | None, at: float) -> None:
        """A takeover committed at ``at``; the target it answers was written at
        ``target_written`` (None: not known, a bootstrap)."""
        with self._lock:
            self._target_at = target_written
            self._marks = [("took over", at)]
            self._first = None
            self._settled = target_written is None  # a bootstrap has no old leader

    def phases(self, entered: list[tuple[str, float]]) -> None:
        """The migration's phases, as entered (``Progress.end_migration``)."""
        with self._lock:
            self._marks += [(phase, at) for phase, at in entered if phase != "taking over"]

    def appending(self, at: float) -> None:
        """The catalog switch committed: appends go on from ``at``."""
        with self._lock:
            self._marks.append(("appends taken", at))

    def serving(self, at: float) -> None:
        with self._lock:
            self._marks.append(("serving", at))

    def committed(self, at: float) -> None:
        """An append committed at ``at`` (any thread): the first one ends the cut-over."""
        if self._first is not None:
            return
        with self._lock:
            if self._first is None and not self._settled:
                self._first = at
                self._marks.append(("first append", at))

    def settle(self, consensus: Consensus | None, log: Any) -> None:
        """On the main thread's beat, after the first append: the old leader's last commit
        looked up, the timeline logged and the write gap set, once."""
        with self._lock:
            if self._settled or self._first is None or self._target_at is None:
                return
            first, target = self._first, self._target_at
            marks = list(self._marks)
        last = self._old_leader_last_commit(consensus, target)
        if last is None and time.time() - first < LOOK_SECONDS:
            return  # the old leader may still be writing its exit event
        with self._lock:
            self._settled = True
        gap = None if last is None else max(0.0, first - last)
        if gap is not None:
            self._metrics.cutover_seconds.set(gap)
        timeline = {name: round(at - target, 3) for name, at in marks}
        if last is not None:
            timeline = {"old leader's last commit": round(last - target, 3), **timeline}
        log.info(
            "cutover",
            write_gap_seconds=None if gap is None else round(gap, 3),
            timeline=dict(sorted(timeline.items(), key=lambda item: item[1])),
            target_written_at=target,
        )

    def _old_leader_last_commit(self, consensus: Consensus | None, since: float) -> float | None:
        """The latest ``last_commit_at`` an exit event of another generation recorded after
        the target was written."""
        if consensus is None:
            return None
        try:
            events = read_events(consensus, limit=20)
        except ConnectionLostError:
            return None
        found = [
            float(e.fields["last_commit_at"])
            for e in events
            if e.kind in _EXITS
            and e.at >= since
            and e.fields.get("deploy_generation") != self._generation
            and isinstance(e.fields.get("last_commit_at"), (int, float))
        ]
        return max(found, default=None)
