"""A GCS-like network model on loopback, for bench/: a model, not GCS.

A proxy between the ranks and fake-gcs-server that gives each TCP connection (one per stream, as a
client's pooled connections are) at most ``rate`` bytes per second each way, and adds ``rtt``
seconds before each answer (one round trip per request). That is the first-order shape of object
storage over a network: a single stream is slow, many in parallel are not, and every request pays
a round trip. It models neither GCS's per-object or per-bucket limits nor its latency tails.

fake-gcs-server reads each upload's body under one global lock, so a slow body arriving at the
emulator would serialise every upload; the proxy therefore receives each request body whole (at
the capped rate, from the client) before forwarding it at loopback speed, and likewise fetches
each answer whole before sending it back at the capped rate.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}
_SLICE = 64 * 1024


class Pacer:
    """Keeps one connection's transfer at or below ``rate`` bytes per second."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.sent = 0

    def account(self, n: int) -> None:
        self.sent += n
        due = self.start + self.sent / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class NetModel:
    def __init__(self, upstream: str, rate: float, rtt: float) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        self.rate = rate
        self.rtt = rtt
        self._server: ThreadingHTTPServer | None = None
        self.requests = 0
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @contextmanager
    def running(self) -> Iterator[NetModel]:
        model = self

        class Handler(_Handler):
            owner = model

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.request_queue_size = 256
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name="netmodel", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    owner: NetModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def handle(self) -> None:
        # A client that closes a pooled connection mid-answer is not the model's concern.
        with contextlib.suppress(OSError):
            super().handle()

    def setup(self) -> None:
        super().setup()
        # One pacer per direction per connection: the cap is per stream.
        self.up = Pacer(self.owner.rate)
        self.down = Pacer(self.owner.rate)

    def _handle(self) -> None:
        model = self.owner
        with model._lock:
            model.requests += 1
        length = int(self.headers.get("Content-Length") or 0)
        chunks = []
        got = 0
        self.up = Pacer(model.rate)
        while got < length:
            piece = self.rfile.read(min(_SLICE, length - got))
            if not piece:
                return
            chunks.append(piece)
            got += len(piece)
            self.up.account(len(piece))
        body = b"".join(chunks)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        conn = http.client.HTTPConnection(model.host, model.port, timeout=600)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            status, out_headers = resp.status, resp.getheaders()
        finally:
            conn.close()
        time.sleep(model.rtt)  # one round trip per request
        self.send_response_only(status)
        for key, value in out_headers:
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.down = Pacer(model.rate)
        view = memoryview(data)
        for lo in range(0, len(data), _SLICE):
            self.wfile.write(view[lo : lo + _SLICE])
            self.down.account(min(_SLICE, len(data) - lo))
        self.wfile.flush()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle
