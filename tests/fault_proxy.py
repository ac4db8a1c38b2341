"""A loopback HTTP proxy in front of fake-gcs-server that injects faults, for the storage tests.

It binds 127.0.0.1 on a free port, reads each request whole, and then either forwards it to the
emulator (one upstream connection per request) or answers with a fault. A :class:`Rule` picks the
requests it applies to (method and a substring of the URL), how many times it fires (or with what
probability), and the fault:

- ``status``: answer 503 or 429 without forwarding;
- ``reset_request``: read half the request body, then reset the connection (an upload cut);
- ``reset_response``: forward, send the answer's headers and half its body, then reset;
- ``stall_response``: forward, send headers and half the body, then say nothing for ``seconds``;
- ``corrupt_request``: flip one byte in the middle of the body, then forward it.

Every fault fired is recorded in :attr:`FaultProxy.fired`, so a test can check that it happened.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


@dataclass
class Rule:
    fault: str
    method: str | None = None
    url_contains: str = ""
    url_excludes: str = ""
    times: int | None = 1  # None: every matching request (subject to probability)
    probability: float = 1.0
    seconds: float = 0.0
    statuses: tuple[int, ...] = (503, 429)
    fired: int = 0

    def matches(self, method: str, url: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.url_contains not in url:
            return False
        return not (self.url_excludes and self.url_excludes in url)


@dataclass
class FaultProxy:
    upstream: str  # http://127.0.0.1:port of the emulator
    rules: list[Rule] = field(default_factory=list)
    seed: int = 0
    fired: list[tuple[str, str, str]] = field(default_factory=list)
    requests: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        parsed = urllib.parse.urlsplit(self.upstream)
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or 80
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def pick(self, method: str, url: str) -> Rule | None:
        with self._lock:
            self.requests += 1
            for rule in self.rules:
                if not rule.matches(method, url):
                    continue
                if rule.times is not None and rule.fired >= rule.times:
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                rule.fired += 1
                self.fired.append((rule.fault, method, url))
                return rule
        return None

    def status_for(self, rule: Rule) -> int:
        with self._lock:
            return self._rng.choice(rule.statuses)

    def forward(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=120)
        try:
            conn.request(method, url, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    @contextmanager
    def running(self) -> Iterator[FaultProxy]:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reports what matters."""

    def handle(self) -> None:
        # The connection was reset on purpose, or the client went away.
        with contextlib.suppress(OSError, ValueError):
            super().handle()

    def _handle(self) -> None:
        proxy = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        rule = proxy.pick(self.command, self.path)
        if rule is not None and rule.fault == "reset_request":
            self.rfile.read(length // 2)
            self._reset()
            return
        body = self.rfile.read(length) if length else b""
        if rule is not None and rule.fault == "status":
            status = proxy.status_for(rule)
            error = json.dumps({"error": {"code": status, "message": "injected by the proxy"}})
            self._answer(status, [("Content-Type", "application/json")], error.encode())
            return
        if rule is not None and rule.fault == "corrupt_request" and body:
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1 :]
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        status, out_headers, data = proxy.forward(self.command, self.path, headers, body)
        if rule is not None and rule.fault in ("reset_response", "stall_response") and data:
            self._start(status, out_headers, len(data))
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if rule.fault == "stall_response":
                time.sleep(rule.seconds)
            self._reset()
            return
        self._answer(status, out_headers, data)

    def _start(self, status: int, headers: list[tuple[str, str]], length: int) -> None:
        self.send_response_only(status)
        for key, value in headers:
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self._start(status, headers, len(data))
        self.wfile.write(data)
        self.wfile.flush()

    def _reset(self) -> None:
        # SO_LINGER with a zero timeout makes close() send a RST: a connection reset by peer.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle
