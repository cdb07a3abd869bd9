"""Rendering for people: rich tables and JSON documents of plans, status and scenario runs.

Models live elsewhere (:mod:`catalog.release`, :mod:`orchestrator.status`,
:mod:`orchestrator.scenario`); these modules only turn them into text.
"""
