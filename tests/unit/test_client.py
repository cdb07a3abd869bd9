"""The typed client against the sidecar's real HTTP server (a scripted API behind it): formats,
retries by the same key, typed refusals."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from catalog_client import SidecarClient, SidecarError, SidecarUnavailableError
from orchestrator.dataplane.serving import NotLeaderError
from orchestrator.dataplane.writer import WritesPausedError
from orchestrator.sidecar.server import api_server
from support.api import ScriptedApi


@pytest.fixture
def served() -> Iterator[tuple[ScriptedApi, SidecarClient]]:
    api = ScriptedApi(ready=True)
    server = api_server(api).start()
    yield api, SidecarClient(f"http://{server.address}", retry_deadline=3.0)
    server.stop()


def test_an_arrow_table_goes_as_a_stream_and_rows_as_json_lines_each_with_a_key(
    served: tuple[ScriptedApi, SidecarClient],
) -> None:
    api, client = served
    answer = client.append("s.t", pa.table({"id": [1, 2]}), key="k-1")
    assert answer.key == "k-1" and answer.upper == 3
    client.append("s.t", [{"id": 3}])
    (arrow, _), (ndjson, _) = api.formats
    assert arrow is True and ndjson is False
    assert pa.ipc.open_stream(api.appended[0][1]).read_all().column("id").to_pylist() == [1, 2]
    assert api.appended[1][1] == b'{"id": 3}\n'
    assert api.keys[0] == "k-1" and api.keys[1] and api.keys[1].startswith("client-")


def test_a_503_is_retried_with_the_same_key_until_it_lands(
    served: tuple[ScriptedApi, SidecarClient],
) -> None:
    api, client = served
    api.append_errors = [WritesPausedError("paused", state="checking", retry_after=0.1)] * 2
    answer = client.append("s.t", [{"id": 1}], key="same")
    assert answer.rows == 1
    assert api.keys == ["same"]  # the two refused tries never reached the scripted record


def test_a_refusal_raises_with_its_code_and_a_503_past_the_deadline_is_unavailable(
    served: tuple[ScriptedApi, SidecarClient],
) -> None:
    api, client = served
    api.append_error = NotLeaderError("read-only: append through the leader", state="ready")
    with pytest.raises(SidecarError) as caught:
        client.append("s.t", [{"id": 1}])
    assert (caught.value.status, caught.value.code) == (409, "read-only")
    assert caught.value.details["state"] == "ready"
    api.append_error = WritesPausedError("paused", state="checking", retry_after=0.5)
    with pytest.raises(SidecarUnavailableError) as unavailable:
        client.append("s.t", [{"id": 1}])
    assert unavailable.value.code == "writes-paused" and "gave up after 3 s" in str(
        unavailable.value
    )


def test_reads_status_promote_and_finalize(served: tuple[ScriptedApi, SidecarClient]) -> None:
    api, client = served
    assert client.read("s.t").column("id").to_pylist() == ["a", "b"]
    assert [r["id"] for r in client.read_rows("s.t", as_of=4)] == ["a", "b"]
    assert client.status()["processes"] == []
    assert client.promote(7) == {"deploy_generation": 7} and api.promoted == [7]
    assert client.finalize("final")["already_final"] is True
    assert client.ready() is True


def test_an_unreachable_sidecar_is_unavailable_after_the_deadline() -> None:
    client = SidecarClient("http://127.0.0.1:9", retry_deadline=0.5)
    with pytest.raises(SidecarUnavailableError) as caught:
        client.status()
    assert caught.value.code == "unreachable"
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        SidecarClient("ftp://x")


def test_batches_stream_and_a_refused_stream_raises_its_code(
    served: tuple[ScriptedApi, SidecarClient],
) -> None:
    api, client = served
    api.table = pa.table({"id": list(range(10))})
    batches = list(client.read_batches("s.t"))
    assert batches and sum(b.num_rows for b in batches) == 10
    assert pa.Table.from_batches(batches).column("id").to_pylist() == list(range(10))
    with pytest.raises(SidecarError) as refused, client.stream("GET", "/nope"):
        pass
    assert refused.value.status == 404 and refused.value.code == "not-found"
    assert refused.value.request_id  # the sidecar's answer names the request, as any call
    assert "catalog_upgrade" in client.metrics()
    assert client.openapi()["openapi"] == "3.1.0"


def test_the_raw_exchange_answers_every_status_and_never_raises(
    served: tuple[ScriptedApi, SidecarClient],
) -> None:
    api, client = served
    answer = client.send("POST", "/append?collection=s.t", b'{"id": 1}\n')
    assert answer.ok and answer.json()["rows"] == 1
    assert api.keys == [None], "the raw exchange adds no key"
    assert api.formats[-1][0] is False, "sent as JSON lines"
    missing = client.send("GET", "/nope")
    assert missing.status == 404 and missing.json()["error"] and not missing.ok
    assert missing.summary().startswith("HTTP 404: {")
    down = SidecarClient("http://127.0.0.1:9", keep_alive=False).send("GET", "/healthz")
    assert down.status == 0 and down.error and down.summary().startswith("unreachable (")


def test_a_client_of_several_sidecars_follows_the_leader_with_the_same_key() -> None:
    """Blue leads, green is read-only; then blue goes away and green leads. Every append lands
    once, under its key, on whichever leads; a dead URL in the list is passed over."""
    blue, green = ScriptedApi(ready=True), ScriptedApi(ready=True)
    green.append_error = NotLeaderError("read-only: append through the leader", state="ready")
    blue_server, green_server = api_server(blue).start(), api_server(green).start()
    try:
        urls = [f"http://{green_server.address}", "http://127.0.0.1:9",
                f"http://{blue_server.address}"]  # fmt: skip
        client = SidecarClient(urls, retry_deadline=5.0)
        assert client.append("s.t", [{"id": 1}], key="k-1").key == "k-1"
        assert client.append("s.t", [{"id": 2}], key="k-2").rows == 1
        assert blue.keys == ["k-1", "k-2"] and green.keys == []

        blue_server.stop()  # the cut-over: blue exits, green takes over
        green.append_error = None
        assert client.append("s.t", [{"id": 3}], key="k-3").rows == 1
        assert green.keys == ["k-3"] and blue.keys == ["k-1", "k-2"]
        assert client.status()["processes"] == []  # reads follow the same sidecar
    finally:
        green_server.stop()
        blue_server.stop()
