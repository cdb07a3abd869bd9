"""A scenario's workload: clients appending with idempotency keys, and a reader, through every
step and fault, each operation recorded as a real client would see it.

Each client appends one row at a time (``rate`` a second) with a key of its own. An append is
retried with the same key, against whichever process leads now, until it gets a definite
answer or ``op_timeout`` passes. Its outcome (:class:`Operation`):

* ``ok``: some attempt answered 200;
* ``fail``: every attempt was refused before anything could be written (a read-only process
  answering 409, writes paused or the blob store down, 503 with that ``error``, a 4xx);
* ``unknown``: no attempt was acknowledged and one of them may have landed (no answer, a lost
  connection after sending, a 5xx that does not say).

The reader reads the collection from the leader now and then and records the rows of the
workload it saw. :mod:`orchestrator.scenario.history` checks the history against the final
contents.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import attrs

from catalog_client import Answer
from catalog_client.media import JSON_LINES_TYPE
from orchestrator.scenario.format import WorkloadSpec
from orchestrator.testing.harness import SidecarProcess

#: Error codes of a 503 that promise nothing was written.
_NOT_WRITTEN = frozenset({"writes-paused", "blob-store-unreachable", "read-only"})
#: The prefix of every row id the workload writes (the checker's "sent by a client").
ROW_PREFIX = "w"


@attrs.define(eq=False)
class Operation:
    """One append as its client saw it."""

    client: int
    n: int
    invoked: float
    completed: float | None = None
    outcome: str = "pending"
    attempts: list[str] = attrs.field(factory=list)

    @property
    def row_id(self) -> str:
        return f"{ROW_PREFIX}{self.client}-{self.n}"

    @property
    def key(self) -> str:
        return f"workload-{self.client}-{self.n}"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "append",
            "client": self.client,
            "row": self.row_id,
            "key": self.key,
            "invoked": round(self.invoked, 4),
            "completed": None if self.completed is None else round(self.completed, 4),
            "outcome": self.outcome,
            "attempts": self.attempts,
        }


@attrs.frozen
class Read:
    """One read of the collection: when, and the workload's rows it held."""

    at: float
    rows: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        return {"type": "read", "at": round(self.at, 4), "rows": sorted(self.rows)}


def classify(answer: Answer) -> str:
    """One attempt's answer: ``ok``, ``fail`` (surely not written) or ``unknown``."""
    if answer.status == 200:
        return "ok"
    error = None
    if answer.body:
        try:
            body = json.loads(answer.body)
            error = body.get("error") if isinstance(body, dict) else None
        except ValueError:
            error = None
    if error in _NOT_WRITTEN or 400 <= answer.status < 500:
        return "fail"
    return "unknown"  # no answer (status 0), or a 5xx that may follow a landed write


@attrs.define
class Workload:
    """The clients and the reader of one scenario run, started and stopped around its steps."""

    spec: WorkloadSpec
    leaders: Any  # () -> the processes to try, the leader first
    started: float = attrs.field(factory=time.monotonic)
    operations: list[Operation] = attrs.field(factory=list)
    reads: list[Read] = attrs.field(factory=list)
    _stop: threading.Event = attrs.field(factory=threading.Event)
    _threads: list[threading.Thread] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.started

    def start(self) -> Workload:
        for c in range(self.spec.clients):
            self._threads.append(threading.Thread(target=self._client, args=(c,), daemon=True))
        if self.spec.reads > 0:
            self._threads.append(threading.Thread(target=self._reader, daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop sending; wait for the operations under way to end (their retries included)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.spec.op_timeout + 15)

    def _client(self, c: int) -> None:
        rng = random.Random(c)
        interval = 1.0 / self.spec.rate
        n = 0
        while not self._stop.wait(interval * rng.uniform(0.5, 1.5)):
            n += 1
            op = Operation(c, n, self.now())
            with self._lock:
                self.operations.append(op)
            self._append(op)

    def _append(self, op: Operation) -> None:
        row = {"id": op.row_id, "oid": 900_000 + op.client * 100_000 + op.n,
               "schema_id": "u3", "name": op.row_id, "owner_id": "u1"}  # fmt: skip
        body = (json.dumps(row) + "\n").encode()
        deadline = time.monotonic() + self.spec.op_timeout
        seen: set[str] = set()
        while True:
            for process in self.leaders():
                answer = process.request(
                    "POST",
                    f"/append?collection={self.spec.collection}",
                    body,
                    timeout=5.0,
                    headers={"Idempotency-Key": op.key, "Content-Type": JSON_LINES_TYPE},
                )
                verdict = classify(answer)
                op.attempts.append(f"{process.name}:{answer.status or 'no answer'}:{verdict}")
                seen.add(verdict)
                if verdict == "ok":
                    op.outcome, op.completed = "ok", self.now()
                    return
                if answer.status != 409:  # a read-only process: the next one may lead
                    break
            if time.monotonic() >= deadline:
                op.outcome = "unknown" if "unknown" in seen else "fail"
                op.completed = self.now()
                return
            time.sleep(0.2)

    def _reader(self) -> None:
        interval = 1.0 / self.spec.reads
        while not self._stop.wait(interval):
            for process in self.leaders()[:1]:
                answer = process.request(
                    "GET", f"/read?collection={self.spec.collection}", timeout=5.0
                )
                if answer.status == 200:
                    self.reads.append(Read(self.now(), workload_rows(answer)))


def workload_rows(answer: Answer) -> frozenset[str]:
    """The workload's row ids in a ``/read`` answer (each as often as it is there is checked
    separately: :func:`row_counts`)."""
    return frozenset(row_counts(answer))


def row_counts(answer: Answer) -> dict[str, int]:
    """How many times each workload row is in a ``/read`` answer (a row read with ``_diff``
    above one counts that often)."""
    counts: dict[str, int] = {}
    for row in answer.json_lines():
        ident = str(row.get("id"))
        if ident.startswith(ROW_PREFIX):
            counts[ident] = counts.get(ident, 0) + int(str(row.get("_diff", 1)))
    return counts


def leaders_of(processes: dict[str, SidecarProcess], leader: str | None) -> list[SidecarProcess]:
    """Running processes, the named leader first."""
    running = [p for p in processes.values() if p.running and not p.paused]
    running.sort(key=lambda p: p.name != leader)
    return running
