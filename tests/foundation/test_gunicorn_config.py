"""rag_project.gunicorn_config: a finished connection is closed at once, a client still sending
gets gunicorn's linger, and gunicorn started with the configuration uses it (real sockets, a
real gunicorn process)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from pathlib import Path

import pytest

from rag_project.gunicorn_config import close_when_done

LINGER_S = 60.0  # far longer than any wait below: a close that lingered would fail them


def _pair() -> tuple[socket.socket, socket.socket]:
    """(server side, client side) of a real TCP connection on the loopback."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return server, client


def _closing(server: socket.socket) -> threading.Thread:
    thread = threading.Thread(target=close_when_done, args=(server, LINGER_S), daemon=True)
    thread.start()
    return thread


def test_a_connection_whose_request_was_read_closes_without_waiting_for_the_client():
    server, client = _pair()
    with client:
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert server.recv(100).startswith(b"GET")  # the whole request read
        server.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        closing = _closing(server)
        closing.join(30)  # the client does nothing: only a close that does not linger returns
        assert not closing.is_alive() and server.fileno() == -1
        answer = b""
        while chunk := client.recv(100):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK")  # all of it, then the end of the stream


def test_a_client_still_sending_gets_the_linger_and_no_reset():
    server, client = _pair()
    with client:
        client.sendall(b"POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\npart of the body")
        assert server.recv(40).startswith(b"POST")  # answered before the body was read
        server.sendall(b"HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n\r\n")
        time.sleep(0.05)  # let the rest of the first segment arrive (it is in flight)
        closing = _closing(server)
        closing.join(0.5)
        assert closing.is_alive()  # lingering: reading what the client still sends
        client.sendall(b"x" * 5000)  # more of the body, read and discarded
        answer = client.recv(100)
        client.shutdown(socket.SHUT_WR)  # the client is done: the linger ends
        closing.join(30)
        assert not closing.is_alive()
        assert answer.startswith(b"HTTP/1.1 413")  # not cut off by a reset


def test_the_configuration_puts_it_in_gunicorn_where_its_workers_look_for_it():
    from gunicorn import util
    from gunicorn.workers import gthread, sync

    assert util.close_graceful is close_when_done  # imported above: the module installs it
    for worker in (sync, gthread):  # each calls util.close_graceful(...) at a connection's end
        assert "util.close_graceful(" in Path(worker.__file__).read_text()


@pytest.mark.django_db(transaction=True)
def test_gunicorn_as_the_project_starts_it_answers_in_full_with_the_configuration():
    from bench.load import gunicorn_process

    with gunicorn_process(1) as (base, master):
        with open(f"/proc/{master.pid}/cmdline", "rb") as cmdline:
            assert b"python:rag_project.gunicorn_config" in cmdline.read().split(b"\0")
        host, port = base.removeprefix("http://").rsplit(":", 1)
        # A client that read its answer and keeps the connection open, then others.
        raw = socket.create_connection((host, int(port)))
        with raw:
            raw.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            answer = b""
            while chunk := raw.recv(65536):  # to the server's end of the stream
                answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and body.startswith(b"{")
            for _ in range(5):
                connection = http.client.HTTPConnection(host, int(port), timeout=30)
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                assert response.status == 200 and response.read().startswith(b"{")
                connection.close()
