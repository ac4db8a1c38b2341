"""A loopback HTTP proxy in front of an emulator, whose behaviour comes from a plug-in.

It binds 127.0.0.1 on a free port and takes each request in four steps: receive the body, perhaps
answer without forwarding, forward to the upstream (one connection per request, the body whole),
send the answer back. A :class:`Plugin` hands each request an :class:`Exchange` whose steps pass
the request as it is unless the plug-in changes them: the tests' fault injector
(``tests/fault_proxy.py``) cuts, stalls, corrupts or refuses requests; the bench's network model
(``bench/netmodel.py``) paces the bytes and adds a round trip.

The body is always received whole before forwarding: fake-gcs-server reads each upload's body
under one global lock, so a slow body reaching it would serialise every upload.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol, Self

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class Exchange:
    """One request's way through the proxy; a plug-in overrides the steps it changes."""

    def receive(self, conn: Connection, length: int) -> bytes | None:
        """The request's body, or None when the exchange ends here (nothing is forwarded)."""
        return conn.read(length) if length else b""

    def answer_here(self, body: bytes) -> Answer | None:
        """An answer to send without forwarding, or None to forward."""
        return None

    def outgoing(self, body: bytes) -> bytes:
        """The body forwarded upstream."""
        return body

    def send(self, conn: Connection, answer: Answer) -> None:
        """Sends the upstream's answer back to the client."""
        conn.answer(answer)


class Plugin(Protocol):
    def exchange(self, method: str, url: str) -> Exchange: ...


class LoopbackProxy:
    def __init__(self, upstream: str, plugin: Plugin, *, name: str, timeout: float) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = upstream
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        self.plugin = plugin
        self.name = name
        self.timeout = timeout
        self.requests = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def begin(self, method: str, url: str) -> Exchange:
        with self._lock:
            self.requests += 1
        return self.plugin.exchange(method, url)

    def forward(self, method: str, url: str, headers: dict[str, str], body: bytes) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, url, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return Answer(resp.status, resp.getheaders(), data)
        finally:
            conn.close()

    @contextmanager
    def running(self) -> Iterator[Self]:
        proxy: LoopbackProxy = self

        class Handler(Connection):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.request_queue_size = 256
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name=self.name, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


class Connection(BaseHTTPRequestHandler):
    """One client connection; its methods are what an :class:`Exchange` may do to it."""

    owner: LoopbackProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test or bench reports what matters."""

    def handle(self) -> None:
        # The connection was reset on purpose, or the client went away mid-answer.
        with contextlib.suppress(OSError, ValueError):
            super().handle()

    def _handle(self) -> None:
        proxy = self.owner
        exchange = proxy.begin(self.command, self.path)
        body = exchange.receive(self, int(self.headers.get("Content-Length") or 0))
        if body is None:
            return
        answer = exchange.answer_here(body)
        if answer is not None:
            self.answer(answer)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        answer = proxy.forward(self.command, self.path, headers, exchange.outgoing(body))
        exchange.send(self, answer)

    # HEAD too: S3 clients size an object by it before ranged reads.
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

    def read(self, n: int) -> bytes:
        return self.rfile.read(n)

    def start(self, answer: Answer) -> None:
        """Sends the status line and headers, announcing the whole body's length."""
        self.send_response_only(answer.status)
        for key, value in answer.headers:
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        length = str(len(answer.body))
        if self.command == "HEAD":  # no body follows; the length is the object's
            length = next((v for k, v in answer.headers if k.lower() == "content-length"), "0")
        self.send_header("Content-Length", length)
        self.end_headers()

    def write(self, data: bytes | memoryview) -> None:
        self.wfile.write(data)

    def flush(self) -> None:
        self.wfile.flush()

    def answer(self, answer: Answer) -> None:
        self.start(answer)
        self.write(answer.body)
        self.flush()

    def reset(self) -> None:
        # SO_LINGER with a zero timeout makes close() send a RST: a connection reset by peer.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()
