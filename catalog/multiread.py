"""Many znodes read in one request: ZooKeeper's ``multiRead`` (3.6 and later).

kazoo sends each request on its own turn of its connection loop, and a pipelined read of
2,000 znodes costs about 0.3 s of Python on a 2-core machine, whatever the network. One
``multiRead`` carries them all: the server answers with each znode's data and stat, or the
error of that znode alone (a missing one does not fail the others). Like a pipelined read, it is
not a snapshot: readers that need one (a shard's head and body) check what they read.

kazoo has no call for it, so the request is built here from kazoo's own wire records and sent
through the client's request queue, as its own calls are. :class:`MultiReader` falls back to
pipelined reads, once and for good, on a server that does not implement it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.serialization import (
    GetData,
    MultiHeader,
    ZnodeStat,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
)

log = structlog.get_logger(__name__)

#: Znodes per request: requests stay small, and a reply of large values does not hold up the
#: session's other requests for long.
PATHS_PER_REQUEST: Final = 250
#: ZooKeeper's op code of ``multiRead``.
_MULTI_READ: Final = 22
#: The op code of an error result inside a multi reply.
_ERROR: Final = -1

#: One znode as read: its data and stat, or None when it does not exist.
Found = tuple[bytes, ZnodeStat] | None


class _MultiRead(NamedTuple):
    """The wire record of one ``multiRead`` request (kazoo's request protocol: ``type``,
    ``serialize`` and ``deserialize``)."""

    paths: tuple[str, ...]

    type: int = _MULTI_READ

    def serialize(self) -> bytes:
        out = bytearray()
        for path in self.paths:
            out += MultiHeader(GetData.type, False, -1).serialize()
            out += GetData(path, None).serialize()
        return bytes(out + multiheader_struct.pack(-1, True, -1))

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Found | Exception]:
        out: list[Found | Exception] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GetData.type:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                out.append((value or b"", stat))
            elif header.type == _ERROR:
                code = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                error = EXCEPTIONS[code]()
                out.append(None if isinstance(error, NoNodeError) else error)
            else:
                raise ValueError(f"a multiRead reply holds a result of op {header.type}")
            header, offset = MultiHeader.deserialize(data, offset)
        return out


class MultiReader:
    """Reads many znodes of one client in few requests (see the module's story)."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._supported = True

    def read(self, paths: Sequence[str]) -> list[Found]:
        """Each of ``paths`` as read, in order. kazoo's errors propagate (the connection lost,
        no access to one of them)."""
        if self._supported:
            try:
                return self._multi(paths)
            except UnimplementedError:
                self._supported = False
                log.info("zookeeper_multi_read_unsupported", fallback="pipelined reads")
        return self._pipelined(paths)

    def _multi(self, paths: Sequence[str]) -> list[Found]:
        chroot = (self._client.chroot or "").rstrip("/")
        pending = []
        for start in range(0, len(paths), PATHS_PER_REQUEST):
            chunk = tuple(chroot + p for p in paths[start : start + PATHS_PER_REQUEST])
            answer = self._client.handler.async_result()
            self._client._call(_MultiRead(chunk), answer)  # kazoo's own way to send a request
            pending.append(answer)
        out: list[Found] = []
        for answer in pending:
            for result in answer.get():
                if isinstance(result, Exception):
                    raise result
                out.append(result)
        return out

    def _pipelined(self, paths: Sequence[str]) -> list[Found]:
        pending = [self._client.get_async(p) for p in paths]
        out: list[Found] = []
        for answer in pending:
            try:
                out.append(answer.get())
            except NoNodeError:
                out.append(None)
        return out
