"""The sidecar as a real process against a real ZooKeeper: lifecycle, HTTP, upgrade, exit codes."""

from __future__ import annotations

import itertools
import json
import shlex
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus
from catalog.environment import read_catalog
from catalog.errors import EXIT_BAD_INPUT, EXIT_FENCED, EXIT_OK, EXIT_REFUSED
from catalog.migration import MigrationShard
from catalog.release import load_release
from catalog.schema import fingerprint
from catalog.shard import STOP_BATCHES, Shard
from catalog.shard.merges import steady_bound
from catalog_client import SidecarError
from orchestrator.cli import main
from orchestrator.testing.zkserver import free_port
from support.sidecars import (
    ROOT,
    Launch,
    SidecarProcess,
    cli,
    http_call,
    json_lines,
    release_file,
    tree_digest,
)
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

V1, V2 = "0.10.0", "0.11.0"
TABLES = "mz_catalog.mz_tables"
ROLES = "mz_catalog.mz_roles"
TABLE_ROWS = [
    {"id": "u1", "oid": 20001, "schema_id": "u3", "name": "orders", "owner_id": "u1"},
    {"id": "u2", "oid": 20002, "schema_id": "u3", "name": "items", "owner_id": "u1"},
]


def lines(rows: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def bootstrap(launch: Launch, process_id: str = "blue-1") -> SidecarProcess:
    leader: SidecarProcess = launch(V1, 1, process_id, auto_promote=True)
    leader.wait_state("serving")
    return leader


# --- bootstrap and HTTP ------------------------------------------------------------------------


def test_only_a_process_asked_to_bootstraps_an_empty_environment(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """A newer release started first, without --auto-promote, waits read-only and says so; it
    writes nothing that stops the release meant to lead (which bootstraps at generation 1),
    and is promoted later as any green."""
    green = launch(V2, 2, "green-2")
    node = green.wait_state("ready")
    assert node["phase"] == "waiting for bootstrap"
    assert zk_client.exists(f"{zk_env.root}/catalog") is None
    assert zk_client.exists(f"{zk_env.root}/promotion") is None
    table = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert "wait for a bootstrap" in table.stdout and "--deploy-generation 2" in table.stdout
    blue = bootstrap(launch)
    assert blue.wait_state("serving")["epoch"] == 1
    # Checked again against the new catalog: a plain green (its node says ready before that,
    # while it waits for the bootstrap, so wait for the phase too).
    node = green.wait_node(lambda n: n.get("state") == "ready" and n.get("phase") == "ready")
    assert node["phase"] == "ready" and node["plan"]["from"] == V1
    cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name, "--deploy-generation", "2")
    assert green.wait_state("serving")["mode"] == "leader"
    assert blue.wait_exit() == EXIT_FENCED


@pytest.mark.slow
def test_bootstrap_and_http_endpoints(launch: Launch, zk_env: ZkEnv) -> None:
    """An auto-promote sidecar bootstraps an empty env and serves every HTTP endpoint."""
    leader = bootstrap(launch)
    node = leader.wait_state("serving")
    assert node["mode"] == "leader" and node["epoch"] == 1
    assert leader.http("GET", "/healthz")[0] == 200
    status, body = leader.http("GET", "/readyz?verbose")
    assert status == 200 and b"[+]state ok" in body

    status, body = leader.http("GET", "/status")
    document = json.loads(body)
    assert status == 200
    assert document["catalog"]["version"] == V1
    assert document["catalog"]["deploy_generation"] == 1
    assert [p["id"] for p in document["processes"]] == ["blue-1"]
    assert TABLES in {c["name"] for c in document["collections"]}

    status, body = leader.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
    answer = json.loads(body)
    assert status == 200, answer
    assert answer["rows"] == 2 and answer["upper"] == answer["ts"] + 1
    status, body = leader.http("GET", f"/read?collection={TABLES}")
    assert status == 200
    assert sorted(r["name"] for r in json_lines(body)) == ["items", "orders"]

    status, body = leader.http("POST", f"/append?collection={TABLES}", b'{"id": "u9"}\n')
    assert status == 400 and json.loads(body)["field"] == "oid"
    status, body = leader.http("POST", f"/append?collection={TABLES}", b'{"nope": 1}\n')
    assert status == 400 and json.loads(body)["field"] == "nope"
    assert leader.http("POST", "/append?collection=mz_catalog.nope", b"{}\n")[0] == 404

    status, body = leader.http("POST", "/promote", b"")
    assert status == 200 and json.loads(body)["deploy_generation"] == 1
    status, body = leader.http("POST", "/promote?deploy_generation=0", b"")
    assert status == 400 and json.loads(body)["error"] == "bad-input"  # no such generation

    status, body = leader.http("GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'catalog_upgrade_state{state="serving"} 1.0' in text
    assert "catalog_upgrade_epoch 1.0" in text
    assert 'catalog_upgrade_migration_phase_seconds_count{phase="switching collections"}' in text
    assert "catalog_upgrade_zookeeper_request_seconds_count" in text
    assert f'catalog_upgrade_rows_appended_total{{collection="{TABLES}"}} 2.0' in text
    for step in ("parse", "queue", "write", "commit"):  # one append landed; bad bodies: no step
        assert f'catalog_upgrade_append_seconds_count{{step="{step}"}} 1.0' in text

    leader.signal(signal.SIGTERM)
    assert leader.wait_exit() == EXIT_OK


def test_readers_racing_appends_and_each_other_each_read_one_whole_snapshot(
    launch: Launch,
) -> None:
    """Four readers read one collection while a writer appends to it: they race each other
    on the snapshot each read builds on (orchestrator.dataplane.reader keeps one per shard)
    and the merges replace batches under them. Every answer holds each row acknowledged
    before the read began, once, and no row whose append had not begun; a reader never sees
    fewer rows than it saw before."""
    leader = bootstrap(launch)
    started = [0]  # appends begun: rows w0 .. w(n-1) may be in a read
    acknowledged = [0]  # appends answered: rows w0 .. w(n-1) must be in a later read
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]

    def row(n: int) -> bytes:
        return lines([{"id": f"w{n}", "oid": n, "schema_id": "u3", "name": f"v{n}",
                       "owner_id": "u1"}])  # fmt: skip

    def write() -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            started[0] = n + 1
            answer = leader.sidecar.append(
                TABLES, row(n), key=f"race-{n}", deadline=time.monotonic() + 20
            )
            if answer.status != 200:
                problems.append(f"append {n}: {answer.status} {answer.body[:200]!r}")
                return
            acknowledged[0] = n + 1

    def read() -> None:
        seen = 0
        while not stop.is_set():
            must = acknowledged[0]
            status, body = leader.http("GET", f"/read?collection={TABLES}")
            if status != 200:
                problems.append(f"read: {status} {body[:200]!r}")
                return
            ids = [r["id"] for r in json_lines(body)]
            numbers = sorted(int(i[1:]) for i in ids)
            if len(set(ids)) != len(ids):
                problems.append(f"a read holds a row twice: {len(ids) - len(set(ids))} rows")
            elif numbers[:must] != list(range(must)):
                problems.append(f"a read misses rows acknowledged before it ({must})")
            elif numbers and numbers[-1] >= started[0]:
                problems.append(f"a read holds a row never appended: {numbers[-1]}")
            elif len(numbers) < seen:
                problems.append(f"a read went back from {seen} rows to {len(numbers)}")
            seen = len(numbers)
            reads[0] += 1
            if problems:
                return

    threads = [threading.Thread(target=write), *(threading.Thread(target=read) for _ in range(4))]
    for thread in threads:
        thread.start()
    time.sleep(8)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not problems, problems[:3]
    # Enough appends for merges to run under the reads (they start past 32 batches).
    assert acknowledged[0] > 2 * STOP_BATCHES and reads[0] > 100, (acknowledged, reads)


# --- blue-green upgrade -------------------------------------------------------------------------


@pytest.mark.slow
def test_blue_green_upgrade_with_promote(launch: Launch, zk_env: ZkEnv) -> None:
    """A read-only next release refuses appends, reads through its schema, and leads after
    promote --wait; the old leader exits fenced and the data reads in the new schema."""
    blue = bootstrap(launch)
    assert blue.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))[0] == 200
    roles = [{"id": 7, "oid": 30007, "name": "analyst", "inherit": True}]
    assert blue.http("POST", f"/append?collection={ROLES}", lines(roles))[0] == 200

    green = launch(V2, 2, "green-2")
    node = green.wait_state("ready")
    assert node["mode"] == "read-only"
    assert node["plan"]["from"] == V1 and node["plan"]["to"] == V2
    status, body = green.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
    assert status == 409 and json.loads(body)["error"] == "read-only"
    status, body = green.http("GET", f"/read?collection={TABLES}")
    assert status == 200
    assert {r["source_id"] for r in json_lines(body)} == {None}

    result = cli(
        "promote",
        "--zk",
        zk_env.hosts,
        "--env",
        zk_env.name,
        "--deploy-generation",
        "2",
        "--wait",
        "30",
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert blue.wait_exit() == EXIT_FENCED
    node = green.wait_state("serving")
    assert node["mode"] == "leader" and node["epoch"] == 2

    status, body = green.http("GET", f"/read?collection={TABLES}")
    rows = json_lines(body)
    assert status == 200
    assert sorted(r["name"] for r in rows) == ["items", "orders"]
    assert {r["source_id"] for r in rows} == {None}
    status, body = green.http("GET", f"/read?collection={ROLES}")
    assert status == 200
    assert [r["id"] for r in json_lines(body)] == ["u7"]

    status = json.loads(cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout)
    assert status["catalog"]["version"] == V2 and status["catalog"]["deploy_generation"] == 2
    assert status["leader"]["id"] == "green-2"

    # The history: the bootstrap, then this upgrade with who promoted it and its phases.
    done = cli("history", "--json", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert done.returncode == EXIT_OK, done.stderr
    first, second = json.loads(done.stdout)  # one document, like every --json
    per_line = cli("history", "--json-lines", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert [json.loads(line) for line in per_line.stdout.splitlines()] == [first, second]
    assert (first["deploy_generation"], first["outcome"], first["from_version"]) == (
        1, "bootstrapped", None,
    )  # fmt: skip
    assert (second["from_version"], second["to_version"], second["outcome"]) == (
        V1,
        V2,
        "completed",
    )
    assert second["leader"] == "green-2" and second["promoted_by"]
    names = [p["name"] for p in second["phases"]]
    assert names[0] == "taking over" and "registering schemas" in names
    assert second["seconds"] >= sum(p["seconds"] for p in second["phases"]) - 0.01
    table = cli("history", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert "completed" in table.stdout and "green-2" in table.stdout


@pytest.mark.slow
@pytest.mark.quiet
def test_sigterm_of_leader_hands_over_to_same_generation(launch: Launch) -> None:
    """SIGTERM: the leader steps down and exits 0; a ready peer of its generation leads within
    about a second."""
    first = bootstrap(launch, "blue-a")
    second = launch(V1, 1, "blue-b")
    second.wait_state("ready")
    first.signal(signal.SIGTERM)
    stopped = time.monotonic()
    node = second.wait_state("serving", timeout=10)
    took = time.monotonic() - stopped
    assert first.wait_exit() == EXIT_OK
    assert node["mode"] == "leader" and node["epoch"] == 2
    assert took < 2.5, f"takeover took {took:.2f} s"


# --- a generation stands for one release -------------------------------------------------------


@pytest.mark.slow
def test_another_release_at_the_serving_generation_never_upgrades_on_a_restart(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """0.10.0 leads generation 1; 0.11.0 started at generation 1 by mistake exits 2 at once,
    naming the fix, and writes nothing; the leader's routine restart (SIGTERM, then the same
    command) finds the catalog as it was: nobody promoted 0.11.0, so nothing upgraded."""
    blue = bootstrap(launch, "blue-1")
    before = tree_digest(zk_client, f"{zk_env.root}/catalog")
    mistaken = launch(V2, 1, "green-1")
    assert mistaken.wait_exit() == EXIT_BAD_INPUT
    said = mistaken.log_file.read_text()
    assert "runs release 0.10.0, not 0.11.0" in said and "--deploy-generation 2" in said
    assert zk_client.exists(f"{zk_env.root}/processes/green-1") is None
    blue.signal(signal.SIGTERM)
    assert blue.wait_exit() == EXIT_OK
    again = launch(V1, 1, "blue-1b")
    assert again.wait_state("serving")["mode"] == "leader"
    assert launch(V2, 1, "green-1b").wait_exit() == EXIT_BAD_INPUT
    assert tree_digest(zk_client, f"{zk_env.root}/catalog") == before
    status = json.loads(cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout)
    assert (status["catalog"]["version"], status["catalog"]["deploy_generation"]) == (V1, 1)
    rows = json.loads(cli("history", "--json", "--zk", zk_env.hosts, "--env", zk_env.name).stdout)
    assert [(r["deploy_generation"], r["to_version"], r["outcome"]) for r in rows] == [
        (1, V1, "bootstrapped")
    ]


@pytest.mark.slow
def test_two_releases_waiting_at_one_generation_the_taker_binds_it(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """0.11.0 and 0.12.0 both wait read-only at generation 2 (neither is refused before a
    takeover: the catalog is at 1). Promoted, the first candidate leads and binds generation 2
    to 0.11.0; the other exits 2, and the leader's restart leaves 0.11.0 serving."""
    blue = bootstrap(launch, "blue-1")
    green = launch(V2, 2, "green-2")
    green.wait_state("ready")
    other = launch("0.12.0", 2, "other-2")
    other.wait_state("ready")
    promoted = cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
                   "--deploy-generation", "2", "--wait", "30")  # fmt: skip
    assert promoted.returncode == EXIT_OK, promoted.stderr
    assert green.wait_state("serving")["mode"] == "leader"
    assert blue.wait_exit() == EXIT_FENCED
    assert other.wait_exit() == EXIT_BAD_INPUT
    assert "runs release 0.11.0, not 0.12.0" in other.log_file.read_text()
    green.signal(signal.SIGTERM)
    assert green.wait_exit() == EXIT_OK
    again = launch(V2, 2, "green-2b")
    assert again.wait_state("serving")["mode"] == "leader"
    status = json.loads(cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout)
    assert (status["catalog"]["version"], status["catalog"]["deploy_generation"]) == (V2, 2)


@pytest.mark.slow
def test_the_commands_status_prints_act_on_its_environment(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """Each ``next`` command of status names the environment and the ZooKeeper it was read
    through (neither is the default here); run as printed, each does what it says there."""
    blue = bootstrap(launch, "blue-1")
    green = launch(V2, 2, "green-2", extra=["--finalize-after", "never"])
    green.wait_state("ready")

    def next_command() -> list[str]:
        document = json.loads(
            cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout
        )
        printed = document["upgrade"]["next"]
        assert printed, document["upgrade"]
        words = shlex.split(printed)
        assert words[0] == "catalog-upgrade", printed
        assert ["--env", zk_env.name] == words[words.index("--env") : words.index("--env") + 2]
        assert ["--zk", zk_env.hosts] == words[words.index("--zk") : words.index("--zk") + 2]
        return words[1:]

    promote = next_command()
    assert promote[0] == "promote" and "--deploy-generation" in promote
    ran = cli(*promote)
    assert ran.returncode == EXIT_OK, ran.stderr
    assert green.wait_state("serving")["mode"] == "leader"
    assert blue.wait_exit() == EXIT_FENCED
    finalize = next_command()
    assert finalize[0] == "finalize"
    ran = cli(*finalize)
    assert ran.returncode == EXIT_OK, ran.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = json.loads(
            cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout
        )
        if status["upgrade"]["stage"] == "final":
            break
        time.sleep(0.3)
    assert status["upgrade"]["stage"] == "final" and status["upgrade"]["next"] is None


def test_an_integrator_builds_an_append_from_the_schema_the_sidecar_lists(
    launch: Launch,
) -> None:
    """GET /collections lists every collection of the release with its fields, types and
    nullability: an Arrow table built from that alone is accepted as it is (the schema an
    integrator guesses, int64 for a uint32, is refused); the read token may ask."""
    leader = bootstrap(launch, "blue-1")
    status, body = leader.http("GET", "/collections")
    assert status == 200, body
    listed = json.loads(body)
    assert listed["version"] == V1
    release = {b.name: b for b in load_release(str(release_file(V1))).builtins}
    assert [c["name"] for c in listed["collections"]] == sorted(release)
    tables = next(c for c in listed["collections"] if c["name"] == TABLES)
    assert tables["global_id"] == release[TABLES].global_id
    assert tables["fingerprint"] == fingerprint(release[TABLES].schema)
    with leader.sidecar.client() as client:  # its connections closed at the end
        schema = client.schema(TABLES)  # read from the listing alone
        assert schema == release[TABLES].schema
        assert client.schema(TABLES).empty_table().num_rows == 0
        row = {"id": "u9", "oid": 20009, "schema_id": "u3", "name": "from-the-schema",
               "owner_id": "u1"}  # fmt: skip
        table = pa.Table.from_pylist([row], schema=schema)
        guessed = pa.Table.from_pylist([row])  # the obvious way: oid inferred as int64
        with pytest.raises(SidecarError) as refused:
            client.append(TABLES, guessed)
        assert refused.value.status == 400, refused.value
        # The call's id came back with the refusal, and the sidecar logged it.
        request_id = refused.value.request_id
        assert request_id and request_id in leader.sidecar.log_text()
        with pytest.raises(ValueError, match=r"no collection mz_catalog\.nope"):
            client.schema("mz_catalog.nope")
        answer = client.append(TABLES, table)
        assert answer.rows == 1
    assert not client._opened  # closed
    names = [r["name"] for r in json_lines(leader.http("GET", f"/read?collection={TABLES}")[1])]
    assert "from-the-schema" in names


@pytest.mark.slow
def test_the_rollback_status_prints_brings_the_previous_release_back(
    launch: Launch, zk_env: ZkEnv
) -> None:
    """A pending upgrade's status prints two rollback commands naming this environment, its
    ZooKeeper and a new generation: the sidecar line parses with the real CLI and, started
    with the release files put in its placeholders, checks the rollback; the promote line,
    run as printed, brings the previous release back."""
    blue = bootstrap(launch, "blue-1")
    green = launch(V2, 2, "green-2", extra=["--finalize-after", "never"])
    green.wait_state("ready")
    assert cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
               "--deploy-generation", "2", "--wait", "30").returncode == EXIT_OK  # fmt: skip
    assert blue.wait_exit() == EXIT_FENCED
    green.wait_state("serving")
    document = json.loads(
        cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout
    )
    assert document["upgrade"]["stage"] == "pending", document["upgrade"]
    start, promote = (shlex.split(line) for line in document["upgrade"]["rollback"])
    text = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name).stdout
    assert "rollback" in text and f"--rollback-from '<{V2} release file>'" in text, text

    root = click.Context(main, info_name="catalog-upgrade")
    sidecar = main.get_command(root, "sidecar")
    assert sidecar is not None and start[:2] == ["catalog-upgrade", "sidecar"]
    files = {f"<{V1} release file>": str(release_file(V1)),
             f"<{V2} release file>": str(release_file(V2))}  # fmt: skip
    options = sidecar.make_context("sidecar", [files.get(w, w) for w in start[2:]], parent=root)
    assert options.params["env"] == zk_env.name and options.params["zk"] == zk_env.hosts
    generation = options.params["deploy_generation"]
    assert generation == 3
    assert options.params["rollback_from_ref"] == files[f"<{V2} release file>"]
    back = launch(V1, generation, "blue-3", extra=["--rollback-from", str(release_file(V2))])
    back.wait_state("ready")
    assert promote[:2] == ["catalog-upgrade", "promote"]
    ran = cli(*promote[1:])
    assert ran.returncode == EXIT_OK, ran.stderr
    assert back.wait_state("serving")["mode"] == "leader"
    assert green.wait_exit() == EXIT_FENCED
    history = cli("history", "--zk", zk_env.hosts, "--env", zk_env.name)
    assert "rollback" in history.stdout and "rolled back" in history.stdout, history.stdout


def test_http_promote_of_a_generation_no_process_runs_is_refused_at_once(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """``POST /promote`` of a generation nobody runs answers 409 ``generation-not-running`` at
    once (the main thread never waits for a registration), and the target does not move."""
    blue = bootstrap(launch, "blue-1")
    status, body = blue.http("POST", "/promote?deploy_generation=7", b"{}")
    answer = json.loads(body)
    assert status == 409 and answer["rule"] == "generation-not-running", body
    # Not waited for: the register wait would have ended in 504 busy.
    promotion = json.loads(zk_client.get(f"{zk_env.root}/promotion")[0])
    assert promotion["deploy_generation"] == 1
    assert blue.wait_state("serving")["mode"] == "leader"


@pytest.mark.slow
def test_stale_generation_exits_fenced(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """A process whose generation is below the catalog's exits 3 and records a fenced event."""
    blue = bootstrap(launch, "blue-3")
    green = launch(V1, 3, "green-3", auto_promote=True)
    green.wait_state("serving")
    assert blue.wait_exit() == EXIT_FENCED
    stale = launch(V1, 2, "stale-2")
    assert stale.wait_exit() == EXIT_FENCED
    status = json.loads(cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout)
    assert "stale-2" not in {p["id"] for p in status["processes"]}


@pytest.mark.slow
def test_refused_migration_exits_4_and_status_shows_why(launch: Launch, zk_env: ZkEnv) -> None:
    """A release with a missing instruction fails (exit 4); a failed event names the collection."""
    broken = ROOT / "tests" / "fixtures" / "broken_releases" / "missing_instruction"
    leader = launch("0.1.0", 1, "base-1", auto_promote=True, release=str(broken / "v0_1_0.py"))
    leader.wait_state("serving")
    refused = launch("0.2.0", 2, "refused-2", release=str(broken / "v0_2_0.py"))
    assert refused.wait_exit() == EXIT_REFUSED
    status = json.loads(cli("status", "--zk", zk_env.hosts, "--env", zk_env.name, "--json").stdout)
    failed = [e for e in status["events"] if e["kind"] == "failed"]
    assert [e["process_id"] for e in failed] == ["refused-2"]
    assert failed[0]["error"]["exit_code"] == EXIT_REFUSED
    assert "mz_catalog.mz_tables" in json.dumps(failed[0]["error"])
    # The reason and its rule at the top of status, not only in the event dump below.
    assert status["upgrade"]["stage"] == "refused"
    assert status["upgrade"]["rule"] == "missing-instruction", status["upgrade"]
    table = cli("status", "--zk", zk_env.hosts, "--env", zk_env.name).stdout
    head = table[: table.index("deploy generation")]
    assert "why" in head and "missing-instruction" in head, table
    assert leader.wait_state("serving")["mode"] == "leader"
    done = cli("history", "--json", "--zk", zk_env.hosts, "--env", zk_env.name)
    rows = json.loads(done.stdout)
    outcomes = [(r["deploy_generation"], r["outcome"]) for r in rows]
    assert outcomes == [(1, "bootstrapped"), (2, "refused")]
    assert rows[1]["rule"] == "missing-instruction" and rows[1]["to_version"] == "0.2.0"
    assert "mz_catalog.mz_tables" in rows[1]["reason"]


# --- refusals before any write -----------------------------------------------------------------


def test_bad_release_exits_2_and_writes_nothing(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, launch: Launch
) -> None:
    """--release naming a missing file exits 2 before touching ZooKeeper."""
    broken = tmp_path / "broken.py"
    broken.write_text("RELEASE = 1 / 0\n")
    before = tree_digest(zk_client, zk_env.root)
    for ref in (str(tmp_path / "missing.py"), str(broken)):
        sidecar = launch(V1, 1, "bad", release=ref)
        assert sidecar.wait_exit() == EXIT_BAD_INPUT
    assert tree_digest(zk_client, zk_env.root) == before == ""


@pytest.mark.slow
def test_blob_mismatch_exits_2_and_writes_nothing(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, launch: Launch
) -> None:
    """A --blob different from the one recorded at bootstrap is refused (exit 2), nothing
    written; omitting --blob uses the recorded one."""
    leader = bootstrap(launch)
    leader.signal(signal.SIGTERM)
    assert leader.wait_exit() == EXIT_OK
    before = tree_digest(zk_client, zk_env.root)
    other = launch(V1, 1, "other-blob", blob=tmp_path / "elsewhere")
    assert other.wait_exit() == EXIT_BAD_INPUT
    assert b"elsewhere" in other.log_file.read_bytes()
    assert tree_digest(zk_client, zk_env.root) == before
    assert not (tmp_path / "elsewhere").exists()

    recorded = launch(V1, 1, "recorded-blob", blob=None)
    node = recorded.wait_state("ready", "serving")
    assert node["state"] in ("ready", "serving")


def test_unreachable_zookeeper_keeps_retrying_and_stops_on_sigterm(launch: Launch) -> None:
    """With no ZooKeeper answering, /healthz is 200, /readyz 503, and SIGTERM exits 0."""
    port = free_port()
    sidecar = launch(
        V1, 1, "lonely", http=f"127.0.0.1:{port}", extra=["--zk", f"127.0.0.1:{free_port()}"]
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:  # the port answers once the interpreter has started; connection errors until then
        try:
            status, _ = http_call("GET", f"{base}/healthz")
            break
        except OSError:
            assert time.monotonic() < deadline, sidecar.log_tail()
            assert sidecar.process.poll() is None, sidecar.log_tail()
            time.sleep(0.1)
    assert status == 200
    status, body = http_call("GET", f"{base}/readyz?verbose")
    assert status == 503 and b"[-]zookeeper failed" in body
    sidecar.signal(signal.SIGTERM)
    assert sidecar.wait_exit() == EXIT_OK
    assert b"zookeeper_unreachable" in sidecar.log_file.read_bytes()


def test_release_file_helper_names_example_history() -> None:
    """The example history holds the two releases these tests run."""
    assert release_file(V1).exists() and release_file(V2).exists()


@pytest.mark.slow
def test_four_processes_of_one_version_agree_and_one_leads(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """Four processes of one (version, generation) started together all reach ready, agree on
    every replacement shard, and exactly one becomes leader after promotion."""

    bootstrap(launch)
    racers = [launch(V2, 2, f"green-{i}") for i in range(4)]
    plans = [racer.wait_state("ready", timeout=60)["plan"] for racer in racers]
    shards = [
        {m["global_id"]: m["shard_id"] for m in plan["migrations"] if m["shard_id"]}
        for plan in plans
    ]
    assert shards[0] and all(s == shards[0] for s in shards)
    consensus = Consensus(zk_client, f"/catalog-upgrade/{zk_env.name}")
    entries = [
        e
        for e in MigrationShard(consensus, BlobStore.from_uri(str(tmp_path / "blob"))).entries()
        if (e.version, e.deploy_generation) == (V2, 2)
    ]
    assert {e.global_id: e.shard_id for e in entries} == shards[0]
    assert len(entries) == len(shards[0]), "no duplicate entries"
    assert (
        cli(
            "promote",
            "--zk",
            zk_env.hosts,
            "--env",
            zk_env.name,
            "--deploy-generation",
            "2",
            "--wait",
            "60",
        ).returncode
        == 0
    )
    states = [json.loads(zk_client.get(r.node_path)[0]) for r in racers]
    assert sorted(s["mode"] for s in states) == ["leader", "read-only", "read-only", "read-only"]


@pytest.mark.slow
def test_paused_leader_steps_down_and_rejoins_after_a_takeover(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv
) -> None:
    """A SIGSTOPped leader whose session expired is replaced; resumed, it writes nothing, gives
    up leadership and re-joins as a follower (refusing appends with 409), and the new leader's
    epoch is the only one accepting appends."""
    first = launch(V1, 1, "blue-a", auto_promote=True, session_timeout=2.0)
    first.wait_state("serving")
    second = launch(V1, 1, "blue-b", session_timeout=2.0)
    second.wait_state("ready")
    first.signal(signal.SIGSTOP)
    node = second.wait_state("serving", timeout=30)
    assert node["epoch"] == 2
    first.signal(signal.SIGCONT)
    node = first.wait_state("ready", timeout=30)
    assert node["mode"] == "read-only", first.log_tail()
    assert first.process.poll() is None
    status, _ = first.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
    assert status == 409
    status, _ = second.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
    assert status == 200
    status, body = second.http("GET", f"/read?collection={TABLES}")
    assert status == 200 and len(json_lines(body)) == len(TABLE_ROWS)


def test_leader_collects_the_orphans_of_a_crashed_read_only_process(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """Shards a read-only process created but never named are finalized by the serving leader
    once older than --orphan-grace; the catalog's shards are untouched."""

    from catalog.blob import BlobStore
    from catalog.consensus import Consensus
    from catalog.migration import MigrationShard

    consensus = Consensus(zk_client, f"/catalog-upgrade/{zk_env.name}")
    leader = launch(V1, 1, "blue-1", auto_promote=True, extra=["--orphan-grace", "1"])
    leader.wait_state("serving")
    created: dict[str, str] = {}
    shard = MigrationShard(consensus, BlobStore.from_uri(str(tmp_path / "blob")))
    shard._create_shards({"u-orphan": pa.schema([pa.field("id", pa.string())])}, created, {}, None)
    (orphan,) = created.values()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = consensus.get(f"shards/{orphan}")
        if found is not None and found.json().get("finalized"):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"orphan {orphan} not finalized\n{leader.log_tail()}")
    catalog = read_catalog(consensus)
    assert catalog is not None and orphan not in catalog[0].shard_ids()
    kinds = [
        json.loads(line).get("event")
        for line in leader.log_file.read_text().splitlines()
        if line.startswith("{")
    ]
    assert "orphan_shards_queued" in kinds


# --- exactly-once appends --------------------------------------------------------------------


@pytest.mark.slow
def test_idempotency_key_survives_compaction_and_a_change_of_leader(
    launch: Launch, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """A client that lost the answer of its append retries with the same Idempotency-Key:
    after a compaction and after another process took over the leadership it gets the first
    answer back (marked replayed) and the rows exist once; the key with another body is 422."""
    first = bootstrap(launch, "blue-a")
    second = launch(V1, 1, "blue-b")
    second.wait_state("ready")
    key = {"Idempotency-Key": "order-7"}
    body = lines(TABLE_ROWS)
    answer = first.sidecar.request("POST", f"/append?collection={TABLES}", body, headers=key)
    assert answer.status == 200, answer.summary()
    original = json.loads(answer.body)
    assert original["replayed"] is False and "Idempotent-Replayed" not in answer.headers

    compacted = cli(
        "compact", "--collection", TABLES, "--blob", str(tmp_path / "blob"),
        "--zk", zk_env.hosts, "--env", zk_env.name,
    )  # fmt: skip
    assert compacted.returncode == EXIT_OK, compacted.stderr
    retried = first.sidecar.request("POST", f"/append?collection={TABLES}", body, headers=key)
    assert retried.status == 200, retried.summary()
    assert json.loads(retried.body) == {**original, "replayed": True}
    assert retried.headers.get("Idempotent-Replayed") == "true"

    first.signal(signal.SIGTERM)
    assert first.wait_exit() == EXIT_OK
    second.wait_state("serving", timeout=10)
    again = second.sidecar.request("POST", f"/append?collection={TABLES}", body, headers=key)
    assert again.status == 200, again.summary()
    assert json.loads(again.body) == {**original, "replayed": True}
    other = second.sidecar.request(
        "POST", f"/append?collection={TABLES}", lines(TABLE_ROWS[:1]), headers=key
    )
    assert other.status == 422 and json.loads(other.body)["error"] == "idempotency-key-reused"
    status, read = second.http("GET", f"/read?collection={TABLES}")
    assert status == 200
    assert sorted(r["name"] for r in json_lines(read)) == ["items", "orders"]


# --- unreadable durable state ----------------------------------------------------------------


@pytest.mark.slow
def test_unreadable_catalog_degrades_the_leader_which_still_steps_down_when_superseded(
    launch: Launch, zk_env: ZkEnv, zk_client: KazooClient
) -> None:
    """A catalog overwritten with ``{not json``: leader and follower leave serving and ready
    (readyz 503 naming the key, the error in their nodes, no appends) but keep running; when
    repaired they return. Superseded while it cannot read the catalog, the leader steps down
    (exit 3), and the follower of the promoted generation takes over once the catalog reads."""
    leader = bootstrap(launch, "blue-a")
    follower = launch(V2, 2, "green-a")
    follower.wait_state("ready")
    catalog_path = f"{zk_env.root}/catalog"
    good, _ = zk_client.get(catalog_path)

    def degraded(node: Mapping[str, Any]) -> bool:
        error = node.get("error")
        return (
            node.get("state") == "checking"
            and node.get("phase") == "durable state unreadable"
            and isinstance(error, dict)
            and error.get("key") == "catalog"
        )

    zk_client.set(catalog_path, b"{not json")
    leader.wait_node(degraded, timeout=15)
    follower.wait_node(degraded, timeout=15)
    status, body = leader.http("GET", "/readyz?verbose")
    assert status == 503 and b"[-]durable-state" in body and b"catalog" in body
    assert leader.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))[0] == 503
    assert leader.process.poll() is None and follower.process.poll() is None

    zk_client.set(catalog_path, good)
    node = leader.wait_state("serving", timeout=15)
    assert node["error"] is None
    follower.wait_state("ready", timeout=15)
    assert leader.http("GET", "/readyz")[0] == 200
    status, body = leader.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
    assert status == 200, body

    zk_client.set(catalog_path, b"{not json")
    leader.wait_node(degraded, timeout=15)
    follower.wait_node(degraded, timeout=15)
    # Promotion of generation 2 (written as `promote` would, which refuses an unreadable catalog).
    zk_client.set(
        f"{zk_env.root}/promotion",
        json.dumps({"deploy_generation": 2, "requested_by": "test", "previous": None}).encode(),
    )
    assert leader.wait_exit(timeout=15) == EXIT_FENCED
    assert follower.process.poll() is None
    zk_client.set(catalog_path, good)
    follower.wait_state("serving", timeout=30)
    status, body = follower.http("GET", f"/read?collection={TABLES}")
    assert status == 200 and len(json_lines(body)) == 2


@pytest.mark.slow
def test_serving_leader_collects_unreferenced_blobs(launch: Launch, tmp_path: Path) -> None:
    """With --gc-grace 1, a blob nobody references (a writer killed between its blob write and
    its CAS) is gone a few seconds later; the collection's rows are all still there."""
    leader = bootstrap(launch, "blue-gc")
    leader.signal(signal.SIGTERM)
    assert leader.wait_exit() == EXIT_OK
    leader = launch(V1, 1, "blue-gc2", auto_promote=True, extra=["--gc-grace", "1"])
    leader.wait_state("serving")
    status, body = leader.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
    assert status == 200, body
    shard_id = json.loads(body)["shard_id"]
    store = BlobStore.from_uri(str(tmp_path / "blob"))
    orphan = f"shards/{shard_id}/{'0' * 32}.parquet"
    store.put_bytes(orphan, b"left by a writer killed before its CAS")
    deadline = time.monotonic() + 20
    while store.exists(orphan) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not store.exists(orphan), leader.log_tail()
    status, body = leader.http("GET", f"/read?collection={TABLES}")
    assert status == 200 and len(json_lines(body)) == 2
    # The counter moves once the sweep returns, just after the delete.
    while time.monotonic() < deadline:
        body = leader.http("GET", "/metrics")[1]
        if b"catalog_upgrade_blobs_collected_total 1.0" in body:
            break
        time.sleep(0.1)
    assert b"catalog_upgrade_blobs_collected_total 1.0" in body


@pytest.mark.slow
def test_serving_leader_compacts_long_batch_lists_and_exports_coverage(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """With --compact-min-batches 3 the leader's sweep compacts a collection that three appends
    left with three batches (fewer than the write path merges: catalog.shard.merges), reads
    unchanged, and /metrics reports its batches by schema."""
    leader = launch(
        V1, 1, "blue-compact", auto_promote=True,
        extra=["--gc-grace", "2", "--compact-min-batches", "3"],
    )  # fmt: skip
    leader.wait_state("serving")
    for i in range(3):
        row = {**TABLE_ROWS[0], "id": f"u{i}", "oid": 20000 + i, "name": f"t{i}"}
        status, body = leader.http("POST", f"/append?collection={TABLES}", lines([row]))
        assert status == 200, body
    shard = Shard(Consensus(zk_client, zk_env.root), BlobStore.from_uri(str(tmp_path / "blob")),
                  json.loads(body)["shard_id"])  # fmt: skip
    deadline = time.monotonic() + 30
    while shard.state().batch_count > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert shard.state().batch_count == 1, leader.log_tail()
    status, body = leader.http("GET", f"/read?collection={TABLES}")
    assert status == 200 and sorted(r["name"] for r in json_lines(body)) == [
        f"t{i}" for i in range(3)
    ]
    series = f'catalog_upgrade_schema_batches{{collection="{TABLES}",schema_id="0"}} 1.0'
    while time.monotonic() < deadline:
        if series.encode() in leader.http("GET", "/metrics")[1]:
            break
        time.sleep(0.2)
    assert series.encode() in leader.http("GET", "/metrics")[1]


@pytest.mark.slow
def test_sustained_small_appends_keep_a_shard_within_its_merge_bound(
    launch: Launch, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """Four clients append one row each in a loop, with the sweep's compaction off: the
    write path merges as batches arrive, so the shard never lists more batches than the
    hard cap (a commit past it is refused, 503 compaction-behind, and retried), settles within
    the policy's bound, and reads every row once. A reader reading all along (served from
    memory while the state is unchanged, from its batches once it moved) never sees a row
    vanish."""
    leader = launch(V1, 1, "blue-merge", auto_promote=True, extra=["--compact-min-batches", "0"])
    leader.wait_state("serving")
    done: list[int] = []
    behind: list[int] = []
    failures: list[tuple[int, bytes]] = []

    def writer(client: int) -> None:
        for i in range(60):
            n = client * 1000 + i
            row = {**TABLE_ROWS[0], "id": f"u{n}", "oid": 20000 + n, "name": f"t{n}"}
            for _attempt in range(50):
                status, body = leader.http("POST", f"/append?collection={TABLES}", lines([row]))
                if status != 503 or json.loads(body)["error"] != "compaction-behind":
                    break
                behind.append(n)  # nothing written: retried, as a client does
                time.sleep(0.2)
            if status == 200:
                done.append(n)
            else:
                failures.append((status, body))

    threads = [threading.Thread(target=writer, args=(c,)) for c in range(4)]
    seen: list[set[str]] = []

    def reader() -> None:
        while any(t.is_alive() for t in threads):
            status, body = leader.http("GET", f"/read?collection={TABLES}")
            assert status == 200, body
            seen.append({r["name"] for r in json_lines(body) if r["name"].startswith("t")})

    for thread in threads:
        thread.start()
    reading = threading.Thread(target=reader)
    reading.start()
    first = None
    most = 0
    while any(t.is_alive() for t in threads):
        catalog = read_catalog(Consensus(zk_client, zk_env.root))
        assert catalog is not None
        ref = catalog[0].by_name()[TABLES]
        shard = Shard(Consensus(zk_client, zk_env.root),
                      BlobStore.from_uri(str(tmp_path / "blob")), ref.shard_id)  # fmt: skip
        first = shard
        most = max(most, shard.state().batch_count)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    reading.join()
    assert not failures, failures[:3]
    assert first is not None and len(done) == 240
    assert len(seen) > 5 and all(a <= b for a, b in itertools.pairwise(seen)), "a row vanished"
    # The hard cap holds by construction; under load a merge may lag past the slow-down.
    assert most <= STOP_BATCHES, most
    deadline = time.monotonic() + 20
    while first.state().batch_count > steady_bound(240) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert first.state().batch_count <= steady_bound(240), leader.log_tail()
    status, body = leader.http("GET", f"/read?collection={TABLES}")
    names = sorted(r["name"] for r in json_lines(body) if r["name"].startswith("t"))
    assert status == 200 and names == sorted(f"t{n}" for n in done)
    metrics = leader.http("GET", "/metrics")[1].decode()
    assert f'catalog_upgrade_merges_total{{collection="{TABLES}"}}' in metrics
    assert f'catalog_upgrade_shard_batches{{collection="{TABLES}"}}' in metrics


# --- authenticated HTTP ----------------------------------------------------------------------


@pytest.mark.slow
def test_token_protects_promote_and_append_of_a_real_sidecar(
    launch: Launch, zk_env: ZkEnv, zk_client: KazooClient, tmp_path: Path
) -> None:
    """Listening on every interface, the sidecar refuses to start without a token (exit 2,
    nothing written); with one, appends and promotions need it, probes do not."""
    port = free_port()
    exposed = launch(V1, 1, "open", auto_promote=True, http=f"0.0.0.0:{port}")
    assert exposed.wait_exit() == EXIT_BAD_INPUT
    assert "--http-token-file" in exposed.log_tail()
    assert zk_client.exists(f"{zk_env.root}/processes/open") is None

    token_file = tmp_path / "token"
    token_file.write_text("local-test-token-0123456789\n")
    leader = SidecarProcess.start(
        zk_client, zk_env.hosts, zk_env.name, V1, 1,
        process_id="guarded", log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True,
        http=f"0.0.0.0:{port}", http_token_file=token_file,
    )  # fmt: skip
    try:
        leader.wait_state("serving")
        url = f"http://127.0.0.1:{port}"
        status, _ = http_call("POST", f"{url}/append?collection={TABLES}", lines(TABLE_ROWS))
        assert status == 401
        assert http_call("GET", f"{url}/readyz")[0] == 200
        # The harness sends the token with every request of a sidecar started with one.
        status, body = leader.http("POST", f"/append?collection={TABLES}", lines(TABLE_ROWS))
        assert status == 200, body
    finally:
        leader.kill()
