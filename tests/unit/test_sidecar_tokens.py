"""Bearer tokens on the sidecar's writing endpoints (the real werkzeug server, a scripted API)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from catalog.errors import EXIT_BAD_INPUT, ConfigurationError
from catalog_client import SidecarClient
from orchestrator.http.authorization import AccessPolicy
from orchestrator.http.tokens import BearerToken, TokenFile, check_exposure
from orchestrator.sidecar.api import PROBES, ROLES
from orchestrator.sidecar.server import api_server
from support.api import ScriptedApi

TOKEN = "s3cret-token-0123456789"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ScriptedApi, str]]:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    api = ScriptedApi()
    policy = AccessPolicy.of(
        write=TokenFile(path), read=None, roles=ROLES, probes=PROBES, listen_host="127.0.0.1"
    )
    server = api_server(api, policy=policy).start()
    yield api, f"http://{server.address}"
    server.stop()


def call(url: str, data: bytes | None = None, token: str | None = None) -> tuple[int, dict]:
    """(status, headers by their lower-case name, and the refusal's ``error``)."""
    parts = urlsplit(url)
    client = SidecarClient(f"http://{parts.netloc}", token=token, timeout=5, keep_alive=False)
    answer = client.send(
        "POST" if data is not None else "GET",
        parts.path + (f"?{parts.query}" if parts.query else ""),
        data,
    )
    assert answer.status, answer.error
    if answer.ok:
        return answer.status, dict(answer.headers)
    raw = answer.body
    error = json.loads(raw)["error"] if raw.startswith(b"{") else raw.decode()
    return answer.status, {**dict(answer.headers), "error": error}


def test_writing_endpoints_need_the_token_and_only_probes_stay_open(
    served: tuple[ScriptedApi, str],
) -> None:
    api, base = served
    append = f"{base}/append?collection=s.t"
    status, headers = call(append, b'{"id": 1}\n')
    assert status == 401 and headers["error"] == "unauthorized"
    assert headers["www-authenticate"].startswith("Bearer")
    assert call(append, b'{"id": 1}\n', token="wrong-token-0123456789")[0] == 403
    assert call(f"{base}/promote", b"", token="x")[0] == 403
    assert api.appended == [], "nothing reached the sidecar"
    assert call(append, b'{"id": 1}\n', token=TOKEN)[0] == 200
    assert len(api.appended) == 1
    for path in ("/healthz", "/readyz"):
        assert call(f"{base}{path}")[0] in (200, 503), path
    for path in ("/metrics", "/status", "/history", "/read?collection=s.t"):
        assert call(f"{base}{path}")[0] == 401, path
        assert call(f"{base}{path}", token=TOKEN)[0] == 200, path


@pytest.mark.parametrize("content", ["", "short", "has a space in it 0123456789"])
def test_a_bad_token_file_is_refused_naming_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as caught:
        BearerToken.from_file(path)
    assert caught.value.exit_code == EXIT_BAD_INPUT and str(path) in caught.value.message
    with pytest.raises(ConfigurationError):
        BearerToken.from_file(tmp_path / "missing")


def test_listening_beyond_loopback_needs_a_token_or_an_explicit_insecure() -> None:
    token = BearerToken(TOKEN.encode())
    for host in ("127.0.0.1", "::1", "[::1]", "localhost"):
        check_exposure(host, None, insecure=False)
    with pytest.raises(ConfigurationError) as caught:
        check_exposure("0.0.0.0", None, insecure=False)
    assert caught.value.details["host"] == "0.0.0.0"
    check_exposure("0.0.0.0", token, insecure=False)
    check_exposure("0.0.0.0", None, insecure=True)
    assert TOKEN not in repr(token)
