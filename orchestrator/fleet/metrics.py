"""The fleet's metrics, computed from a report at scrape time (``fleet --serve``'s ``/metrics``).

=================================================  ========================================
``catalog_upgrade_fleet_environments{state}``       environments in each state (every state,
                                                    0 included: rules.STATES)
``catalog_upgrade_fleet_environments_by_version``   environments by catalog version
``catalog_upgrade_fleet_versions_live``             distinct catalog versions in the fleet
``catalog_upgrade_fleet_stuck``                     environments stuck (rules)
``catalog_upgrade_fleet_finalization_overdue``      pending upgrades past the overdue threshold
``catalog_upgrade_fleet_oldest_pending_finalization_seconds``  the oldest pending upgrade's age
``catalog_upgrade_fleet_oldest_unpromoted_seconds`` the longest a green generation has waited
``catalog_upgrade_fleet_ensemble_up{ensemble}``     1 when the ensemble answered the survey
``catalog_upgrade_fleet_survey_seconds{ensemble}``  how long its survey took
=================================================  ========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orchestrator.fleet.report import FleetReport
from orchestrator.fleet.rules import STATES

PREFIX = "catalog_upgrade_fleet_"


class FleetCollector(Collector):
    """Gauges of the report ``current()`` gives at each scrape."""

    def __init__(self, current: Callable[[], FleetReport]) -> None:
        self._current = current

    def collect(self) -> Iterator[Metric]:
        report = self._current()
        states = GaugeMetricFamily(
            PREFIX + "environments", "Environments in each state.", labels=["state"]
        )
        counted = report.by_state()
        for state in STATES:
            states.add_metric([state], counted.get(state, 0))
        yield states
        versions = GaugeMetricFamily(
            PREFIX + "environments_by_version",
            "Environments by the version of their catalog.",
            labels=["version"],
        )
        by_version = report.by_version()
        for version, count in by_version.items():
            versions.add_metric([version], count)
        yield versions
        summary = report.summary()
        live = [v for v in by_version if v != "-"]
        yield GaugeMetricFamily(
            PREFIX + "versions_live", "Distinct catalog versions in the fleet.", value=len(live)
        )
        yield GaugeMetricFamily(PREFIX + "stuck", "Environments stuck.", value=summary["stuck"])
        yield GaugeMetricFamily(
            PREFIX + "finalization_overdue",
            "Environments whose pending upgrade is overdue for finalization.",
            value=summary["finalization_overdue"],
        )
        yield GaugeMetricFamily(
            PREFIX + "oldest_pending_finalization_seconds",
            "Age of the oldest pending upgrade (0: none pending).",
            value=summary["oldest_pending_seconds"] or 0.0,
        )
        yield GaugeMetricFamily(
            PREFIX + "oldest_unpromoted_seconds",
            "The longest a green generation has waited unpromoted (0: none waits).",
            value=summary["oldest_unpromoted_seconds"] or 0.0,
        )
        up = GaugeMetricFamily(
            PREFIX + "ensemble_up", "1 when the ensemble answered.", labels=["ensemble"]
        )
        took = GaugeMetricFamily(
            PREFIX + "survey_seconds", "Seconds the ensemble's survey took.", labels=["ensemble"]
        )
        for survey in report.surveys:
            up.add_metric([survey.ensemble.name], 0 if survey.error else 1)
            took.add_metric([survey.ensemble.name], survey.seconds)
        yield up
        yield took


def metrics_text(current: Callable[[], FleetReport]) -> Callable[[], bytes]:
    """A function giving the exposition text of the report ``current()`` gives."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(current))
    return lambda: bytes(generate_latest(registry))
