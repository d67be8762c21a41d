"""uvicorn's httptools protocol with a deadline and a size cap for each
request's head (request line and headers), which uvicorn itself lacks: a
client that sends a head slowly (slowloris: a byte every few seconds) or
endlessly holds a connection and a file descriptor for as long as it likes.

The standalone service runs uvicorn with it (queueadmin/service.py); a
project can too: ``uvicorn --http queueadmin.http_guard:GuardedHttpTools ...``.

* A head must be complete within QUEUEADMIN_HEADER_TIMEOUT seconds (10) of
  the connection opening or of its first byte (for the next request on a
  kept-alive connection; between requests uvicorn's --timeout-keep-alive
  applies): otherwise 408 and the connection is closed.
* A head larger than MAX_HEAD_BYTES gets 431 and the connection is closed.

Bodies are bounded by size and by a budget (core/bodylimit.py), not in
time: a reverse proxy in front should bound the time a body may take
(docs/operations.md).
"""
from __future__ import annotations

import os

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_SECONDS = float(os.environ.get("QUEUEADMIN_HEADER_TIMEOUT") or 10)
MAX_HEAD_BYTES = 64 * 1024


class GuardedHttpTools(HttpToolsProtocol):
    head_timer = None
    head_bytes = -1  # bytes of the head being read so far; -1 while none is

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_begins()  # a connection that sends nothing at all is timed too

    def connection_lost(self, exc) -> None:
        self._head_ends()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.head_bytes >= 0:
            self.head_bytes += len(data)
        super().data_received(data)
        if self.head_bytes > MAX_HEAD_BYTES:  # that much, and the head is still not complete
            self._head_ends()
            self._refuse(431, "Request Header Fields Too Large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.head_timer is None:
            self._head_begins()

    def on_headers_complete(self) -> None:
        self._head_ends()
        super().on_headers_complete()

    def _head_begins(self) -> None:
        self.head_bytes = 0
        self.head_timer = self.loop.call_later(HEAD_SECONDS, self._too_slow)

    def _head_ends(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.head_bytes = -1

    def _too_slow(self) -> None:
        self.head_timer = None
        self._refuse(408, "Request Timeout")

    def _refuse(self, status: int, reason: str) -> None:
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no answer under way: say why
            self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                                 .encode("ascii"))
        self.transport.close()
