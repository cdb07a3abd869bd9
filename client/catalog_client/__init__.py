"""The typed Python client of the catalog-upgrade sidecar's HTTP API, installable on its own
(``catalog-upgrade-client``: pyarrow and the standard library, nothing of the server).

    from catalog_client import SidecarClient
    client = SidecarClient("http://127.0.0.1:8081", token_file="/etc/catalog-upgrade/token")
    client.append("mz_catalog.mz_tables", [{"id": "u1", ...}])

* :mod:`~catalog_client.client`: the client, its answers and its errors;
* :mod:`~catalog_client.media`: the API's media types;
* :mod:`~catalog_client.requestids`: the id each call sends, as the sidecar logs it;
* :mod:`~catalog_client.schemas`: a collection's Arrow schema, from ``GET /collections``;
* :mod:`~catalog_client.jsonforms`: the JSON form of a value, as both ends write it.
"""

from __future__ import annotations

from catalog_client.client import (
    Answer,
    AppendAnswer,
    Headers,
    SidecarClient,
    SidecarError,
    SidecarUnavailableError,
    retry_after_seconds,
)

__all__ = [
    "Answer",
    "AppendAnswer",
    "Headers",
    "SidecarClient",
    "SidecarError",
    "SidecarUnavailableError",
    "retry_after_seconds",
]
