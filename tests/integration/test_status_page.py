"""The live status page in a real headless Chromium, against real sidecars and a real
ZooKeeper: it renders, updates without a reload when a process changes state, and shows a
refusal's rule, field path and suggested fix. Served by ``status --serve`` (no sidecar needed)
and by a sidecar at ``/``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from catalog.errors import EXIT_REFUSED
from support.browser import HeadlessChromium
from support.sidecars import SidecarProcess, cli, sidecars
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "fixtures" / "broken_releases" / "incompatible_evolution"
# Set to a path to keep the page's screenshot (the README's is made this way).
SCREENSHOT = os.environ.get("CATALOG_UPGRADE_PAGE_SCREENSHOT")


@pytest.fixture
def status_server(zk_env: ZkEnv) -> Iterator[str]:
    """``catalog-upgrade status --serve 127.0.0.1:0`` in a subprocess; its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", "status",
         "--serve", "127.0.0.1:0", "--zk", zk_env.hosts, "--env", zk_env.name],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "status page of environment" in line, line
        yield line.split(" on ", 1)[1].split()[0]
    finally:
        process.terminate()
        assert process.wait(timeout=15) == 0


def test_the_page_renders_updates_live_and_explains_a_refusal(
    chromium: str, status_server: str, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """One page load: the leader serving, then a second process appearing and becoming
    ready, then a refused release whose rule, field path and fix the page spells out."""

    def start(process_id: str, version: str, generation: int, **options: object) -> SidecarProcess:
        release = BROKEN / f"v{version.replace('.', '_')}.py"
        process = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, version, generation, process_id=process_id,
            log_dir=tmp_path, blob=tmp_path / "blob", release=str(release),
            **options,  # type: ignore[arg-type]
        )  # fmt: skip
        started.append(process)
        return process

    with sidecars() as started, HeadlessChromium(chromium) as browser:
        leader = start("base-1", "0.1.0", 1, auto_promote=True)
        leader.wait_state("serving")
        browser.open(status_server)
        text = browser.wait_for_text(
            "base-1", "serving", "catalog 0.1.0", "final since generation 1"
        )
        assert "spare-1" not in text
        loaded_at = browser.evaluate("performance.timeOrigin")

        spare = start("spare-1", "0.1.0", 1)
        spare.wait_state("ready")
        browser.wait_for_text("spare-1", "ready")

        refused = start("refused-2", "0.2.0", 2)
        assert refused.wait_exit() == EXIT_REFUSED
        text = browser.wait_for_text("rule", "type-changed", "field path", "oid", "fix")
        assert "refused-2" in text
        assert browser.evaluate("performance.timeOrigin") == loaded_at  # never reloaded
        browser.wait_for_text("Upgrade history", "bootstrapped", timeout=20)
        # The migration entries under their collection's name (the lead says where it stands).
        assert browser.evaluate("document.querySelector('#entries td').textContent") == (
            "mz_catalog.mz_tables"
        )
        assert "0.1.0 → 0.2.0: refused" in browser.text()
        if SCREENSHOT:
            browser.screenshot(Path(SCREENSHOT))

        # The sidecar serves the same page at / (no separate server needed).
        assert leader.sidecar.http is not None
        browser.open(f"http://{leader.sidecar.http}/")
        browser.wait_for_text("base-1", "spare-1", "serving")

        # A later process of generation 2 serves (a redeploy of 0.1.0, promoted): the refused
        # attempt of that generation is over, and leaves the page.
        browser.open(status_server)
        browser.wait_for_text("refused-2")
        later = start("later-2", "0.1.0", 2)
        later.wait_state("ready")
        promoted = cli("promote", "--zk", zk_env.hosts, "--env", zk_env.name,
                       "--deploy-generation", "2", "--wait", "30")  # fmt: skip
        assert promoted.returncode == 0, promoted.stderr
        browser.wait_for_text("later-2", "serving")
        deadline = time.monotonic() + 15
        while "refused-2" in browser.evaluate(
            "document.getElementById('refusals').textContent"
        ) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert "refused-2" not in browser.evaluate(
            "document.getElementById('refusals').textContent"
        )


def test_before_a_token_one_prompt_and_after_it_every_section(
    chromium: str, zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path
) -> None:
    """A sidecar with a token: its page shows the prompt alone (no error banner); once the token
    is given, every section renders at once, coverage and history included."""
    token = tmp_path / "token"
    token.write_text("page-token-0123456789abcdef\n")
    token.chmod(0o600)
    with sidecars() as started, HeadlessChromium(chromium) as browser:
        leader = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, "0.10.0", 1, process_id="guarded",
            log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True, http_token_file=token,
        )  # fmt: skip
        started.append(leader)
        leader.wait_state("serving")
        browser.open(f"http://{leader.sidecar.http}/")
        browser.wait_for_text("needs a token")
        time.sleep(1.5)  # past the next poll, answered 401 too
        assert browser.evaluate("document.getElementById('banner').textContent") == ""
        assert browser.evaluate("document.getElementById('auth').hidden") is False
        given = time.monotonic()
        browser.evaluate(
            "document.getElementById('token').value = 'page-token-0123456789abcdef';"
            "document.getElementById('auth').requestSubmit(); true"
        )
        text = browser.wait_for_text(
            "guarded", "bootstrapped", "old schema", "0.10.0: final", "nothing to do", timeout=10
        )
        rendered = time.monotonic() - given
        assert "loading" not in text and rendered < 3.0, (rendered, text[-600:])
        assert browser.evaluate("document.getElementById('auth').hidden") is True
        print(f"every section rendered {rendered:.2f} s after the token")
