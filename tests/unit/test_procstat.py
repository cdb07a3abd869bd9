"""The machine's and a process's CPU time, read from ``/proc`` as the benchmarks read them."""

from __future__ import annotations

import os
import time

from orchestrator.testing.procstat import busy_seconds, cpu_seconds


def spin(seconds: float) -> None:
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


def test_the_machine_counts_a_busy_process_and_not_a_sleeping_one() -> None:
    """Half a second of CPU in this process is at least most of half a second of the machine's
    busy time (other processes may add theirs), and it is this process's CPU time too."""
    busy, mine = busy_seconds(), cpu_seconds(os.getpid())
    spin(0.5)
    assert busy_seconds() - busy >= 0.4
    assert 0.4 <= cpu_seconds(os.getpid()) - mine <= 1.0
    mine = cpu_seconds(os.getpid())
    time.sleep(0.3)
    assert cpu_seconds(os.getpid()) - mine < 0.1
