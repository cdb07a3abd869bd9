"""``catalog-upgrade fleet`` against two real ZooKeeper servers (and one that does not answer),
with real sidecars for the environments that have processes.

Ensemble ``a``:
    serving      0.10.0 led by a real sidecar: ok
    green        0.10.0 led by a sidecar, 0.11.0 read-only and ready beside it: green-waiting
    pending      upgraded by real sidecars to 0.11.0, not finalized: pending
    no-leader    bootstrapped in process, its leader gone: no-leader
    refused      0.11.0, then a 0.10.0 sidecar at generation 2 that refuses (a downgrade): failed
    corrupt      a catalog node that is not JSON: unreadable
    empty        the environment's node and nothing else: empty
Ensemble ``b`` (its reads need a credential): two upgrades pending in process, one of them
secured so that the fleet's reader may read it and not finalize it.
Ensemble ``c``: a port nothing listens on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from kazoo.client import KazooClient

from catalog.blob import BlobStore
from catalog.consensus import Consensus, env_root
from catalog.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_UNEXPECTED
from catalog.release import Release, load_release_dir
from catalog_client import SidecarClient
from orchestrator.election import promote
from orchestrator.testing import harness
from orchestrator.testing.zkserver import EmbeddedZooKeeper, free_port
from orchestrator.zookeeper.credentials import Credential, ZkAuth, secure_tree
from support.browser import HeadlessChromium
from support.migrations import Env, bootstrap, upgrade
from support.sidecars import RELEASES, cli, release_file
from support.zookeeper import kazoo_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCREENSHOT = os.environ.get("CATALOG_UPGRADE_FLEET_SCREENSHOT")


@attrs.frozen
class Fleet:
    a: str
    b: str
    c: str
    file: Path
    sidecars: dict[str, harness.SidecarProcess]
    workdir: Path


def _client(hosts: str, auth: ZkAuth | None = None) -> KazooClient:
    extra: dict[str, Any] = {} if auth is None else {"auth_data": auth.auth_data()}
    client = kazoo_client(hosts, **extra)
    client.start(timeout=15)
    return client


def _env(client: KazooClient, name: str, blob: Path) -> Env:
    return Env(client, env_root(name), BlobStore.from_uri(str(blob / name)))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("fleet")
    releases: dict[str, Release] = {str(r.version): r for r in load_release_dir(RELEASES)}
    sidecars: dict[str, harness.SidecarProcess] = {}
    with (
        EmbeddedZooKeeper(data_dir=work / "zk-a") as zk_a,
        EmbeddedZooKeeper(data_dir=work / "zk-b") as zk_b,
    ):
        a = _client(zk_a.hosts)
        b = _client(zk_b.hosts)
        envs: list[Env] = []
        try:

            def start(env: str, version: str, gen: int, **options: Any) -> harness.SidecarProcess:
                name = f"{env}-g{gen}"
                sidecar = harness.SidecarProcess.start(
                    zk=zk_a.hosts,
                    env=env,
                    name=name,
                    version=version,
                    release_file=release_file(version),
                    deploy_generation=gen,
                    log_path=work / f"{name}.log",
                    blob=work / "blob" / env,
                    cwd=work,
                    **options,
                )
                sidecars[name] = sidecar
                return sidecar

            serving = start("serving", "0.10.0", 1, auto_promote=True)
            green_old = start("green", "0.10.0", 1, auto_promote=True)
            pending_old = start("pending", "0.10.0", 1, auto_promote=True)
            for sidecar in (serving, green_old, pending_old):
                sidecar.wait_state(a, "serving", timeout=90)
            green_new = start("green", "0.11.0", 2)
            pending_new = start("pending", "0.11.0", 2, finalize_after="never")
            green_new.wait_state(a, "ready", timeout=90)
            pending_new.wait_state(a, "ready", timeout=90)
            promote(Consensus(a, env_root("pending")), 2, requested_by="ops@test")
            pending_new.wait_state(a, "serving", timeout=90)
            pending_old.wait_exit(30)

            lost = _env(a, "no-leader", work / "blob")
            envs.append(lost)
            bootstrap(lost, releases["0.10.0"])
            lost.close()
            refused = _env(a, "refused", work / "blob")
            envs.append(refused)
            bootstrap(refused, releases["0.11.0"])
            refused.close()
            late = start("refused", "0.10.0", 2)
            assert late.wait_exit(60) == EXIT_REFUSED
            a.create(f"{env_root('corrupt')}/catalog", b"not json", makepath=True)
            a.create(env_root("empty"), b"", makepath=True)

            for name in ("open", "secured"):
                env = _env(b, f"b-{name}", work / "blob-b")
                envs.append(env)
                bootstrap(env, releases["0.10.0"])
                upgrade(env, releases["0.11.0"], 2, finalize_after=None)
                env.close()
            owner, reader = Credential("owner", "owner-pw"), Credential("reader", "reader-pw")
            secure_tree(b, env_root("b-secured"), ZkAuth(owner, reader).acl())
            (work / "reader").write_text("reader:reader-pw\n")

            c = f"127.0.0.1:{free_port()}"
            file = work / "fleet.toml"
            file.write_text(
                f'[[ensemble]]\nname = "a"\nzk = "{zk_a.hosts}"\n\n'
                f'[[ensemble]]\nname = "b"\nzk = "{zk_b.hosts}"\n'
                f'read_auth = "file:{work / "reader"}"\n\n'
                f'[[ensemble]]\nname = "c"\nzk = "{c}"\n'
            )
            yield Fleet(zk_a.hosts, zk_b.hosts, c, file, sidecars, work)
        finally:
            for sidecar in sidecars.values():
                sidecar.kill()
            a.stop()
            b.stop()


def run(fleet: Fleet, *args: str) -> Any:
    return cli("fleet", "--fleet-file", str(fleet.file), "--timeout", "3", *args, timeout=120)


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{e['ensemble']}/{e['environment'] or '*'}": e for e in document["environments"]}


def test_every_state_in_json(fleet: Fleet) -> None:
    done = run(fleet, "--json")
    assert done.returncode == EXIT_UNEXPECTED, (
        done.stderr
    )  # c did not answer, corrupt is unreadable
    document = json.loads(done.stdout)
    rows = by_name(document)
    states = {name: row["state"] for name, row in rows.items()}
    assert states == {
        "a/serving": "ok",
        "a/green": "green-waiting",
        "a/pending": "pending",
        "a/no-leader": "no-leader",
        "a/refused": "failed",
        "a/corrupt": "unreadable",
        "a/empty": "empty",
        "b/b-open": "no-leader",
        "b/b-secured": "no-leader",
        "c/*": "unreachable",
    }
    assert rows["a/serving"]["version"] == "0.10.0" and rows["a/serving"]["stuck"] == []
    assert rows["a/serving"]["leader"]["state"] == "serving"
    green = rows["a/green"]["green"]
    assert [(g["deploy_generation"], g["version"], g["promoted"]) for g in green] == [
        (2, "0.11.0", False)
    ]
    assert green[0]["states"] == ["ready"]
    pending = rows["a/pending"]
    assert pending["version"] == "0.11.0" and pending["deploy_generation"] == 2
    assert pending["finalization"]["state"] == "pending"
    assert pending["finalization"]["from_version"] == "0.10.0"
    assert pending["pending_seconds"] is not None and pending["overdue"] is False
    assert "no serving leader" in rows["a/no-leader"]["stuck"][0]
    assert any("g2 0.10.0 refused" in f for f in rows["a/refused"]["failed"])
    assert "catalog" in rows["a/corrupt"]["errors"][0]
    assert rows["b/b-secured"]["finalization"]["state"] == "pending"  # read with read_auth
    assert "did not answer" in rows["c/*"]["error"]
    summary = document["summary"]
    assert summary["environments"] == 9
    assert summary["by_version"] == {"-": 2, "0.10.0": 3, "0.11.0": 4}
    assert summary["pending"] == 3 and summary["unreachable_ensembles"] == 1
    assert [e["error"] is not None for e in document["ensembles"]] == [False, False, True]


def test_filters(fleet: Fleet) -> None:
    def names(*args: str) -> set[str]:
        done = run(fleet, "--json", *args)
        return set(by_name(json.loads(done.stdout)))

    always = {"a/corrupt", "c/*"}  # unreadable and unreachable rows are never filtered out
    assert names("--pending") == always | {"a/pending", "b/b-open", "b/b-secured"}
    assert names("--version", "0.10.0") == always | {"a/serving", "a/green", "a/no-leader"}
    assert names("--env", "b-*") == always | {"b/b-open", "b/b-secured"}
    assert names("--stuck") == always | {"a/no-leader", "a/refused", "b/b-open", "b/b-secured"}
    # The green generation has waited seconds: stuck only once the threshold is that short.
    assert "a/green" in names("--stuck", "--unpromoted-after", "1s")


def test_text_reads_at_80_columns(fleet: Fleet) -> None:
    done = cli("fleet", "--fleet-file", str(fleet.file), "--timeout", "3", env={"COLUMNS": "80"})
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    # A table (not one block per environment): a header row and a row an environment.
    header = next(line for line in lines if line.startswith("┃"))
    assert "environment" in header and "state" in header and "notes" in header, header
    assert sum(1 for line in lines if line.startswith("│ a/")) >= 6, done.stdout
    for needle in ("serving", "green-waiting", "pending", "no-leader", "unreachable", "empty",
                   "by version: - 2, 0.10.0 3, 0.11.0 4", "0.11.0"):  # fmt: skip
        assert needle in done.stdout, needle
    assert "servin " not in done.stdout and "0.10. " not in done.stdout


def test_bad_fleet_files_are_refused(fleet: Fleet, tmp_path: Path) -> None:
    for text, named in (
        ("[[ensemble]]\nname = 'x'\n", "no zk"),
        ("[[ensemble]]\nzk = 'h:1'\nport = 3\n", "unknown key 'port'"),
        ("[thresholds]\nunpromoted_after = 'soon'\n[[ensemble]]\nzk = 'h:1'\n", "soon"),
        ("[[ensemble]]\nzk = 'h:1'\nname='x'\n[[ensemble]]\nzk = 'h:2'\nname='x'\n", "twice"),
        ("not toml [", "not TOML"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        done = cli("fleet", "--fleet-file", str(bad))
        assert done.returncode == 2 and named in done.stderr, (text, done.stderr)


@pytest.fixture(scope="module")
def served(fleet: Fleet) -> Iterator[tuple[str, str]]:
    """``fleet --serve`` with a token: its address and the token."""
    (fleet.workdir / "token").write_text("fleet-secret-token-0123\n")
    port = free_port()
    log = (fleet.workdir / "fleet-serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "fleet", "--fleet-file", str(fleet.file),
         "--timeout", "3", "--serve", f"127.0.0.1:{port}",
         "--http-token-file", str(fleet.workdir / "token")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        probe = SidecarClient(f"http://{address}", timeout=5)
        deadline = time.monotonic() + 60
        while probe.send("GET", "/healthz").status != 200:
            assert server.poll() is None, (fleet.workdir / "fleet-serve.log").read_text()
            assert time.monotonic() < deadline, "fleet --serve did not answer"
            time.sleep(0.2)
        yield address, "fleet-secret-token-0123"
    finally:
        server.terminate()
        assert server.wait(30) == EXIT_OK
        log.close()


def test_served_document_and_metrics_need_the_token(served: tuple[str, str]) -> None:
    address, token = served
    anonymous = SidecarClient(f"http://{address}", timeout=30)
    assert anonymous.send("GET", "/status").status == 401
    assert anonymous.send("GET", "/").status == 200  # the page asks for the token itself
    assert anonymous.send("POST", "/finalize", b"").status in (401, 403)
    client = SidecarClient(f"http://{address}", token=token, timeout=30)
    document = client.status()
    assert document["summary"]["environments"] == 9
    metrics = client.metrics()
    for line in (
        'catalog_upgrade_fleet_environments{state="ok"} 1.0',
        'catalog_upgrade_fleet_environments{state="pending"} 1.0',
        'catalog_upgrade_fleet_environments{state="no-leader"} 3.0',
        'catalog_upgrade_fleet_environments{state="finalizing"} 0.0',
        'catalog_upgrade_fleet_environments_by_version{version="0.11.0"} 4.0',
        "catalog_upgrade_fleet_versions_live 2.0",
        'catalog_upgrade_fleet_ensemble_up{ensemble="c"} 0.0',
        'catalog_upgrade_fleet_ensemble_up{ensemble="a"} 1.0',
    ):
        assert line in metrics, line
    assert "catalog_upgrade_fleet_oldest_pending_finalization_seconds" in metrics


def test_page_in_chromium(served: tuple[str, str], chromium: str) -> None:
    address, token = served
    with HeadlessChromium(chromium) as browser:
        browser.open(f"http://{address}/")
        browser.wait_for_text("needs a token")
        time.sleep(2.5)  # past the next poll, answered 401 too: still the prompt alone
        assert browser.evaluate("document.getElementById('banner').textContent") == ""
        browser.evaluate(
            f"document.getElementById('token').value = {json.dumps(token)};"
            "document.getElementById('auth').requestSubmit(); true"
        )
        text = browser.wait_for_text("a/serving", "green-waiting", "9 environments", "unreachable")
        for needle in ("a/pending", "b/b-secured", "no-leader", "0.11.0", "by state"):
            assert needle in text, needle
        rows = "document.querySelectorAll('#fleet tbody tr').length"
        assert browser.evaluate(rows) == 10
        link = "document.querySelector('tr[data-environment=\"a/serving\"] a').href"
        assert browser.evaluate(link).startswith("http://127.0.0.1:")  # its sidecar's page
        browser.evaluate(
            "const s = document.getElementById('state'); s.value = 'pending';"
            "s.dispatchEvent(new Event('input')); true"
        )
        assert browser.evaluate(rows) == 1
        browser.evaluate(
            "const t = document.getElementById('state'); t.value = '';"
            "t.dispatchEvent(new Event('input'));"
            "document.querySelectorAll('#fleet th')[1].click(); true"
        )
        first = "document.querySelector('#fleet tbody tr').dataset.environment"
        assert browser.evaluate(first) in ("a/corrupt", "a/empty", "c/*")  # no version first
        if SCREENSHOT:
            browser.screenshot(Path(SCREENSHOT))


def test_watch_prints_a_document_per_change(fleet: Fleet) -> None:
    watch = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", "fleet",
         "--fleet-file", str(fleet.file), "--timeout", "3", "--watch", "--json",
         "--interval", "1", "--env", "empty"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    client = _client(fleet.a)
    node = f"{env_root('empty')}/catalog"
    try:
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())
        assert set(by_name(first)) == {"a/corrupt", "a/empty", "c/*"}
        assert by_name(first)["a/empty"]["state"] == "empty"
        client.create(node, b"written by hand")  # a change: a new document says so
        deadline = time.monotonic() + 60
        while True:
            line = watch.stdout.readline()
            assert line, watch.stderr.read() if watch.stderr else "watch ended"
            if by_name(json.loads(line))["a/empty"]["state"] == "unreadable":
                break
            assert time.monotonic() < deadline, "no document saw the change"
    finally:
        watch.terminate()
        watch.wait(30)
        if client.exists(node):
            client.delete(node)
        client.stop()


def test_finalize_dry_run_then_yes_with_one_refusal(fleet: Fleet) -> None:
    """Last of the module's tests that read the shared fleet (pytest keeps the file's order):
    it finalizes some of its environments."""
    dry = run(fleet, "finalize", "--version", "0.11.0", "--json")
    assert dry.returncode == EXIT_OK, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] is True
    assert {(t["ensemble"], t["environment"]) for t in planned["targets"]} == {
        ("a", "pending"), ("b", "b-open"), ("b", "b-secured")
    }  # fmt: skip
    assert planned["unreachable_ensembles"] == ["c"]
    again = run(fleet, "--json", "--pending")
    listed = json.loads(again.stdout)["environments"]
    # Exactly the pending ones, and the rows that could not be read (the filter always shows
    # those: they may hide a pending upgrade), nothing else.
    readable = [e for e in listed if not (e["error"] or e["errors"])]
    assert {(e["ensemble"], e["environment"]) for e in readable} == {
        ("a", "pending"), ("b", "b-open"), ("b", "b-secured")
    }, listed  # fmt: skip
    assert {e["finalization"]["state"] for e in readable} == {"pending"}, readable
    # A version no environment names is a typo, not "0 of 0 finalized": exit 2, nothing done.
    typo = run(fleet, "finalize", "--version", "0.11.9", "--yes", "--requested-by", "ops@test")
    assert typo.returncode == EXIT_BAD_INPUT, typo.stdout + typo.stderr
    assert "names version 0.11.9" in typo.stderr and "0.11.0" in typo.stderr, typo.stderr
    assert "did not answer: c" in typo.stderr and typo.stdout == "", typo.stderr
    older = run(fleet, "finalize", "--version", "0.11.0", "--older-than", "1d", "--json")
    assert json.loads(older.stdout)["targets"] == []
    text = run(fleet, "finalize", "--version", "0.11.0", "--env", "b-*")
    assert "would finalize 2 environment(s)" in text.stdout and "add --yes" in text.stdout

    done = run(fleet, "finalize", "--version", "0.11.0", "--yes", "--requested-by", "ops@test",
               "--json")  # fmt: skip
    assert done.returncode == EXIT_UNEXPECTED, done.stderr  # one refused, c unreachable
    outcomes = {o["environment"]: o for o in json.loads(done.stdout)["outcomes"]}
    assert outcomes["pending"]["outcome"] == "finalized"
    assert outcomes["b-open"]["outcome"] == "finalized"
    assert outcomes["b-secured"]["outcome"] == "failed"
    assert "refused access" in outcomes["b-secured"]["error"]
    # The serving leader completes its finalization; the decision in b-open waits for one.
    deadline = time.monotonic() + 60
    while True:
        rows = by_name(json.loads(run(fleet, "--json").stdout))
        if rows["a/pending"]["finalization"]["state"] == "final" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rows["a/pending"]["state"] == "ok"
    assert rows["b/b-open"]["finalization"]["state"] == "finalizing"
    assert rows["b/b-secured"]["finalization"]["state"] == "pending"
    # Nothing was asked twice: a second run finds b-open decided already.
    second = run(fleet, "finalize", "--version", "0.11.0", "--yes", "--env", "b-open", "--json")
    assert json.loads(second.stdout)["outcomes"] == []
