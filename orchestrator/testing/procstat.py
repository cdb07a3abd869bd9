"""What a process holds and uses, from ``/proc`` (Linux): threads and resident memory, now and
at peak; CPU time so far. And the machine's: its CPU time busy so far, every core and process."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import attrs


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB."""
    return int(_status(pid)["VmRSS"].split()[0])


def thread_count(pid: int) -> int:
    """Threads of ``pid``."""
    return int(_status(pid)["Threads"])


def cpu_seconds(pid: int) -> float:
    """CPU seconds ``pid`` has used so far, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the machine's cores have been busy so far (every process and the kernel's
    own work: all of ``/proc/stat``'s time but idle and waiting on I/O)."""
    line = Path("/proc/stat").read_text().splitlines()[0]  # the "cpu" line: every core's sum
    ticks = [int(v) for v in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


@attrs.define
class Peaks:
    """Samples ``pid`` every ``interval`` seconds while in a ``with`` block: the most threads and
    resident memory seen."""

    pid: int
    interval: float = 0.05
    threads: int = 0
    rss_kib: int = 0
    _stop: threading.Event = attrs.field(factory=threading.Event, init=False)
    _sampler: threading.Thread | None = attrs.field(default=None, init=False)

    def sample(self) -> None:
        status = _status(self.pid)
        self.threads = max(self.threads, int(status["Threads"]))
        self.rss_kib = max(self.rss_kib, int(status["VmRSS"].split()[0]))

    def __enter__(self) -> Peaks:
        self.sample()
        self._sampler = threading.Thread(target=self._run, name="peaks", daemon=True)
        self._sampler.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except (FileNotFoundError, ProcessLookupError):
                return  # the process ended
