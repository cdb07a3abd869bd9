"""Every runnable example of the manual and the README, run as written against real processes.

Each test is one story of ``tests/support/examples.py`` (:data:`STORIES`): the shell blocks run a
command at a time in a fresh directory (a real embedded ZooKeeper, real sidecars, curl), the
Python blocks run in one namespace, in order, as a reader pastes them. Only the documented ports
are mapped to free ones, and in two stories the files an example names (a token, a CA) are
mapped to the ones the test made. ``tests/unit/test_manual.py`` checks that every runnable block
of the pages is in a story or says why it is not run.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from catalog_client import SidecarClient
from support import examples
from support.examples import Block, Reader
from support.pki import CertificateAuthority
from support.sidecars import Launch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = "mz_catalog.mz_tables"


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Reader]:
    reader = Reader(tmp_path / "terminal")
    try:
        yield reader
    finally:
        reader.close()


def run_python(block: Block, namespace: dict[str, Any], replace: dict[str, str]) -> str:
    """Run a Python block in ``namespace`` with ``replace``'s texts replaced; what it printed."""
    assert block.language == "python", block
    source = block.text
    for documented, ours in replace.items():
        assert documented in source, f"{block} no longer names {documented!r}"
        source = source.replace(documented, ours)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, str(block), "exec"), namespace)
    return printed.getvalue()


def rows_of(ndjson: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ndjson.splitlines() if line.strip()]


def test_story_readme(reader: Reader) -> None:
    """The README's one screen (bootstrap, append, green, status, promote, read, finalize,
    fleet), then its client lines against the two sidecars it started."""
    walk, client = examples.story("readme")
    said = reader.run_block(walk)
    read = rows_of(said[6])
    assert [r["name"] for r in read] == ["orders"] and "source_id" in read[0], said[6]
    assert "0.11.0" in said[8], said[8]  # the fleet's line of this environment
    namespace: dict[str, Any] = {}
    run_python(client, namespace, {f":{p}": f":{reader.ports[p]}" for p in (8081, 8082)})
    assert [r["name"] for r in namespace["rows"]] == ["orders"]
    namespace["client"].close()


def test_story_rollback(reader: Reader) -> None:
    """Getting started by hand, the operator's throttle, pause and resume, then the concepts
    page's rollback: 0.10.0 at generation 3 serves the rows 0.11.0 held."""
    walk, pacing, rollback = examples.story("rollback")
    said = reader.run_block(walk)
    assert [r["name"] for r in rows_of(said[-1])] == ["orders"], said[-1]
    reader.run_block(pacing)
    said = reader.run_block(rollback)
    assert said[-1] == "", said[-1]  # mz_roles: nobody appended to it
    tables = rows_of(reader.run("curl -s 'localhost:8083/read?collection=mz_catalog.mz_tables'"))
    assert [r["name"] for r in tables] == ["orders"] and "source_id" not in tables[0], tables


def test_story_rollback_in_an_environment(reader: Reader) -> None:
    """The operating page's rollback of environment ``ops2``, after getting started there."""
    (rollback,) = examples.story("rollback_in_an_environment")
    (walk,) = examples.matching("docs/getting-started.md", "catalog-upgrade zookeeper &")
    reader.environment["CATALOG_UPGRADE_ENV"] = "ops2"
    reader.run_block(walk)
    del reader.environment["CATALOG_UPGRADE_ENV"]  # the block names its environment
    said = reader.run_block(rollback)
    assert "rollback" in said[-1] and "rolled back" in said[-1], said[-1]


def test_story_data_plane(launch: Launch, tmp_path: Path) -> None:
    """The data plane's Arrow append (with a table of the schema the sidecar gives), its Arrow
    read, then Polars and DuckDB on what it read, against a sidecar with both tokens."""
    write, read = tmp_path / "write-token", tmp_path / "read-token"
    write.write_text("w" * 32 + "\n")
    read.write_text("r" * 32 + "\n")
    write.chmod(0o600)
    read.chmod(0o600)
    leader = launch(
        "0.10.0", 1, "leader", auto_promote=True, http_token_file=write,
        extra=["--http-read-token-file", str(read)],
    )  # fmt: skip
    leader.wait_state("serving", timeout=60)
    url = f"http://{leader.sidecar.http}"
    appending, reading, polars, duckdb = examples.story("data_plane")
    namespace: dict[str, Any] = {}
    run_python(appending, namespace, {})
    with SidecarClient(url, token="r" * 32) as client:
        schema = client.schema(TABLES)
    rows = [{"id": "u7", "oid": 20007, "schema_id": "u3", "name": "orders", "owner_id": "u1"}]
    table = pa.Table.from_pylist(rows, schema=schema)
    answer = json.loads(namespace["append"](url, "w" * 32, TABLES, table, "order-7"))
    assert answer["rows"] == 1, answer
    run_python(reading, namespace, {"http://127.0.0.1:8081": url, "READ-TOKEN": "r" * 32})
    assert namespace["mz_tables"].column("name").to_pylist() == ["orders"]
    run_python(polars, namespace, {})
    assert namespace["frame"]["oid"].to_list() == [20007]
    shown = run_python(duckdb, namespace, {})
    assert "u1" in shown and "owner_id" in shown, shown


def test_story_client(launch: Launch, tmp_path: Path) -> None:
    """The client page's first example, over HTTPS with a token and the CA, as written: ask the
    schema, build the table, append, read batches."""
    ca = CertificateAuthority(tmp_path / "pki")
    web = ca.issue("sidecar-web")
    token = tmp_path / "token"
    token.write_text("t" * 32 + "\n")
    token.chmod(0o600)
    leader = launch(
        "0.10.0", 1, "leader", auto_promote=True, http_token_file=token,
        extra=["--http-tls-cert", str(web.cert), "--http-tls-key", str(web.key)],
    )  # fmt: skip
    leader.wait_state("serving", timeout=60)
    port = leader.sidecar.http.rpartition(":")[2]
    (block,) = examples.story("client")
    namespace: dict[str, Any] = {}
    replace = {
        "https://sidecar:8081": f"https://localhost:{port}",
        "/etc/cu/token": str(token),
        '"ca.pem"': repr(str(ca.ca_file)),
    }
    run_python(block, namespace, replace)
    assert namespace["answer"].rows == 1, namespace["answer"]
    assert namespace["batch"].column("name").to_pylist() == ["t"]


def test_story_releases(reader: Reader) -> None:
    """The releases page's manifest, renames and conversions build; its plan and validate run,
    and so does the concepts page's plan of a rename."""
    manifest, commands, renames, conversions, rename_plan = examples.story("releases")
    namespace: dict[str, Any] = {}
    run_python(manifest, namespace, {})
    assert str(namespace["RELEASE"].version) == "0.11.0"
    run_python(renames, {}, {})
    run_python(conversions, {}, {})
    said = reader.run_block(commands)
    assert "0.10.0 -> 0.11.0" in said[0], said[0]
    (plan,) = reader.run_block(rename_plan)
    assert "mz_catalog.mz_clusters (s12)" in plan and "replication_factor" in plan, plan
