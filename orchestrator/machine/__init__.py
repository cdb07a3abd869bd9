"""A sidecar's state machine and what it holds.

The machine (:mod:`~orchestrator.machine.machine`) runs on the process's main thread: check,
wait for promotion, take over, migrate, serve, finalize. Its collaborators are here beside it:
the configuration, the states and inbox messages, the ZooKeeper connection and process node,
the progress it publishes, its health, metrics and journal, the leader's maintenance, the
cut-over's timeline, the blob store's health and the readiness they make up.

It knows nothing of HTTP or of the data plane (``orchestrator.dataplane``), which read its
state; the sidecar (``orchestrator.sidecar``) composes the three.
"""
