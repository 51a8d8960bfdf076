"""A TCP forwarder on 127.0.0.1 to a real server, which a test can cut and restore: the
service behind it sees its database go away (every connection closed, new ones refused) and
come back, as in a restart, without touching the server other tests share."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.servers import free_port


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port`` on a thread of its own.

    ``cut`` closes every forwarded connection and stops listening, so a connect is refused;
    ``starting_up`` closes them too and answers each new one as PostgreSQL does while it
    starts (``FATAL 57P03``); ``restore`` forwards again on the same port.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._starting_up = False

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def cut(self) -> None:
        """Refuse new connections and close every open one (both ends)."""
        self._call(self._cut())

    def starting_up(self) -> None:
        """Close every open connection and answer new ones "the database system is starting
        up", as a restarting PostgreSQL server does."""
        self._call(self._cut())
        self._starting_up = True
        self._call(self._listen())

    def restore(self) -> None:
        """Forward connections again."""
        self._call(self._cut())
        self._starting_up = False
        self._call(self._listen())

    def stop(self) -> None:
        self._call(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _call(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._forward, "127.0.0.1", self.port, reuse_address=True
        )

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # a reset, as when the server's process ends
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._starting_up:
            await _answer_starting_up(reader, writer)
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, upstream_writer))
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )
        self._writers.difference_update((writer, upstream_writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


#: PostgreSQL's SSLRequest code: the first packet of a client that would like TLS.
SSL_REQUEST = 80877103


async def _answer_starting_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read a client's startup packet (after declining TLS) and answer it with the error a
    starting PostgreSQL server sends, then close: PostgreSQL's wire protocol, version 3."""
    with contextlib.suppress(Exception):
        length = int.from_bytes(await reader.readexactly(4), "big")
        body = await reader.readexactly(length - 4)
        if int.from_bytes(body[:4], "big") == SSL_REQUEST:
            writer.write(b"N")
            length = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(length - 4)
        fields = b"".join(
            kind + text + b"\0"
            for kind, text in (
                (b"S", b"FATAL"),
                (b"V", b"FATAL"),
                (b"C", b"57P03"),
                (b"M", b"the database system is starting up"),
            )
        )
        message = fields + b"\0"
        writer.write(b"E" + (len(message) + 4).to_bytes(4, "big") + message)
        await writer.drain()
    writer.close()


@contextmanager
def proxied(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    """A running ``TcpProxy``, stopped on exit."""
    proxy = TcpProxy(target_host, target_port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
