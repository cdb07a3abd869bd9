"""The fleet: every environment on one or more ZooKeeper ensembles, at a glance.

``catalog-upgrade fleet`` reads them all (orchestrator.fleet.read, pipelined), judges each
(orchestrator.fleet.rules: state, stuck, overdue), and shows the report
(orchestrator.fleet.report) as a table, JSON, a page and metrics (orchestrator.fleet.server);
``fleet finalize`` finalizes many environments at once (orchestrator.fleet.finalize).
"""
