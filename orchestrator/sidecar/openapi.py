"""The OpenAPI 3.1 description of the sidecar's HTTP API, made from the API itself.

The paths and methods come from the routing (``http.ROUTES``), the credential of each from the
access roles (``api.ROLES``), and the error codes from the API's one table of them
(:mod:`orchestrator.sidecar.refusals`). What only prose
can say (a summary, the parameters and bodies of each operation) is written once here, per
endpoint, and a test checks that every route has it. The sidecar serves the document at
``GET /openapi.json``; the manual's API page is written from the same routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

from catalog_client.media import ARROW_STREAM_TYPE, JSON_LINES_TYPE, JSON_TYPE
from orchestrator.dataplane.idempotency import IDEMPOTENCY_HEADER
from orchestrator.http.authorization import OPEN
from orchestrator.http.refusals import HTTP
from orchestrator.sidecar.api import POST_TYPES, REPLAYED_HEADER, ROLES, ROUTES
from orchestrator.sidecar.refusals import ERRORS

__all__ = ["ENDPOINTS", "openapi_document"]

_COLLECTION = {
    "name": "collection",
    "in": "query",
    "required": True,
    "description": "The builtin collection, SCHEMA.NAME.",
    "schema": {"type": "string", "pattern": r"^[^.]+\..+$"},
    "example": "mz_catalog.mz_tables",
}
_AS_OF = {
    "name": "as_of",
    "in": "query",
    "required": False,
    "description": "The time to read at (default: the upper - 1).",
    "schema": {"type": "integer", "minimum": 0},
}
_KEY = {
    "name": IDEMPOTENCY_HEADER,
    "in": "header",
    "required": False,
    "description": "Makes a retry with the same body answer the first answer and write nothing.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}
_BINARY = {"type": "string", "contentMediaType": ARROW_STREAM_TYPE}
_TEXT = {"type": "string"}
#: Rows as JSON lines, in the forms reads write and appends read (docs/http-api.md).
_ROWS = {
    "type": "string",
    "description": "One JSON object per row and line, of the collection's fields as "
    "GET /collections lists them: times and dates in ISO 8601 (an append "
    "may also send a timestamp as an integer in its unit), durations in seconds, binary in "
    "base64, decimals as strings, structs and maps as objects, lists as arrays.",
}
_OBJECT = {"type": "object"}

#: Per endpoint: summary, parameters, request body media, and the 2xx answers.
ENDPOINTS: Final[Mapping[str, Mapping[str, Any]]] = {
    "page": {"summary": "The live status page", "ok": {"text/html": _TEXT}},
    "history": {
        "summary": "The upgrade history, oldest first", "ok": {JSON_TYPE: {"type": "array"}}
    },
    "healthz": {"summary": "200 while the process runs", "ok": {"text/plain": _TEXT}},
    "openapi": {"summary": "This description", "ok": {JSON_TYPE: _OBJECT}},
    "readyz": {
        "summary": "200 only when ready or serving (503 otherwise)",
        "parameters": [{"name": "verbose", "in": "query", "required": False,
                        "schema": {"type": "string"}}],
        "ok": {"text/plain": _TEXT},
        "also": {503: {"text/plain": _TEXT}},
    },
    "status": {
        "summary": "The status --json document",
        "parameters": [{"name": "coverage", "in": "query", "required": False,
                        "schema": {"type": "string"}}],
        "ok": {JSON_TYPE: _OBJECT},
    },
    "collections": {
        "summary": "The collections this release serves, each with its schema: the fields an "
        "append sends and a read gives, their types and nullability",
        "ok": {JSON_TYPE: {"$ref": "#/components/schemas/Collections"}},
    },
    "metrics": {"summary": "Prometheus metrics", "ok": {"text/plain": _TEXT}},
    "read": {
        "summary": "A collection's rows as this release reads them, with _ts and _diff",
        "parameters": [_COLLECTION, _AS_OF],
        "ok": {JSON_LINES_TYPE: _ROWS, ARROW_STREAM_TYPE: _BINARY},
    },
    "promote": {
        "summary": "Promote a deploy generation (default: the process's own)",
        "parameters": [{"name": "deploy_generation", "in": "query", "required": False,
                        "schema": {"type": "integer", "minimum": 1}}],
        "body": {JSON_TYPE: {"type": "object",
                             "properties": {"deploy_generation": {"type": "integer"}}}},
        "ok": {JSON_TYPE: _OBJECT},
    },
    "finalize": {
        "summary": "Make the pending upgrade final (202 decided, 200 final already)",
        "parameters": [{"name": "version", "in": "query", "required": False,
                        "schema": {"type": "string"}}],
        "body": {JSON_TYPE: _OBJECT},
        "ok": {JSON_TYPE: _OBJECT},
        "also": {202: {JSON_TYPE: _OBJECT}},
    },
    "append": {
        "summary": "Append rows exactly once (the leader only)",
        "parameters": [_COLLECTION, _KEY],
        "body": {JSON_LINES_TYPE: _ROWS, ARROW_STREAM_TYPE: _BINARY},
        "ok": {JSON_TYPE: {"$ref": "#/components/schemas/AppendAnswer"}},
        "headers": {REPLAYED_HEADER: {"schema": {"type": "string", "enum": ["true"]}}},
        # What a client does next (and a stateful fuzzer follows): read what it appended, at
        # the time it landed.
        "links": {
            "ReadAppended": {
                "operationId": "read",
                "parameters": {
                    "collection": "$response.body#/collection",
                    "as_of": "$response.body#/ts",
                },
                "description": "The collection as of the append's time holds its rows.",
            },
            "ReadLatest": {
                "operationId": "read",
                "parameters": {"collection": "$response.body#/collection"},
            },
        },
    },
}  # fmt: skip


def openapi_document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API of catalog-upgrade ``version``."""
    paths: dict[str, dict[str, Any]] = {}
    for rule in ROUTES.iter_rules():
        endpoint = str(rule.endpoint)
        for method in sorted(m for m in rule.methods or () if m not in ("HEAD", "OPTIONS")):
            paths.setdefault(rule.rule, {})[method.lower()] = _operation(endpoint, method)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "catalog-upgrade sidecar",
            "version": version,
            "description": "The HTTP API every catalog-upgrade sidecar serves.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "message"],
                    "properties": {
                        "error": {"type": "string", "enum": sorted(r.code for r in ERRORS)},
                        "message": {"type": "string"},
                    },
                    "additionalProperties": True,
                },
                "AppendAnswer": {
                    "type": "object",
                    "required": ["collection", "shard_id", "rows", "ts", "upper", "replayed"],
                    "properties": {
                        "collection": {"type": "string"},
                        "shard_id": {"type": "string"},
                        "rows": {"type": "integer"},
                        "ts": {"type": "integer"},
                        "upper": {"type": "integer"},
                        "replayed": {"type": "boolean"},
                    },
                },
                "Field": {
                    "type": "object",
                    "required": ["name", "nullable", "type"],
                    "description": "One field: its name, whether it takes null, and its Arrow "
                    "type (``type`` names it; units, time zones, precision and scale, and the "
                    "fields or element of a nested type, beside it)",
                    "properties": {
                        "name": {"type": "string"},
                        "nullable": {"type": "boolean"},
                        "type": {"type": "object", "required": ["type"]},
                    },
                },
                "Collections": {
                    "type": "object",
                    "required": ["version", "collections"],
                    "description": "What ``POST /append`` takes and ``GET /read`` gives, per "
                    "collection of this release",
                    "properties": {
                        "version": {"type": "string"},
                        "collections": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name", "global_id", "kind", "fingerprint",
                                             "fields"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "global_id": {"type": "string"},
                                    "kind": {"type": "string"},
                                    "fingerprint": {"type": "string"},
                                    "fields": {
                                        "type": "array",
                                        "items": {"$ref": "#/components/schemas/Field"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    }


def _operation(endpoint: str, method: str) -> dict[str, Any]:
    spec = ENDPOINTS[endpoint]
    role = ROLES.get(endpoint, OPEN)
    ok_status = "200"
    responses: dict[str, Any] = {
        ok_status: {
            "description": "OK",
            "content": {media: {"schema": schema} for media, schema in spec["ok"].items()},
            **({"headers": spec["headers"]} if "headers" in spec else {}),
            **({"links": spec["links"]} if "links" in spec else {}),
        }
    }
    for status, content in spec.get("also", {}).items():
        responses[str(status)] = {
            "description": HTTPStatus(status).phrase,
            "content": {media: {"schema": schema} for media, schema in content.items()},
        }
    for status, codes in sorted(_errors(role).items()):
        responses.setdefault(
            str(status),
            {
                "description": f"{HTTPStatus(status).phrase}: error "
                + ", ".join(f"`{c}`" for c in sorted(codes)),
                "content": {JSON_TYPE: {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        )
    operation: dict[str, Any] = {
        "operationId": endpoint,
        "summary": spec["summary"],
        "parameters": list(spec.get("parameters", [])),
        "responses": responses,
    }
    if role != OPEN:
        operation["security"] = [{"bearer": []}]
        operation["description"] = f"Needs the {role} token when the sidecar has one."
    if "body" in spec:
        media = {m: {"schema": s} for m, s in spec["body"].items() if m in POST_TYPES}
        # Every POST carries its Content-Type (415 otherwise: a guard against cross-site
        # requests), so its body is required, if only as {}.
        operation["requestBody"] = {"required": True, "content": media}
    return operation


def _errors(role: str) -> dict[int, set[str]]:
    """The error codes an operation may answer, by status: the HTTP layer's for every one, the
    application's too for those behind a credential."""
    found: dict[int, set[str]] = {}
    for refusal in ERRORS:
        if refusal.layer == HTTP or role != OPEN:
            found.setdefault(int(refusal.status), set()).add(refusal.code)
    return found
