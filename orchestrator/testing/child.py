"""A child process of the test tools (a ZooKeeper server, SeaweedFS, a Spark daemon): launched
with its output appended to a log file, stopped politely then forcibly, killed as a crash
would, reaped. The one home of that lifecycle; the servers hold one, and are used alike as
context managers (:class:`ManagedServer`)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["ChildProcess", "ManagedServer"]


class ManagedServer:
    """A test server as a context manager: started on entry, stopped on exit (a failure to
    stop does not hide the block's own error). A server says how it starts and stops."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(Exception):
            self.stop()


class ChildProcess:
    """At most one running process at a time; each launch replaces a process that ended."""

    def __init__(self, log_file: Path) -> None:
        self.log_file = log_file
        self._popen: subprocess.Popen[bytes] | None = None

    def launch(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start ``command``, stdout and stderr appended to the log file, no stdin."""
        assert not self.running, f"{command[0]} runs already"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as out:
            self._popen = subprocess.Popen(
                list(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if env is None else dict(env),
            )

    @property
    def launched(self) -> bool:
        return self._popen is not None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code once it ended (None while it runs or before a launch)."""
        return None if self._popen is None else self._popen.poll()

    @property
    def pid(self) -> int | None:
        return None if self._popen is None else self._popen.pid

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM, then SIGKILL if it does not exit within ``timeout`` seconds; reaped.
        Whether it was running."""
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return False
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
        return True

    def kill(self) -> None:
        """SIGKILL and reap, as a crash would."""
        popen, self._popen = self._popen, None
        if popen is not None and popen.poll() is None:
            popen.kill()
            popen.wait()

    def terminate(self) -> None:
        """SIGTERM without waiting (safe inside a signal handler, unlike :meth:`stop`)."""
        self.send_signal(signal.SIGTERM)

    def send_signal(self, signum: int) -> None:
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signum)

    def wait(self) -> int:
        """Block until it exits; its exit code (0 when none was launched)."""
        return 0 if self._popen is None else self._popen.wait()

    def tail(self, lines: int = 30) -> str:
        """The last lines of its log."""
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
