"""The scenario file format: TOML, validated completely before anything runs.

A scenario names the release history it uses and lists steps (``docs/scenarios.md`` documents
every action and field)::

    name = "blue-green happy path"
    releases = "releases"            # directory of release files, relative to this file

    [defaults]
    session_timeout = 2              # --session-timeout of every started process
    timeout = 30                     # default timeout of every waiting step

    [[step]]
    action = "start"
    process = "old"
    release = "0.10.0"
    generation = 1

Validation is strict and total: an unknown action, an unknown or misplaced field, a value of the
wrong type, a process used before it is started, a release the directory does not have -- every
problem of the file is collected and reported in one :class:`~catalog.errors.BadInputError`
(exit 2) naming the file, the step number and its line. Nothing here touches ZooKeeper or starts a
process; :mod:`orchestrator.scenario` runs what this module accepted."""

from __future__ import annotations

from orchestrator.scenario.format.parse import load_scenario, parse_scenario
from orchestrator.scenario.format.paths import PathPart, is_missing, parse_path, resolve_path
from orchestrator.scenario.format.releases import ReleaseIndex
from orchestrator.scenario.format.steps import STEP_KINDS, Step
from orchestrator.scenario.format.values import (
    WAIT_STATES,
    Defaults,
    Problem,
    Scenario,
    WorkloadSpec,
)

__all__ = [
    "STEP_KINDS",
    "WAIT_STATES",
    "Defaults",
    "PathPart",
    "Problem",
    "ReleaseIndex",
    "Scenario",
    "Step",
    "WorkloadSpec",
    "is_missing",
    "load_scenario",
    "parse_path",
    "parse_scenario",
    "resolve_path",
]
