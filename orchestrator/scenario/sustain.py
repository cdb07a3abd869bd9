"""A sustained-write phase: clients appending all along while a reader reads, each read timed
and checked (the ``sustain`` step).

``clients`` threads append the step's rows to one process in a loop for ``seconds``, each
append under a key of its own, retried with that key (after ``Retry-After``) until it gets a
definite answer. A reader reads the collection from the same process all along. The phase
holds when every append got a definite answer, no read found fewer of the step's rows than the
read before it (nothing acknowledged vanishes, whatever the merges under it did), every read
answered within ``max_read_seconds``, the process never reported a shard listing the hard cap
of batches (its ``catalog_upgrade_shard_batches``, sampled all along), and the last read holds
exactly what was acknowledged.
What an hour of appends does to a read is what this phase rehearses in a few seconds: a read
whose cost grew with the write rate would miss its bound.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from catalog.shard.merges import STOP_BATCHES
from catalog_client import Answer
from orchestrator.scenario.multisets import json_default
from orchestrator.testing.harness import SidecarProcess, metric_samples

__all__ = ["DEFAULT_MAX_READ_SECONDS", "SustainedWrites"]

#: How long one read may take during the phase by default: far above a healthy read (tens of
#: milliseconds), far below what a read costs when merges do not keep up (tens of seconds).
DEFAULT_MAX_READ_SECONDS = 5.0
#: How long one append is retried with its key before its outcome counts as unknown.
_APPEND_DEADLINE = 15.0
#: How often the phase samples the process's batches per shard.
_SAMPLE_SECONDS = 0.5
_BATCHES = "catalog_upgrade_shard_batches"


@attrs.define
class SustainedWrites:
    """One phase: its clients' appends and its reader's reads, with what each saw."""

    process: SidecarProcess
    collection: str
    rows: Sequence[Mapping[str, Any]]
    seconds: float
    clients: int = 4
    max_read_seconds: float = DEFAULT_MAX_READ_SECONDS
    acknowledged: list[dict[str, Any]] = attrs.field(factory=list)  # each append's answer
    unknown: int = 0
    refusals: list[str] = attrs.field(factory=list)
    reads: list[tuple[float, int]] = attrs.field(factory=list)  # (seconds taken, rows found)
    #: The most batches the process reported for one shard, sampled during the phase.
    batches: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def run(self) -> str:
        """Run the phase; what it did, in one line. AssertionError naming what did not hold
        (the caller reports it as the step's failure)."""
        before = self._read_count()
        stop = threading.Event()
        writers = [
            threading.Thread(target=self._client, args=(stop,), daemon=True)
            for _ in range(self.clients)
        ]
        watchers = [
            threading.Thread(target=self._reader, args=(stop,), daemon=True),
            threading.Thread(target=self._sampler, args=(stop,), daemon=True),
        ]
        started = time.monotonic()
        for thread in [*writers, *watchers]:
            thread.start()
        time.sleep(self.seconds)
        stop.set()
        for thread in [*writers, *watchers]:
            thread.join(_APPEND_DEADLINE + 30)
        took = time.monotonic() - started
        self._check(before)
        latencies = sorted(t for t, _ in self.reads)
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        return (
            f"{len(self.acknowledged)} append(s) by {self.clients} client(s) in {took:.1f} s "
            f"({len(self.acknowledged) / took:.0f}/s); {len(latencies)} read(s), p99 "
            f"{p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms; batches per shard at "
            f"most {self.batches}"
        )

    def _check(self, before: int) -> None:
        assert not self.refusals, f"appends refused during the phase: {self.refusals[:3]}"
        assert not self.unknown, f"{self.unknown} append(s) got no definite answer"
        assert self.reads, "no read answered during the phase"
        assert self.batches < STOP_BATCHES, (
            f"a shard listed {self.batches} batches during the phase: the merges fell behind "
            f"to the hard cap ({STOP_BATCHES})"
        )
        slow = [t for t, _ in self.reads if t > self.max_read_seconds]
        assert not slow, (
            f"{len(slow)} read(s) of {self.collection} took over {self.max_read_seconds:g} s "
            f"(the slowest {max(slow):.1f} s) while {self.clients} client(s) appended"
        )
        counts = [before, *(n for _, n in self.reads)]
        for earlier, later in itertools.pairwise(counts):
            assert later >= earlier, (
                f"a read found {later} of the phase's rows after one found {earlier}: "
                "acknowledged rows vanished"
            )
        final = self._read_count()
        expected = before + len(self.acknowledged) * len(self.rows)
        assert final == expected, (
            f"the last read holds {final - before} of the phase's rows; "
            f"{len(self.acknowledged)} append(s) of {len(self.rows)} were acknowledged"
        )

    def _client(self, stop: threading.Event) -> None:
        body = "".join(json.dumps(row, default=json_default) + "\n" for row in self.rows)
        while not stop.is_set():
            self._append(body.encode())

    def _append(self, body: bytes) -> None:
        answer = self.process.append(
            self.collection, body, key=f"sustain-{uuid.uuid4().hex}",
            deadline=time.monotonic() + _APPEND_DEADLINE, retry_unanswered=True,
        )  # fmt: skip
        with self._lock:
            if answer.ok:
                self.acknowledged.append(json.loads(answer.body))
            elif answer.status == 0:  # unanswered to the end: it may have landed
                self.unknown += 1
            else:  # a refusal, or a 503 to the end: surely not written
                self.refusals.append(answer.summary())

    def _sampler(self, stop: threading.Event) -> None:
        """The most batches the process reports for any shard, every ``_SAMPLE_SECONDS``."""
        while not stop.wait(_SAMPLE_SECONDS):
            answer = self.process.request("GET", "/metrics", timeout=5.0)
            if not answer.ok:
                continue  # a busy moment: the next sample
            samples = metric_samples(answer.body.decode())
            found = [int(v) for k, v in samples.items() if k.startswith(_BATCHES + "{")]
            self.batches = max([self.batches, *found])

    def _reader(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            answer = self._read()
            took = time.monotonic() - started
            if answer.ok:
                self.reads.append((took, self._count(answer)))
            else:
                with self._lock:
                    self.refusals.append(f"read: {answer.summary()}")

    def _read(self) -> Answer:
        return self.process.request("GET", f"/read?collection={self.collection}", timeout=60.0)

    def _read_count(self) -> int:
        answer = self._read()
        assert answer.ok, f"read of {self.collection} answered {answer.summary()}"
        return self._count(answer)

    def _count(self, answer: Answer) -> int:
        """How many of the phase's rows ``answer`` holds (a row's ``_diff`` counts that many):
        a read row is one of them when it has every text value of one of the step's rows
        (texts read back as they were sent; other types may come back in another form)."""
        keys = [
            {k: v for k, v in mine.items() if isinstance(v, str)} or dict(mine)
            for mine in self.rows
        ]
        found = 0
        for row in answer.json_lines():
            if any(all(row.get(k) == v for k, v in mine.items()) for mine in keys):
                found += int(row.get("_diff", 1))
        return found
