"""Meeting rank 0: wait for its name to resolve, then form the gloo process group, by a deadline.

In a cluster rank 0's headless-service record can appear late (pods start in any order, and a
negative DNS answer is cached for ~30 s), so a worker first waits for the name to resolve, then
connects to rank 0's TCP store, retrying refused connections, until ``rendezvous_timeout_seconds``
have passed. Rank 0 waits at its store for every worker within the same deadline. Collectives
after that get their own explicit timeout (``collective_timeout_seconds``).
"""

from __future__ import annotations

import datetime
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch.distributed as dist

_POLL_SECONDS = 1.0


class Meeting(Protocol):
    """What a rank knows of the meeting: the checkpoint rank's config and the data rank's."""

    @property
    def rank(self) -> int: ...
    @property
    def rank_count(self) -> int: ...
    @property
    def master_addr(self) -> str: ...
    @property
    def master_port(self) -> int: ...
    @property
    def rendezvous_timeout_seconds(self) -> float: ...
    @property
    def collective_timeout_seconds(self) -> float: ...


class RendezvousTimeout(TimeoutError):
    """Rank 0 could not be reached (or the workers did not all arrive) before the deadline."""


def resolve(
    host: str,
    deadline: float,
    *,
    started: float,
    port: int,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once ``host`` resolves; raise :class:`RendezvousTimeout` at ``deadline``."""
    last: OSError | None = None
    while True:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            return
        except OSError as exc:  # socket.gaierror, or a resolver that is not ready
            last = exc
        now = clock()
        if now >= deadline:
            raise RendezvousTimeout(
                f"rendezvous: rank 0's address {host}:{port} did not resolve within "
                f"{now - started:.1f} s ({last}); is MASTER_ADDR the fully qualified name "
                "(<host>.<subdomain>.<namespace>.svc) and does the headless service publish "
                "not-ready addresses?"
            )
        sleep(min(_POLL_SECONDS, max(0.0, deadline - now)))


def init_process_group(
    config: Meeting,
    *,
    log: Callable[[str], None] | None = None,
) -> None:
    """Form the default gloo group for this rank, or raise ``RendezvousTimeout`` at the deadline."""
    store = meet(config, log=log)
    dist.init_process_group(
        backend="gloo",
        store=store,
        rank=config.rank,
        world_size=config.rank_count,
        timeout=datetime.timedelta(seconds=config.collective_timeout_seconds),
    )


def meet(config: Meeting, *, log: Callable[[str], None] | None = None) -> Any:
    """Every rank at rank 0's TCP store, or ``RendezvousTimeout`` at the deadline: the store,
    its timeout then the collectives'."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    started = time.monotonic()
    deadline = started + config.rendezvous_timeout_seconds
    host, port = config.master_addr, config.master_port
    resolve(host, deadline, started=started, port=port)
    is_master = config.rank == 0
    if not is_master:
        # Probing with a plain socket first keeps the deadline exact and the log quiet: the
        # store's own client retries overshoot its timeout and log a C++ trace per attempt.
        wait_for_port(config, deadline, started)
    attempt = 0
    last_error: BaseException | None = None
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _expired(config, started, last_error)
        try:
            # The store's timeout bounds connecting (a client retries refused connections
            # inside it) and rank 0's wait for every worker to check in.
            store = dist.TCPStore(  # type: ignore[attr-defined]
                host,
                port,
                world_size=config.rank_count,
                is_master=is_master,
                timeout=datetime.timedelta(seconds=remaining),
                wait_for_workers=True,
            )
            break
        except (RuntimeError, OSError, dist.DistError) as exc:
            last_error = exc
            if _is_timeout(exc) and time.monotonic() >= deadline - 0.5:
                raise _expired(config, started, exc) from exc
            if attempt == 1 or attempt % 10 == 0:
                say(f"[rank {config.rank}] rendezvous with {host}:{port}: retrying ({exc})")
            time.sleep(min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    store.set_timeout(datetime.timedelta(seconds=config.collective_timeout_seconds))
    return store


def wait_for_port(config: Meeting, deadline: float, started: float) -> None:
    last: OSError | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _expired(config, started, last)
        try:
            with socket.create_connection(
                (config.master_addr, config.master_port), timeout=min(2.0, remaining)
            ):
                return
        except OSError as exc:
            last = exc
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, TimeoutError) or "timed out" in text or "timeout" in text


def _expired(config: Meeting, started: float, last: BaseException | None) -> RendezvousTimeout:
    waited = time.monotonic() - started
    who = (
        f"not all {config.rank_count} ranks reached rank 0's store"
        if config.rank == 0
        else "rank 0 did not answer"
    )
    cause = f" (last error: {_first_line(last)})" if last else ""
    return RendezvousTimeout(
        f"rendezvous at {config.master_addr}:{config.master_port} timed out after "
        f"{waited:.1f} s: {who}{cause}"
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
