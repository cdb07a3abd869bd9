"""The OpenAPI description: valid OpenAPI 3.1, one operation per route with its credential and
every error code the API can answer, served at /openapi.json."""

from __future__ import annotations

from openapi_spec_validator import validate

from catalog_client import SidecarClient
from orchestrator.http.authorization import OPEN
from orchestrator.sidecar.api import ROLES, ROUTES
from orchestrator.sidecar.openapi import ENDPOINTS, openapi_document
from orchestrator.sidecar.refusals import ERRORS
from orchestrator.sidecar.server import api_server
from support.api import ScriptedApi


def test_the_description_is_valid_openapi_3_1() -> None:
    validate(openapi_document("1.2.3"))


def test_every_route_is_described_with_its_credential_and_every_refusal() -> None:
    document = openapi_document("1.2.3")
    operations = 0
    for rule in ROUTES.iter_rules():
        for method in rule.methods or ():
            if method in ("HEAD", "OPTIONS"):
                continue
            operation = document["paths"][rule.rule][method.lower()]
            operations += 1
            assert operation["operationId"] == rule.endpoint
            secured = ROLES.get(str(rule.endpoint), OPEN) != OPEN
            assert ("security" in operation) == secured, rule.rule
            if secured:
                codes = " ".join(r["description"] for r in operation["responses"].values())
                for refusal in ERRORS:
                    assert f"`{refusal.code}`" in codes, (rule.rule, refusal.code)
    assert operations == len(ENDPOINTS) == 12
    enumerated = document["components"]["schemas"]["Error"]["properties"]["error"]["enum"]
    assert enumerated == sorted(r.code for r in ERRORS)
    append = document["paths"]["/append"]["post"]
    assert set(append["requestBody"]["content"]) == {
        "application/x-ndjson", "application/vnd.apache.arrow.stream",
    }  # fmt: skip
    assert "Idempotency-Key" in {p["name"] for p in append["parameters"]}


def test_the_sidecar_serves_it_without_a_credential() -> None:
    server = api_server(ScriptedApi()).start()
    try:
        served = SidecarClient(f"http://{server.address}").openapi()
    finally:
        server.stop()
    assert served["openapi"] == "3.1.0" and "/read" in served["paths"]
