"""A scenario run with the actions that execute its steps.

:class:`~orchestrator.scenario.runner.ScenarioRun` holds the state of a run; the actions on
processes (:mod:`orchestrator.scenario.actions`) and on ZooKeeper and the network
(:mod:`orchestrator.scenario.faults`) act on it. They depend on the run, never the reverse:
this module joins them.
"""

from __future__ import annotations

from typing import Any

from orchestrator.scenario.actions import ProcessActions
from orchestrator.scenario.faults import FaultActions
from orchestrator.scenario.runner import ScenarioRun

__all__ = ["acting_run"]


def acting_run(**fields: Any) -> ScenarioRun:
    """A :class:`ScenarioRun` of ``fields`` that executes every step kind."""
    run = ScenarioRun(**fields)
    return run.use(ProcessActions(run), FaultActions(run))
