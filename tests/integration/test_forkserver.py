"""The fork server starts ``catalog-upgrade`` children that behave as ``python -m
orchestrator.cli`` children do: the same output and exit code for the same arguments,
environment and directory; real processes that signals stop; and it ends with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.testing.forkserver import ForkServer
from orchestrator.testing.harness import child_environment

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> ForkServer:
    return ForkServer(child_environment())


def direct(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True, env=env, cwd=cwd, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        # A relative path: found from the request's directory.
        (["validate", "--releases", "releases"], {}),
        # A bad value in the request's environment (not the server's): exit 2, named.
        (["status", "--zk", "127.0.0.1:1", "--env", "e"], {"CATALOG_UPGRADE_CONNECT_TIMEOUT": "x"}),
        # Click's own usage error: exit 2 on stderr.
        (["promote", "--no-such-option"], {}),
    ],
)
def test_a_forked_command_answers_what_a_started_one_answers(
    server: ForkServer, args: list[str], extra: dict[str, str]
) -> None:
    env = {**child_environment(), "COLUMNS": "100", **extra}
    cwd = ROOT / "scenarios"
    expected = direct(args, env, cwd)
    forked = server.run(args, env=env, cwd=cwd, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        expected.returncode, expected.stdout, expected.stderr,
    ), f"forked: {forked}\nstarted: {expected}"  # fmt: skip
    if extra:
        assert forked.returncode == 2 and b"CATALOG_UPGRADE_CONNECT_TIMEOUT" in forked.stderr


def test_a_forked_child_is_a_process_that_signals_stop(server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "sidecar.log"
    env = {**child_environment(), "CATALOG_UPGRADE_CONNECT_TIMEOUT": "300"}
    args = ["sidecar", "--zk", "127.0.0.1:1", "--env", "e", "--release",
            str(ROOT / "scenarios" / "releases" / "v0_10_0.py"), "--deploy-generation", "1",
            "--http", "127.0.0.1:0"]  # fmt: skip
    with log.open("ab") as out:
        child = server.spawn(args, env=env, stdout=out.fileno(), stderr=out.fileno())
    assert child.pid != os.getpid() and child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.3)
    assert Path(f"/proc/{child.pid}/cmdline").exists()
    child.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while _state(child.pid) != "T":  # stopped: still running as far as poll knows
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert child.poll() is None
    child.kill()
    assert child.wait(10) == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL
    child.kill()  # an ended child: nothing to signal, no error


def test_the_server_ends_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from orchestrator.testing.forkserver import ForkServer
        from orchestrator.testing.harness import child_environment
        server = ForkServer(child_environment())
        done = server.run(["--version"], env=child_environment(), timeout=60)
        print(server.pid, done.returncode, flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env=child_environment(), cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid, code = (int(word) for word in done.stdout.split())
    assert code == 0
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
        assert time.monotonic() < deadline, f"fork server {pid} outlived its parent"
        time.sleep(0.05)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
