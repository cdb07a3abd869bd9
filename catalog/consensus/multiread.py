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
from typing import Any, Final, NamedTuple

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    MultiHeader,
    ZnodeStat,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
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
    ``serialize`` and ``deserialize``): each op a ``getData`` or a ``getChildren``."""

    paths: tuple[str, ...]
    #: The op of each path (GetData.type when empty: every path's data).
    ops: tuple[int, ...] = ()

    type: int = _MULTI_READ

    def serialize(self) -> bytes:
        out = bytearray()
        ops = self.ops or (GetData.type,) * len(self.paths)
        for op, path in zip(ops, self.paths, strict=True):
            out += MultiHeader(op, False, -1).serialize()
            out += (GetData if op == GetData.type else GetChildren)(path, None).serialize()
        return bytes(out + multiheader_struct.pack(-1, True, -1))

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Found | list[str] | Exception]:
        out: list[Found | list[str] | Exception] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GetData.type:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                out.append((value or b"", stat))
            elif header.type == GetChildren.type:
                count = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(data, offset)
                    children.append(child)
                out.append(children)
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
                self.unsupported()
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
                assert not isinstance(result, list)
                out.append(result)
        return out

    def batch(self) -> ReadBatch:
        """A :class:`ReadBatch` of this client."""
        return ReadBatch(self)

    def send(self, queued: Sequence[Slot]) -> None:
        """Send a batch's reads, each slot told which request carries it (:class:`ReadBatch`)."""
        if not self._supported:
            for slot in queued:
                slot.sent(self.pipelined(slot.op, slot.path))
            return
        chroot = (self._client.chroot or "").rstrip("/")
        for start in range(0, len(queued), PATHS_PER_REQUEST):
            chunk = queued[start : start + PATHS_PER_REQUEST]
            answer = self._client.handler.async_result()
            paths = tuple(chroot + slot.path for slot in chunk)
            self._client._call(_MultiRead(paths, tuple(s.op for s in chunk)), answer)
            for index, slot in enumerate(chunk):
                slot.sent(answer, index)

    def pipelined(self, op: int, path: str) -> Any:
        """kazoo's own asynchronous read of ``path`` (its data, or its children)."""
        if op == GetData.type:
            return self._client.get_async(path)
        return self._client.get_children_async(path)

    def unsupported(self) -> None:
        """The server has no ``multiRead``: pipelined reads from now on."""
        if self._supported:
            self._supported = False
            log.info("zookeeper_multi_read_unsupported", fallback="pipelined reads")

    def _pipelined(self, paths: Sequence[str]) -> list[Found]:
        pending = [self._client.get_async(p) for p in paths]
        out: list[Found] = []
        for answer in pending:
            try:
                out.append(answer.get())
            except NoNodeError:
                out.append(None)
        return out


class Slot:
    """One read of a :class:`ReadBatch`, answered as kazoo's ``AsyncResult`` is: ``get`` gives
    the data and stat (or the children) or raises the read's error (NoNodeError for a znode
    that does not exist)."""

    def __init__(self, batch: ReadBatch, op: int, path: str) -> None:
        self._batch = batch
        self.op, self.path = op, path
        self._answer: Any = None
        self._index = -1

    def sent(self, answer: Any, index: int = -1) -> None:
        """The request that carries this read: result ``index`` of a ``multiRead``'s
        ``answer``, or (-1) kazoo's own answer to a pipelined call."""
        self._answer, self._index = answer, index

    def get(self, timeout: float | None = None) -> Any:
        if self._answer is None:
            self._batch.flush()
        assert self._answer is not None
        if self._index < 0:
            return self._answer.get(timeout=timeout)
        try:
            found = self._answer.get(timeout=timeout)
        except UnimplementedError:  # a server before 3.6: read this one on its own
            self._batch.reader.unsupported()
            self.sent(self._batch.reader.pipelined(self.op, self.path))
            return self._answer.get(timeout=timeout)
        result = found[self._index]
        if result is None:
            raise NoNodeError()
        if isinstance(result, Exception):
            raise result
        return result


class ReadBatch:
    """Reads queued as kazoo's async calls are (``get_async``, ``get_children_async``) and sent
    together, in ``multiRead`` requests of :data:`PATHS_PER_REQUEST`, when the first of them is
    wanted: a survey of ten thousand environments costs a few hundred requests, not seventy
    thousand. Each read keeps its own answer or error. On a server without ``multiRead`` it
    falls back to kazoo's pipelined calls (:class:`MultiReader`'s rule)."""

    def __init__(self, reader: MultiReader) -> None:
        self.reader = reader
        self._queued: list[Slot] = []

    def get_async(self, path: str) -> Slot:
        return self._queue(GetData.type, path)

    def get_children_async(self, path: str) -> Slot:
        return self._queue(GetChildren.type, path)

    def _queue(self, op: int, path: str) -> Slot:
        slot = Slot(self, op, path)
        self._queued.append(slot)
        return slot

    def flush(self) -> None:
        """Send every read queued so far."""
        queued, self._queued = self._queued, []
        if queued:
            self.reader.send(queued)
