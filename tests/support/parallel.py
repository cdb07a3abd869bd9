"""The suite in parallel (pytest-xdist, ``make test``): the slow tests first, heavy fixtures
kept together.

Most of a test's time is waiting (processes starting, sessions expiring, Spark), so the suite
runs in several workers on two cores (``TEST_WORKERS``, 4 by default). Each worker is a process
of its own: its own ZooKeeper server (session fixture), temporary directories and Spark
session; environments are named uniquely, so no test sees another's state.

* The tests marked ``quiet`` (they assert a time or a rate) are left out (``-m "not quiet"``)
  and run afterwards in two workers (they mostly wait, so each has a core), so that four
  workers never make them measure each other.
* The tests marked ``slow`` are handed out first, so no long test starts last and holds the
  run open while the other workers idle.
* A module whose fixture is costly to build (:data:`WHOLE_MODULES`: a Spark cluster, the fleet
  of environments, a ZooKeeper ensemble, the pacing test's 12M-row shards) runs whole in one
  worker, which builds the fixture once; every other test is a unit of its own. The scheduler
  is xdist's scope scheduler with this rule for a scope (xdist's own ``xdist_group`` rewrites
  node ids, which pytest 9.2 no longer lets it do).
"""

from __future__ import annotations

from typing import Any

import pytest

#: Modules whose tests run in one worker, in order.
WHOLE_MODULES = frozenset(
    {
        "tests/integration/test_spark_cluster.py",
        "tests/integration/test_fleet.py",
        "tests/integration/test_pacing.py",
        "tests/integration/test_ensemble.py",
    }
)


#: Tests that check together what other tests of theirs recorded in a module fixture, by the
#: start of their node ids: each group runs in one worker, in order (so the simulation's fault
#: coverage sees every seed's faults instead of skipping).
TOGETHER = {
    "tests/integration/test_scenarios.py::test_simulation_seed": "simulation seeds",
    "tests/integration/test_scenarios.py::test_simulation_with_partitions": "simulation seeds",
    "tests/integration/test_scenarios.py::test_simulation_covers_every_fault": "simulation seeds",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not (getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput")):
        return  # one process: the collection order keeps each module's fixtures together
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module for :data:`WHOLE_MODULES`, its group for
    :data:`TOGETHER`, else itself."""
    module = nodeid.split("::", 1)[0]
    if module in WHOLE_MODULES:
        return module
    for start, group in TOGETHER.items():
        if nodeid.startswith(start):
            return group
    return nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return Scheduling(config, log)
