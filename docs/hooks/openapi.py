"""The API reference page, rendered from the sidecar's own OpenAPI description,
and the HTTP API page's table of errors, rendered from the API's one table of them.

The reference page's marker holds one section per operation (its
credential, parameters, body types and every answer with its ``error`` codes), made from
``orchestrator.sidecar.openapi.openapi_document``: the same document the sidecar serves at
``/openapi.json``, so the reference cannot drift from the routing or the error table. The
errors' marker holds one row per code of ``orchestrator.sidecar.refusals.ERRORS``.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.sidecar.openapi import openapi_document
from orchestrator.sidecar.refusals import ERRORS


def api_reference() -> str:
    """This release's API, operation by operation, then its bodies."""
    return reference(openapi_document("(this release)"))


def error_table() -> str:
    """Every ``error`` code of the API, by status: when it is sent."""
    rows = ["| status | `error` | when |", "| --- | --- | --- |"]
    for refusal in sorted(ERRORS, key=lambda r: (r.status, r.code)):
        rows.append(f"| {int(refusal.status)} | `{refusal.code}` | {refusal.when} |")
    return "\n".join(rows)


def reference(document: dict[str, Any]) -> str:
    sections = []
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            sections.append(_operation(method.upper(), path, operation))
    schemas = document["components"]["schemas"]
    bodies = "\n\n".join(
        f"### `{name}`\n\n```json\n{json.dumps(schema, indent=2)}\n```"
        for name, schema in schemas.items()
    )
    return "\n\n".join(sections) + "\n\n## Bodies\n\n" + bodies + "\n"


def _operation(method: str, path: str, operation: dict[str, Any]) -> str:
    credential = "a bearer token" if operation.get("security") else "none"
    lines = [
        f"## `{method} {path}`",
        "",
        f"{operation['summary']}. Credential: {credential}."
        + (f" {operation['description']}" if operation.get("description") else ""),
    ]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["", "| parameter | in | required | meaning |", "| --- | --- | --- | --- |"]
        lines += [
            f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
            f"{p.get('description', '')} |"
            for p in parameters
        ]
    body = operation.get("requestBody")
    if body:
        types = ", ".join(f"`{t}`" for t in body["content"])
        lines += ["", f"Body ({'required' if body.get('required') else 'optional'}): {types}."]
    lines += ["", "| status | answer |", "| --- | --- |"]
    for status, answer in operation["responses"].items():
        lines.append(f"| {status} | {answer['description']} |")
    return "\n".join(lines)
