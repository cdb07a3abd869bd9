"""The client imports light: ``import catalog_client`` loads nothing of the server."""

from __future__ import annotations

import subprocess
import sys

#: Top-level packages of the server and its dependencies that an application's client must not
#: carry.
SERVER_SIDE = {
    "catalog", "orchestrator", "kazoo", "werkzeug", "pyspark", "py4j", "structlog", "click",
    "rich", "h11", "prometheus_client", "cryptography", "cattrs",
}  # fmt: skip


def test_importing_the_client_loads_no_server_module() -> None:
    code = "import sys, catalog_client; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = {name.split(".")[0] for name in done.stdout.split()}
    assert "catalog_client" in loaded
    assert not loaded & SERVER_SIDE, sorted(loaded & SERVER_SIDE)
    assert "pyarrow" not in loaded  # loaded on the first Arrow read or append
