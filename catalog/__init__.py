"""The durable model: values, stores and rules, with no processes, elections or module state.

Everything `orchestrator` runs reads and writes through it; it imports nothing of the
orchestrator (docs/design.md, section 3).
"""
