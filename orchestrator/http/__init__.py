"""The product's HTTP server, below every API it serves: the listening socket, connections read
under deadlines (h11), the limits one client may hold, TLS, bearer tokens, who may ask what,
and the refusals the server makes itself.

It knows no endpoint: an API hands it a WSGI application (the sidecar's, ``status --serve``'s,
``fleet --serve``'s: :mod:`orchestrator.sidecar.api`) with the role each of its endpoints
needs. It imports nothing of the sidecar (an import-linter contract says so).

===================  ====================================================================
``server``           the listener, the event loop of connections, the worker threads
``exchange``         one connection's requests, in turn, under deadlines; the limits
``refusals``         the server's own ``error`` codes and their statuses; HttpError
``authorization``    who may ask what: tokens by role, the hosts answered
``tokens``           bearer tokens in files, read again when they change
``tls``              HTTPS from a certificate and a key
===================  ====================================================================
"""
