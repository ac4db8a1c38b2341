"""The storage tests' fault injector: a plug-in of the loopback proxy
(``workload/local/loopback/proxy.py``).

The proxy reads each request whole, and then either forwards it to the emulator or answers with a
fault. A :class:`Rule` picks the requests it applies to (method and a substring of the URL), how
many times it fires (or with what probability), and the fault:

- ``status``: answer 503 or 429 without forwarding;
- ``reset_request``: read half the request body, then reset the connection (an upload cut);
- ``reset_response``: forward, send the answer's headers and half its body, then reset;
- ``stall_response``: forward, send headers and half the body, then say nothing for ``seconds``;
- ``corrupt_request``: flip one byte in the middle of the body, then forward it.
- ``delay``: wait ``seconds`` after receiving the request, then forward it (a slow server).

Every fault fired is recorded in :attr:`FaultProxy.fired`, so a test can check that it happened.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ckptbench.workload.local.loopback.proxy import Answer, Connection, Exchange, LoopbackProxy


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
    s3_code: str = ""  # a status fault answers as S3 does, with this error code (SlowDown)
    fired: int = 0

    def matches(self, method: str, url: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.url_contains not in url:
            return False
        return not (self.url_excludes and self.url_excludes in url)


class FaultProxy(LoopbackProxy):
    def __init__(self, upstream: str, rules: Iterable[Rule] = (), seed: int = 0) -> None:
        super().__init__(upstream, self, name="fault-proxy", timeout=120)
        self.rules = list(rules)
        self.fired: list[tuple[str, str, str]] = []
        self._rng = random.Random(seed)

    def exchange(self, method: str, url: str) -> Exchange:
        rule = self.pick(method, url)
        return Exchange() if rule is None else _Fault(self, rule)

    def pick(self, method: str, url: str) -> Rule | None:
        with self._lock:
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


class _Fault(Exchange):
    def __init__(self, proxy: FaultProxy, rule: Rule) -> None:
        self.proxy = proxy
        self.rule = rule

    def receive(self, conn: Connection, length: int) -> bytes | None:
        if self.rule.fault == "reset_request":
            conn.read(length // 2)
            conn.reset()
            return None
        body = super().receive(conn, length)
        if self.rule.fault == "delay":
            time.sleep(self.rule.seconds)
        return body

    def answer_here(self, body: bytes) -> Answer | None:
        if self.rule.fault != "status":
            return None
        status = self.proxy.status_for(self.rule)
        if self.rule.s3_code:
            xml = f"<Error><Code>{self.rule.s3_code}</Code><Message>injected</Message></Error>"
            return Answer(status, [("Content-Type", "application/xml")], xml.encode())
        error = json.dumps({"error": {"code": status, "message": "injected by the proxy"}})
        return Answer(status, [("Content-Type", "application/json")], error.encode())

    def outgoing(self, body: bytes) -> bytes:
        if self.rule.fault != "corrupt_request" or not body:
            return body
        middle = len(body) // 2
        return body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1 :]

    def send(self, conn: Connection, answer: Answer) -> None:
        if self.rule.fault not in ("reset_response", "stall_response") or not answer.body:
            conn.answer(answer)
            return
        conn.start(answer)
        conn.write(answer.body[: len(answer.body) // 2])
        conn.flush()
        if self.rule.fault == "stall_response":
            time.sleep(self.rule.seconds)
        conn.reset()
