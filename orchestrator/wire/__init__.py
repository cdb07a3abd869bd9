"""Rows on the wire: the data plane's bodies, both ways, below any server that carries them.

===============  ======================================================================
``ipc``          Arrow IPC streams: an append's body checked against the write schema,
                 a read's answer batch by batch; the most rows one append may carry
``ndjson``       JSON lines: an append's body, strictly typed; a read's answer
``jsonvalues``   JSON values as strict as the schema (no NaN, no float for an integer)
===============  ======================================================================

The sidecar's appends and reads (:mod:`orchestrator.sidecar`) and the data commands
(``catalog-upgrade data``) read and write rows through it; it imports nothing of either.
"""
