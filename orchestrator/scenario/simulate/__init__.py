"""Randomized upgrade simulation: random walks over a release history, with real processes.

``simulate`` is the upgrade matrix explored at random, with faults. Each walk starts from an
empty environment (the oldest release bootstraps it), then takes ``steps`` actions, each chosen
by ``random.Random(f"{seed}:{index}")`` from what the environment looks like:

* ``upgrade``: start 1-3 processes of a random release not older than the catalog, at a new
  deploy generation (sometimes with ``--auto-promote``); every one must reach ready;
* ``promote`` a pending generation (CLI ``promote --wait`` or ``POST /promote``): its leader
  serves, lower generations exit fenced (3), pending generations of older versions exit
  refused (4);
* ``abort`` a pending generation (SIGTERM, exit 0); ``append`` rows through the leader and
  ``read`` them back; start an ``older`` release (exit 4) or a ``stale`` generation (exit 3);
* faults, with probability ``fault_probability``: SIGKILL of a new process while it checks
  read-only, of a follower, of the leader, or of a new leader in the middle of its migration;
  a zombie leader (SIGSTOP until a follower took over, then SIGCONT and a write that must be
  refused); ZooKeeper session expiry of the leader or of a follower; a new leader that loses
  the answer of one of its fenced writes (it landed; ``lose_answer_after_write``). A lost
  leader is replaced by a follower of its generation or, if none is left, by a restart of the same
  release.

Every action is expressed as ordinary scenario steps executed by
:class:`orchestrator.scenario.ScenarioRun`, and :mod:`orchestrator.scenario.invariants` are
checked after every action, plus the cleanup invariant at the end. A failing walk is re-run on
shorter prefixes (bisection, a bounded number of runs) and reported as the shortest failing
prefix: the command that reproduces it and its steps as a scenario file."""

from __future__ import annotations

from orchestrator.scenario.simulate.run import simulate
from orchestrator.scenario.simulate.traced_rows import appendable_collections
from orchestrator.scenario.simulate.values import (
    FAULT_KINDS,
    SimulationConfig,
    SimulationResult,
    WalkStep,
)

__all__ = [
    "FAULT_KINDS",
    "SimulationConfig",
    "SimulationResult",
    "WalkStep",
    "appendable_collections",
    "simulate",
]
