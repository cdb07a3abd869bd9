"""The HTTP API fuzzed by Schemathesis against a real sidecar on a real ZooKeeper, from the
OpenAPI description it serves: with the write token, the read token and none. Checks: no 5xx,
every answer conforms to the description, every status is documented, methods not allowed
answer 405 with Allow. A bounded run with a fixed seed; ``FUZZ_EXAMPLES`` runs a longer one.

Promotion and finalization are left out: each is a state transition that ends the fuzzed
leader's reign (tested with real processes in test_sidecar and the scenarios). Appends are not
generated (Schemathesis serializes neither JSON lines nor Arrow streams); their bad inputs have
tests of their own (test_arrow_dataplane, test_security).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from support.sidecars import Launch, tree_digest
from support.zookeeper import ZkEnv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = os.environ.get("FUZZ_EXAMPLES", "25")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def test_the_api_fuzzed_with_each_credential_answers_as_described_and_writes_nothing(
    launch: Launch, zk_env: ZkEnv, zk_client: KazooClient, tmp_path: Path
) -> None:
    tokens = {"write": "fuzz-write-token-0123456789", "read": "fuzz-read-token-0123456789"}
    files = {}
    for name, token in tokens.items():
        files[name] = tmp_path / f"{name}-token"
        files[name].write_text(token + "\n")
        files[name].chmod(0o600)
    leader = launch("0.10.0", 1, "fuzzed", auto_promote=True, http_token_file=files["write"],
                    extra=["--http-read-token-file", str(files["read"])])  # fmt: skip
    leader.wait_state("serving")
    url = f"http://{leader.sidecar.http}/openapi.json"
    before = tree_digest(zk_client, f"{zk_env.root}/shards")
    runs = 0
    for credential in ("write", "read", None):
        headers = ["-H", f"Authorization: Bearer {tokens[credential]}"] if credential else []
        done = subprocess.run(
            [str(SCHEMATHESIS), "run", url, "--checks", "all", "--max-examples", EXAMPLES,
             "--seed", "1", "--no-color", "--workers", "1",
             "--exclude-path", "/promote", "--exclude-path", "/finalize", *headers],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        summary = done.stdout[-3000:]
        assert "failures" not in summary.lower() or " 0 failures" in summary, summary
        assert "Server Unavailable" not in done.stdout, summary
        assert "passed" in summary, summary
        runs += 1
    assert runs == 3
    assert tree_digest(zk_client, f"{zk_env.root}/shards") == before  # nothing was written
    assert leader.http("GET", "/readyz")[0] == 200
