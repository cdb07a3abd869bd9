"""Soaking: many seeded walks in sequence, what a release is run through before it ships.

FoundationDB runs its simulation tens of thousands of times a night; a seed that fails one try
in two is what a handful of fixed seeds cannot show. :func:`soak` runs ``seeds`` walks one after
another on one ZooKeeper (an ensemble, with partitions, by default of the CLI), each from a
clean state: the target heals every cut and starts every stopped server before a walk, and a
walk ends every process it started. A failing seed is shrunk to its shortest failing prefix and
the soak goes on. Every run keeps a directory (``keep_dir``/seed-N-steps-M-…) with its history
as a scenario file, its result and every process's log.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from orchestrator.scenario.simulate.run import simulate, walk_target
from orchestrator.scenario.simulate.values import SimulationConfig, SimulationResult

__all__ = ["SoakReport", "soak", "soak_seeds"]


def soak_seeds(first: int, count: int) -> list[int]:
    """``count`` seeds from ``first`` on, spread so that neighbours share no prefix of their
    walks (a walk's steps are drawn from ``f"{seed}:{index}"``)."""
    return [first + 7919 * n for n in range(count)]


@attrs.frozen
class SoakReport:
    """What a soak ran and found."""

    results: tuple[SimulationResult, ...]
    seconds: float
    flags: str

    @property
    def failures(self) -> list[SimulationResult]:
        return [r for r in self.results if not r.ok]

    @property
    def faults(self) -> collections.Counter[str]:
        total: collections.Counter[str] = collections.Counter()
        for result in self.results:
            total.update(result.faults)
        return total

    @property
    def invariants_checked(self) -> int:
        return sum(_checks(r) for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "seeds": len(self.results),
            "failed": len(self.failures),
            "seconds": round(self.seconds, 1),
            "flags": self.flags,
            "walk_steps": sum(len(r.walk) for r in self.results),
            "scenario_steps": sum(r.scenario_steps for r in self.results),
            "faults": dict(sorted(self.faults.items())),
            "invariants_checked": self.invariants_checked,
            "runs": [
                {
                    "seed": r.seed,
                    "ok": r.ok,
                    "steps": len(r.walk),
                    "scenario_steps": r.scenario_steps,
                    "faults": dict(sorted(r.faults.items())),
                    "invariants_checked": _checks(r),
                    "seconds": round(r.seconds, 1),
                    "error": r.error,
                    "shortest_prefix": r.shortest_prefix,
                    "replay": None if r.ok else replay(r, self.flags),
                    "work_dir": r.work_dir,
                }
                for r in self.results
            ],
        }


def replay(result: SimulationResult, flags: str) -> str:
    """The command that replays ``result``'s shortest failing prefix (or its whole walk)."""
    steps = result.shortest_prefix or len(result.walk) or result.steps_requested
    return f"catalog-upgrade scenario simulate {flags} --seed {result.seed} --steps {steps}"


def _checks(result: SimulationResult) -> int:
    return sum(counts.get("checks", 0) for counts in result.invariants.values())


def soak(
    base: SimulationConfig,
    seeds: Sequence[int],
    *,
    flags: str,
    keep_dir: Path,
    zk: str | None = None,
    on_seed: Callable[[int, SimulationResult], None] | None = None,
) -> SoakReport:
    """Walk each of ``seeds`` with ``base``'s settings, in sequence, on one ZooKeeper."""
    started = time.monotonic()
    results: list[SimulationResult] = []
    with contextlib.ExitStack() as stack:
        target = stack.enter_context(walk_target(base, zk))
        for number, seed in enumerate(seeds, start=1):
            config = attrs.evolve(base, seed=seed, keep_dir=keep_dir)
            result = simulate(config, target=target)
            results.append(result)
            if on_seed is not None:
                on_seed(number, result)
    return SoakReport(tuple(results), time.monotonic() - started, flags)
