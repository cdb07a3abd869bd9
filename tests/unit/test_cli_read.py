"""``catalog-upgrade read`` refusals made before anything is read (no ZooKeeper needed)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from catalog.errors import EXIT_BAD_INPUT


def test_an_arrow_stream_is_never_written_to_a_terminal() -> None:
    """``--format arrow --output -`` with standard output on a terminal is bad input (exit 2),
    refused before connecting: binary would garble the terminal."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "--log-level", "WARNING", "read",
             "--collection", "mz_catalog.mz_tables", "--format", "arrow", "--output", "-",
             "--zk", "127.0.0.1:1"],
            stdout=follower, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert b"would write a binary Arrow stream to the terminal" in done.stderr
