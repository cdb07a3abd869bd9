"""The alert rules: promtool's own unit tests of them, and a real Prometheus scraping a real
sidecar whose alert fires when the leader is killed. Skipped with the reason where Debian's
`prometheus` package (promtool, prometheus) is not installed."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient

from support.sidecars import SidecarProcess, sidecars
from support.zookeeper import ZkEnv

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package prometheus; .ci/run installs it)")
    return found


def test_promtool_checks_and_unit_tests_the_rules() -> None:
    promtool = tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(DEPLOY / "alerts.yaml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = yaml.safe_load((DEPLOY / "alerts.yaml").read_text())
    count = sum(len(group["rules"]) for group in rules["groups"])
    assert f"SUCCESS: {count} rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", str(DEPLOY / "alerts_test.yaml")],
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    """A function starting a real Prometheus that scrapes ``targets`` every second, with the
    alert rules (their ``for`` durations cut to seconds); its API's base URL."""
    binary = tool("prometheus")
    started: list[subprocess.Popen[bytes]] = []

    def start(targets: list[str]) -> str:
        rules = re.sub(r"for: \d+[mh]", "for: 3s", (DEPLOY / "alerts.yaml").read_text())
        (tmp_path / "alerts.yaml").write_text(rules)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(tmp_path / "alerts.yaml")],
            "scrape_configs": [
                {"job_name": "catalog-upgrade", "static_configs": [{"targets": targets}]}
            ],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config))
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        started.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


def api(base: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"{base}{path}", timeout=5) as answer:
            return json.loads(answer.read())["data"]
    except OSError:
        return None


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:g} s")


def test_a_real_prometheus_fires_no_serving_leader_when_the_leader_is_killed(
    zk_client: KazooClient, zk_env: ZkEnv, tmp_path: Path, prometheus: Any
) -> None:
    with sidecars() as started:
        leader = SidecarProcess.start(
            zk_client, zk_env.hosts, zk_env.name, "0.10.0", 1, process_id="watched",
            log_dir=tmp_path, blob=tmp_path / "blob", auto_promote=True,
            extra=["--metrics-public"],
        )  # fmt: skip
        started.append(leader)
        leader.wait_state("serving")
        base = prometheus([leader.sidecar.http])

        def serving() -> Any:
            found = api(
                base, "/api/v1/query?query=catalog_upgrade_state%7Bstate%3D%22serving%22%7D"
            )
            return found and any(r["value"][1] == "1" for r in found["result"])

        def firing() -> list[dict[str, Any]]:
            found = api(base, "/api/v1/alerts") or {"alerts": []}
            return [
                a
                for a in found["alerts"]
                if a["labels"]["alertname"] == "CatalogUpgradeNoServingLeader"
                and a["state"] == "firing"
            ]

        wait_for("Prometheus scraped the serving leader", serving)
        time.sleep(5)  # past the rule's cut `for`: nothing may fire while the leader serves
        assert firing() == []
        leader.sidecar.kill()
        alert = wait_for("CatalogUpgradeNoServingLeader fired", firing)[0]
        assert alert["annotations"]["runbook"] == "docs/runbooks.md#no-serving-leader"
