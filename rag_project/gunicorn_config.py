"""gunicorn's configuration for this project: ``gunicorn -c python:rag_project.gunicorn_config
rag_project.wsgi:application`` (the Dockerfile, docker-compose and the benchmarks start it so).

**A finished connection is closed when the client has nothing more in flight.** Since 24.x
gunicorn ends every connection with ``util.close_graceful``: it half-closes, then waits until
the client closes its side too (up to 2 s), reading and discarding what it sends meanwhile
(RFC 9112 section 9.6: closing with unread request data in the receive buffer makes the kernel
send a reset, which can cut off the response before the client has read it). A sync worker
serves one connection at a time, so it would take no new request until the client had read
the answer and closed, and the requests queued behind it would wait that long: a remote client's
close comes a round trip after the answer. ``close_when_done`` keeps the linger for the case it
is for, a client still sending (an answer sent before the whole request body was read: the bytes
already arrived are the sign), and otherwise closes at once: the whole request was read and
``Connection: close`` told the client to send nothing more, so nothing is left to reset. What it
is worth: docs/performance.md, "Figures behind choices in the code".
"""

from __future__ import annotations

import contextlib
import socket
import time

from gunicorn import util

wsgi_app = "rag_project.wsgi:application"


def close_when_done(sock: socket.socket, timeout: float = 2.0, max_drain: int = 65536) -> None:
    """Close ``sock`` after a response: at once when the client has nothing in flight, else
    lingering as gunicorn's ``close_graceful`` does (same arguments)."""
    try:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        try:
            pending = sock.recv(max_drain, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return  # nothing buffered, the whole request read: no reset to fear
        except OSError:
            return
        if not pending:
            return  # the client has closed already
        _linger(sock, timeout, max_drain - len(pending))
    finally:
        with contextlib.suppress(OSError):
            sock.close()


def _linger(sock: socket.socket, timeout: float, max_drain: int) -> None:
    """Read and discard until the client closes, ``max_drain`` bytes or ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    drained = 0
    while drained < max_drain:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        try:
            sock.settimeout(remaining)
            data = sock.recv(4096)
        except OSError:  # socket.timeout included
            return
        if not data:
            return
        drained += len(data)


# The workers look it up in ``gunicorn.util`` when they close a connection (sync and gthread).
if hasattr(util, "close_graceful"):
    util.close_graceful = close_when_done
