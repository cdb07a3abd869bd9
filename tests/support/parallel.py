"""The suite in parallel (pytest-xdist, ``make test``): the slow tests first, heavy fixtures
kept together.

Most of a test's time is waiting (processes starting, sessions expiring, Spark), so the suite
runs in several workers on two cores (``TEST_WORKERS``, 4 by default). Each worker is a process
of its own: its own ZooKeeper server (session fixture), temporary directories and Spark
session; environments are named uniquely, so no test sees another's state.

* Under xdist the tests marked ``slow`` are handed out first, so no long test starts last and
  holds the run open while the other workers idle.
* A module whose fixture is costly to build (a Spark cluster, the fleet of environments, a
  ZooKeeper ensemble, the pacing test's 12M-row shards) marks itself
  ``pytest.mark.xdist_group(NAME)``: with ``--dist loadgroup`` its tests run in one worker,
  which builds the fixture once.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "numprocesses", None):
        return  # one process: the collection order keeps each module's fixtures together
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
