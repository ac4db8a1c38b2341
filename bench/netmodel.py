"""A GCS-like network model on loopback, for bench/: a model, not GCS.

A proxy between the ranks and fake-gcs-server that gives each TCP connection (one per stream, as a
client's pooled connections are) at most ``rate`` bytes per second each way, and adds ``rtt``
seconds before each answer (one round trip per request). That is the first-order shape of object
storage over a network: a single stream is slow, many in parallel are not, and every request pays
a round trip. It models neither GCS's per-object or per-bucket limits nor its latency tails.

It is the shaping plug-in of the loopback proxy in ``workload/local/loopback/proxy.py``, which
receives each request body whole (here at the capped rate, from the client) before forwarding it at
loopback speed, because fake-gcs-server reads each upload's body under one global lock and a slow
body arriving at it would serialise every upload; likewise the answer is fetched whole before it is
sent back at the capped rate.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ckptbench.workload.local.loopback.proxy import Answer, Connection, Exchange, LoopbackProxy

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


class NetModel(LoopbackProxy):
    def __init__(self, upstream: str, rate: float, rtt: float) -> None:
        super().__init__(upstream, self, name="netmodel", timeout=600)
        self.rate = rate
        self.rtt = rtt

    def exchange(self, method: str, url: str) -> Exchange:
        return _Shaped(self.rate, self.rtt)


class _Shaped(Exchange):
    """One request on one connection: a pacer per direction, as the cap is per stream."""

    def __init__(self, rate: float, rtt: float) -> None:
        self.rate = rate
        self.rtt = rtt

    def receive(self, conn: Connection, length: int) -> bytes | None:
        chunks = []
        got = 0
        up = Pacer(self.rate)
        while got < length:
            piece = conn.read(min(_SLICE, length - got))
            if not piece:
                return None
            chunks.append(piece)
            got += len(piece)
            up.account(len(piece))
        return b"".join(chunks)

    def send(self, conn: Connection, answer: Answer) -> None:
        time.sleep(self.rtt)  # one round trip per request
        conn.start(answer)
        down = Pacer(self.rate)
        data = answer.body
        view = memoryview(data)
        for lo in range(0, len(data), _SLICE):
            conn.write(view[lo : lo + _SLICE])
            down.account(min(_SLICE, len(data) - lo))
        conn.flush()
