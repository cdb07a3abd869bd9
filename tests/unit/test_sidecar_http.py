"""The sidecar's HTTP layer and metrics, served over a real socket from a scripted API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from catalog.errors import BadInputError
from catalog_client import Answer, SidecarClient
from orchestrator.dataplane.serving import NotLeaderError
from orchestrator.http.server import parse_address
from orchestrator.machine.metrics import SidecarMetrics
from orchestrator.sidecar.server import api_server
from support.api import ScriptedApi


@pytest.fixture
def served() -> Iterator[tuple[ScriptedApi, str]]:
    api = ScriptedApi()
    server = api_server(api).start()
    yield api, f"http://{server.address}"
    server.stop()


def send(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    parts = urlsplit(url)
    client = SidecarClient(f"http://{parts.netloc}", timeout=5, keep_alive=False)
    answer = client.send(
        "POST" if data is not None else "GET",
        parts.path + (f"?{parts.query}" if parts.query else ""),
        data,
        headers=headers,
    )
    assert answer.status, answer.error
    return answer


def call(url: str, data: bytes | None = None) -> tuple[int, bytes]:
    answer = send(url, data)
    return answer.status, answer.body


def test_readyz_follows_state_and_verbose_lists_checks(served: tuple[ScriptedApi, str]) -> None:
    """/readyz is 503 until ready, 200 after; ?verbose names each check and its outcome."""
    api, base = served
    assert call(f"{base}/healthz")[0] == 200
    status, body = call(f"{base}/readyz?verbose")
    assert status == 503
    assert b"[+]zookeeper ok" in body and b"[-]state failed" in body
    api.ready = True
    assert call(f"{base}/readyz")[0] == 200


def test_promote_takes_query_or_body_and_maps_errors(served: tuple[ScriptedApi, str]) -> None:
    """POST /promote reads deploy_generation from the query or JSON body; fenced answers 409."""
    api, base = served
    assert call(f"{base}/promote?deploy_generation=3", b"")[0] == 200
    assert call(f"{base}/promote", json.dumps({"deploy_generation": 4}).encode())[0] == 200
    assert call(f"{base}/promote", b"")[0] == 200
    status, body = call(f"{base}/promote?deploy_generation=0", b"")
    assert status == 409
    assert json.loads(body)["error"] == "fenced" and "exit_code" not in json.loads(body)
    assert call(f"{base}/promote?deploy_generation=x", b"")[0] == 400
    assert api.promoted == [3, 4, None, 0]
    # Audited: who asked (no credential configured: anonymous) and from where.
    assert api.requested_by[0] == "http:anonymous@127.0.0.1"


def test_finalize_answers_202_when_decided_and_200_when_final(
    served: tuple[ScriptedApi, str],
) -> None:
    """POST /finalize passes the expected version and the audited caller through."""
    api, base = served
    assert call(f"{base}/finalize?version=0.11.0", b"")[0] == 202
    assert call(f"{base}/finalize?version=final", b"")[0] == 200
    assert call(f"{base}/finalize")[0] == 405  # a GET
    assert api.finalized == [
        ("0.11.0", "http:anonymous@127.0.0.1"),
        ("final", "http:anonymous@127.0.0.1"),
    ]


def test_append_and_read_round_trip(served: tuple[ScriptedApi, str]) -> None:
    """/append passes the collection and body through; /read answers JSON lines."""
    api, base = served
    status, body = call(f"{base}/append?collection=s.t", b'{"id": 1}\n{"id": 2}\n')
    assert status == 200 and json.loads(body)["rows"] == 2
    assert api.appended == [("s.t", b'{"id": 1}\n{"id": 2}\n')]
    status, body = call(f"{base}/read?collection=s.t&as_of=7")
    assert status == 200
    assert [json.loads(line)["as_of"] for line in body.splitlines()] == [7, 7]
    for empty in ("read?collection=s.t&as_of=", "promote?deploy_generation="):
        # An empty integer is refused, not read as absent (found by the fuzzer).
        refused = send(f"{base}/{empty}", b"{}" if empty.startswith("promote") else None)
        assert refused.status == 400 and refused.json()["error"] == "bad-parameter", empty
        assert "must be an integer, not ''" in refused.json()["message"]
    assert api.promoted == []
    assert call(f"{base}/append", b"{}")[0] == 400
    api.append_error = NotLeaderError("not the leader", state="ready")
    status, body = call(f"{base}/append?collection=s.t", b"{}")
    assert status == 409
    assert json.loads(body) == {"error": "read-only", "message": "not the leader", "state": "ready"}
    api.append_error = BadInputError("bad row", line=1)
    status, body = call(f"{base}/append?collection=s.t", b"{}")
    assert status == 400 and json.loads(body)["line"] == 1


def test_append_passes_the_idempotency_key_and_marks_a_replay(
    served: tuple[ScriptedApi, str],
) -> None:
    """The Idempotency-Key header reaches the data plane; a replayed answer says so in a header."""
    api, base = served
    for key in ("fresh", "seen"):
        answer = send(
            f"{base}/append?collection=s.t",
            b'{"id": 1}\n',
            {"Idempotency-Key": key, "Content-Type": "application/json"},
        )
        assert answer.status == 200 and answer.json()["replayed"] is (key == "seen")
        assert answer.headers.get("idempotent-replayed") == ("true" if key == "seen" else None)
    assert api.keys == ["fresh", "seen"]


def test_unknown_paths_and_wrong_methods(served: tuple[ScriptedApi, str]) -> None:
    """Unknown paths answer 404 and known paths with the wrong verb 405."""
    _, base = served
    assert call(f"{base}/nope")[0] == 404
    assert call(f"{base}/append?collection=s.t")[0] == 405
    assert call(f"{base}/status", b"")[0] == 405


def test_metrics_exposition(served: tuple[ScriptedApi, str]) -> None:
    """/metrics serves the process registry: state, ZooKeeper latency and CAS retries."""
    api, base = served
    api.metrics_.set_state("ready")
    api.metrics_.observe_zookeeper("get", 0.002)
    api.metrics_.count_cas_retry(ValueError("lost"))
    status, body = call(f"{base}/metrics")
    text = body.decode()
    assert status == 200
    assert 'catalog_upgrade_state{state="ready"} 1.0' in text
    assert 'catalog_upgrade_state{state="checking"} 0.0' in text
    assert 'catalog_upgrade_zookeeper_request_seconds_count{kind="get"} 1.0' in text
    assert 'catalog_upgrade_cas_retries_total{error="ValueError"} 1.0' in text


def test_metrics_registries_are_per_process() -> None:
    """Two SidecarMetrics never share a registry (no global Prometheus state)."""
    first, second = SidecarMetrics(), SidecarMetrics()
    first.set_epoch(5)
    assert b"catalog_upgrade_epoch 5.0" in first.render()
    assert b"catalog_upgrade_epoch 0.0" in second.render()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:8080", ("localhost", 8080)),
        ("[::1]:9000", ("::1", 9000)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    """--http HOST:PORT parses, including bracketed IPv6 hosts."""
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:", ":80", "host:99999", "host:x"])
def test_parse_address_refuses_malformed(text: str) -> None:
    """A malformed --http address is bad input (exit 2)."""
    with pytest.raises(BadInputError):
        parse_address(text)


def test_every_writing_endpoint_is_named_where_the_write_token_is_explained() -> None:
    """The write token's help and the operator's table name every POST route the server has."""
    from click.testing import CliRunner

    from orchestrator.cli import main
    from orchestrator.sidecar.api import ROUTES

    posts = sorted(r.rule for r in ROUTES.iter_rules() if "POST" in (r.methods or ()))
    assert posts, "no POST route found"
    helped = " ".join(CliRunner().invoke(main, ["sidecar", "--help"]).output.split())
    table = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text()
    row = next(line for line in table.splitlines() if line.endswith("| the write token |"))
    for path in posts:
        assert f"POST {path}" in helped, f"--http-token-file --help misses POST {path}"
        assert f"`POST {path}`" in row, f"operating.md's token table misses POST {path}"
