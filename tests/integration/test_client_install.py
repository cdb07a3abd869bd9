"""The client as an application installs it: its own wheel (``client/``), built here, whose only
requirement is pyarrow, installed into a virtual environment that has nothing else. From
there it appends and reads against a real sidecar."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pyarrow
import pytest

from support.sidecars import Launch

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
TABLES = "mz_catalog.mz_tables"


def _site_packages(prefix: Path) -> Path:
    return next((prefix / "lib").glob("python3*/site-packages"))


def test_the_client_installed_alone_appends_and_reads(launch: Launch, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--wheel-dir", str(wheels), str(ROOT / "client")],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("catalog_upgrade_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    requires = [
        line.split(":", 1)[1].strip()
        for line in metadata.decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    assert requires == ["pyarrow>=15"], requires
    assert all(n.startswith(("catalog_client/", "catalog_upgrade_client-")) for n in names), names

    # An application's environment: the wheel, and pyarrow (linked from this environment rather
    # than downloaded); no kazoo, no werkzeug, no Spark to import even by mistake.
    app = tmp_path / "app"
    venv.create(app, with_pip=False)
    python = app / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    ours = Path(pyarrow.__file__).parent.parent
    for name in ("pyarrow", *(p.name for p in ours.glob("pyarrow-*.dist-info"))):
        (_site_packages(app) / name).symlink_to(ours / name)

    sidecar = launch("0.10.0", 1, "blue", auto_promote=True)
    sidecar.wait_state("serving")
    script = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        from catalog_client import SidecarClient
        client = SidecarClient(sys.argv[1])
        rows = [{"id": "u1", "oid": 20001, "schema_id": "u3", "name": "orders", "owner_id": "u1"}]
        first = client.append("mz_catalog.mz_tables", rows, key="app-1")
        again = client.append("mz_catalog.mz_tables", rows, key="app-1")
        assert (first.replayed, again.replayed, again.ts) == (False, True, first.ts)
        table = client.read("mz_catalog.mz_tables")
        assert table.column("name").to_pylist() == ["orders"], table
        for server in ("kazoo", "werkzeug", "pyspark", "orchestrator", "catalog"):
            try:
                __import__(server)
            except ImportError:
                continue
            raise SystemExit(f"{server} is importable in the application's environment")
        print("ok", first.rows, table.num_rows)
        """
    )
    host, _, port = sidecar.sidecar.http.rpartition(":")
    done = subprocess.run(
        [str(python), "-I", "-c", script, f"http://{host}:{port}"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "1", "1"], done.stdout
