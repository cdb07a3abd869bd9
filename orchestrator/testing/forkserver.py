"""A fork server: ``catalog-upgrade`` child processes that start without paying for imports.

A sidecar child spends most of its start importing (about 0.8 CPU-seconds: pyarrow, kazoo,
werkzeug, the catalog). A test run starts some 500 of them on two cores, so the imports alone
cost minutes. The fork server is one helper process per parent: it imports what a sidecar needs
once (:data:`PRELOAD`), then forks a child for each request. The child takes the request's
command line, environment, working directory and standard streams, and runs
``python -m orchestrator.cli`` from there: the same entry point, the same code, a real process
of its own with its own pid, signals and exit code. Only the imports before its ``main`` were
done by its parent.

The parent keeps one connection per child: the server answers the child's pid on it at once and
its exit code when it ends (the server reaps it). :class:`ForkedProcess` reads them and offers the
part of :class:`subprocess.Popen` the harness uses: ``pid``, ``poll``, ``wait``,
``send_signal``, ``kill``, ``terminate``.

What a forked child shares with its siblings: the server's hash seed (the ``random`` module
reseeds itself in a forked child, and ids come from ``os.urandom``). The server starts no thread
of its own; the two that pyarrow's import starts (jemalloc's and Arrow's) have fork handlers.
The server exits when its parent does (its stdin, a pipe from the parent, reaches EOF); the
children it started run on, as children of an exited parent do.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

__all__ = ["PRELOAD", "ForkServer", "ForkedProcess", "fork_server"]

#: The modules a sidecar child imports before it serves: the fork server imports them once.
PRELOAD = ("orchestrator.cli.servers", "orchestrator.sidecar.process", "orchestrator.cli.upgrade")

#: The module every forked child runs as ``__main__`` (``python -m orchestrator.cli``).
ENTRY = "orchestrator.cli"

_HEADER = struct.Struct("!I")
_STREAMS = 3  # stdin, stdout, stderr


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """One request: a length-prefixed JSON body, and the three stream fds sent with it."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, _STREAMS)
    if len(data) < _HEADER.size or len(fds) != _STREAMS:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("a fork request needs a body and three file descriptors")
    (size,) = _HEADER.unpack_from(data)
    body = bytearray(data[_HEADER.size :])
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ConnectionError("the fork request ended early")
        body += more
    return json.loads(bytes(body)), fds


def _send_line(conn: socket.socket, message: Mapping[str, object]) -> None:
    with contextlib.suppress(OSError):  # a parent that went away hears nothing
        conn.sendall(json.dumps(message).encode() + b"\n")


@attrs.define
class _Request:
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    fds: list[int]


def _serve(listener: socket.socket) -> _Request | None:
    """Accept requests and fork a child for each; returns in a child (its request), or None in
    the server once its parent is gone."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the selector
    children: dict[int, socket.socket] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        selector.register(wake_read, selectors.EVENT_READ)
        selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    try:
                        body, fds = _receive(conn)
                    except (OSError, ValueError):
                        conn.close()
                        continue
                    pid = os.fork()
                    if pid == 0:  # the child: leave the server's state behind
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        selector.close()
                        for fd in (listener.fileno(), wake_read, wake_write, conn.fileno()):
                            os.close(fd)
                        for other in children.values():
                            other.close()
                        return _Request(
                            args=[str(a) for a in body["args"]],  # type: ignore[attr-defined]
                            env={str(k): str(v) for k, v in body["env"].items()},  # type: ignore[attr-defined]
                            cwd=None if body.get("cwd") is None else str(body["cwd"]),
                            fds=fds,
                        )
                    for fd in fds:
                        os.close(fd)
                    _send_line(conn, {"pid": pid})
                    children[pid] = conn
                elif key.fileobj == wake_read:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(wake_read, 512):
                            pass
                    _reap(children)
                else:  # stdin: EOF once the parent is gone
                    if not os.read(sys.stdin.fileno(), 512):
                        return None


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            _send_line(conn, {"returncode": os.waitstatus_to_exitcode(status)})
            conn.close()


def _become(request: _Request) -> None:
    """In a forked child: take the request's streams, directory, environment and arguments,
    and run the command as ``python -m orchestrator.cli`` would (its SystemExit ends us)."""
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    if request.cwd is not None:
        os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [ENTRY, *request.args]
    runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)


def main() -> None:
    """The server: ``python -m orchestrator.testing.forkserver FD``, FD a listening socket."""
    listener = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's Ctrl-C is for the parent
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # what the children share stays shared (no reference-count writes by the GC)
    request = _serve(listener)
    if request is not None:
        _become(request)


class ForkedProcess:
    """A child of the fork server, as the harness sees a :class:`subprocess.Popen`."""

    def __init__(self, args: Sequence[str], conn: socket.socket) -> None:
        self.args = list(args)
        self._conn = conn
        self._buffer = b""
        self._lock = threading.Lock()
        self.returncode: int | None = None
        first = self._message(None)
        if first is None or "pid" not in first:
            raise ChildProcessError(f"the fork server did not start {self.args!r}: {first}")
        self.pid = int(first["pid"])

    def _message(self, timeout: float | None) -> dict[str, int] | None:
        """The next line from the server, waiting up to ``timeout`` (None: forever); None if
        none came in time."""
        while b"\n" not in self._buffer:
            self._conn.settimeout(timeout)
            try:
                more = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not more:
                raise ChildProcessError(f"the fork server went away before {self.args[:3]!r} ended")
            self._buffer += more
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, int] = json.loads(line)
        return message

    def _wait(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                message = self._message(timeout)
                if message is not None:
                    self.returncode = int(message["returncode"])
                    self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._wait(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkServer:
    """The client of one fork server, started on first use and ended with its parent."""

    def __init__(self, environment: Mapping[str, str], log_file: Path | None = None) -> None:
        self._environment = dict(environment)
        self._log_file = log_file
        self._address = f"\0catalog-upgrade-fork-{os.getpid()}-{secrets.token_hex(6)}"
        self._server: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The server's pid once it started."""
        return None if self._server is None else self._server.pid

    def _ensure(self) -> None:
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                return
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(self._address)
            listener.listen(64)  # requests wait here while the server imports
            with (
                open(os.devnull, "wb") if self._log_file is None else self._log_file.open("ab")
            ) as out:
                self._server = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(listener.fileno())],
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self._environment,
                    pass_fds=(listener.fileno(),),
                )
            listener.close()

    def spawn(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str | None = None,
        stdout: int,
        stderr: int,
    ) -> ForkedProcess:
        """``python -m orchestrator.cli ARGS`` as a forked child: stdin is /dev/null, stdout
        and stderr the given descriptors."""
        self._ensure()
        body = json.dumps(
            {"args": list(args), "env": dict(env), "cwd": None if cwd is None else str(cwd)}
        ).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._address)
        message = _HEADER.pack(len(body)) + body
        with open(os.devnull, "rb") as stdin:
            sent = socket.send_fds(conn, [message], [stdin.fileno(), stdout, stderr])
        conn.sendall(message[sent:])
        return ForkedProcess([sys.executable, "-m", ENTRY, *args], conn)

    def run(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """``python -m orchestrator.cli ARGS`` to its end, as :func:`subprocess.run` with
        ``capture_output`` would: its exit code and output; TimeoutExpired (the child killed)
        after ``timeout`` seconds."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            child = self.spawn(args, env=env, cwd=cwd, stdout=out_write, stderr=err_write)
        except BaseException:
            for fd in (out_read, err_read):
                os.close(fd)
            raise
        finally:
            for fd in (out_write, err_write):
                os.close(fd)
        output: dict[int, list[bytes]] = {out_read: [], err_read: []}
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in output:
                selector.register(fd, selectors.EVENT_READ)
            try:
                while selector.get_map():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        child.kill()
                        child.wait()
                        raise subprocess.TimeoutExpired(
                            child.args,
                            timeout or 0.0,
                            output=b"".join(output[out_read]),
                            stderr=b"".join(output[err_read]),
                        )
                    for key, _ in selector.select(left):
                        data = os.read(key.fd, 65536)
                        if data:
                            output[key.fd].append(data)
                        else:
                            selector.unregister(key.fd)
            finally:
                for fd in output:
                    os.close(fd)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        code = child.wait(left)
        return subprocess.CompletedProcess(
            child.args, code, b"".join(output[out_read]), b"".join(output[err_read])
        )


_SERVERS: dict[int, ForkServer] = {}


def fork_server(environment: Mapping[str, str]) -> ForkServer:
    """This process's fork server (one per process: a forked pytest worker gets its own)."""
    server = _SERVERS.get(os.getpid())
    if server is None:
        server = _SERVERS[os.getpid()] = ForkServer(environment)
    return server


if __name__ == "__main__":
    main()
