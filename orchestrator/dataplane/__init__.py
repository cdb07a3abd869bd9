"""A sidecar's data plane: what it serves, its reads and its appends, called from HTTP threads.

:mod:`~orchestrator.dataplane.plane` is the entry (readiness, status, promote, append, read).
Reads go to the reader (:mod:`~orchestrator.dataplane.reader`), appends to the writer
(:mod:`~orchestrator.dataplane.writer`: group commit, write identity, the write path's merges),
both through what the process serves (:mod:`~orchestrator.dataplane.serving`). Each refusal it
makes is defined beside its raiser, with its code; :mod:`orchestrator.sidecar.refusals` gives
each its HTTP status.

It reads the machine's state (``orchestrator.machine``) and never changes it: a promotion goes
to the main thread through the inbox.
"""
