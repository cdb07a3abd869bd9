"""Under CI, a test that would skip because a part it needs is missing fails instead.

``.ci/run`` installs Chromium, nftables, iproute2 and Prometheus. A test skips where one is
missing (a developer's machine); with ``CI=true`` that skip becomes a failure naming the part,
so a run never passes on less than it claims.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

#: Skip reasons that name a part CI must have.
REQUIRED_IN_CI = re.compile(
    r"chromium|network namespaces|prometheus|promtool|\bnft\b|nftables|iproute2|tmpfs|faketime",
    re.IGNORECASE,
)


def skip_is_a_failure(reason: str, environment: dict[str, str] | None = None) -> bool:
    """Whether a skip for ``reason`` fails the run: under ``CI=true`` when it names a part CI
    installs."""
    env = os.environ if environment is None else environment
    return env.get("CI", "").lower() == "true" and REQUIRED_IN_CI.search(reason) is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if skip_is_a_failure(reason):
            report.outcome = "failed"
            report.longrepr = f"CI=true and a part this test needs is missing: {reason}"
