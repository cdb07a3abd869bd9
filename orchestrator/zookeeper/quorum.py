"""Why ZooKeeper does not answer: each server of a connection string asked with ``srvr``.

A client that cannot connect only knows that nothing answered. An operator at 3 a.m. needs to
know whether the servers are down, or up but without a quorum (a member that lost its peers
refuses client sessions and answers ``srvr`` with "not currently serving requests"), or merely
unreachable from here. ``srvr`` is the one four-letter word ZooKeeper allows by default, so the
probe works against production ensembles too; over TLS it is sent on the TLS client port.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import attrs
from kazoo.hosts import collect_hosts

__all__ = ["ServerProbe", "describe_quorum", "four_letter_word", "probe_servers"]

NOT_SERVING = "not currently serving requests"


def four_letter_word(
    host: str, port: int, word: str, timeout: float = 1.0, context: ssl.SSLContext | None = None
) -> str:
    """Send a ZooKeeper four-letter word and return the answer ('' when nothing answers);
    over TLS with ``context``."""
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
            if context is not None:
                sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
            sock.sendall(word.encode())
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


@attrs.frozen
class ServerProbe:
    """What one server answered: ``mode`` (leader, follower, standalone) when it serves,
    ``not-serving`` when it runs without a quorum, ``unreachable``, or ``unknown`` (it answered
    something else, e.g. ``srvr`` is not whitelisted)."""

    host: str
    port: int
    mode: str

    @property
    def serving(self) -> bool:
        return self.mode in ("leader", "follower", "standalone", "observer", "read-only")

    def describe(self) -> str:
        what = {
            "not-serving": "running but not serving (no quorum)",
            "unreachable": "unreachable",
            "unknown": "answered, state unknown",
        }.get(self.mode, f"serving ({self.mode})")
        return f"{self.host}:{self.port} {what}"


def _classify(answer: str) -> str:
    if not answer:
        return "unreachable"
    if NOT_SERVING in answer:
        return "not-serving"
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def probe_servers(
    hosts: str, *, timeout: float = 1.0, context: ssl.SSLContext | None = None
) -> list[ServerProbe]:
    """Every server of ``hosts`` (a kazoo connection string) asked at once; [] when the string
    does not parse (the connection itself reports that)."""
    try:
        servers: Sequence[tuple[str, int]] = collect_hosts(hosts)[0]
    except ValueError:
        return []
    if not servers:
        return []
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        answers = list(
            pool.map(lambda hp: four_letter_word(hp[0], hp[1], "srvr", timeout, context), servers)
        )
    return [ServerProbe(h, p, _classify(a)) for (h, p), a in zip(servers, answers, strict=True)]


def describe_quorum(probes: Sequence[ServerProbe]) -> str:
    """One sentence for an error or a readiness check: whether a quorum is likely, and each
    server's state; '' when nothing was probed."""
    if not probes:
        return ""
    known = [p for p in probes if p.mode != "unknown"]
    serving = sum(p.serving for p in probes)
    if known and serving == 0:
        running = sum(p.mode == "not-serving" for p in probes)
        head = (
            f"no quorum: {running} of {len(probes)} server(s) running, none serving"
            if running
            else f"no server of {len(probes)} is reachable"
        )
    else:
        head = f"{serving} of {len(probes)} server(s) serving"
    return f"{head} ({'; '.join(p.describe() for p in probes)})"
