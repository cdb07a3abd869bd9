"""The scenario runner: real sidecar processes, a real ZooKeeper, real faults.

``run_files`` validates every scenario file first (``orchestrator.scenario.format``; nothing
runs if one is invalid), then runs each in a fresh environment: its own environment name under
the ZooKeeper root, its own blob directory and log directory in a temporary directory. Each step
is executed by :class:`ScenarioRun`, which :mod:`orchestrator.scenario.simulate` drives as well.

How steps wait (never a fixed sleep, except the ``sleep`` action itself):

* ``wait``: a ZooKeeper watch on the process node ``processes/<id>``, re-armed on every change,
  plus the child's exit status; ``ready``/``serving`` are confirmed by ``/readyz`` answering 200;
* ``expire``: the process is stopped (SIGSTOP) until the server deletes its ephemeral process
  node -- which happens exactly when the server expires its session -- then continued (SIGCONT).
  That is a real session expiry; the process learns about it when it next talks to ZooKeeper;
* ``expect_status`` with a ``timeout``: re-read on watches of the catalog, epoch, promotion
  target, process and finalization directories.

A scenario passes only if every step held and no process exited without a step expecting it
(``stop``, ``kill``, ``expect_exit``). Whatever happens, every child is killed at the end."""

from __future__ import annotations

from orchestrator.scenario.files import load_all, run_files, run_scenario
from orchestrator.scenario.multisets import compare, row_multiset
from orchestrator.scenario.results import (
    FAULT_ACTIONS,
    AppendRecord,
    ScenarioResult,
    StepFailed,
    StepResult,
)
from orchestrator.scenario.runner import ScenarioRun
from orchestrator.scenario.target import ZooKeeperTarget

__all__ = [
    "FAULT_ACTIONS",
    "AppendRecord",
    "ScenarioResult",
    "ScenarioRun",
    "StepFailed",
    "StepResult",
    "ZooKeeperTarget",
    "compare",
    "load_all",
    "row_multiset",
    "run_files",
    "run_scenario",
]
