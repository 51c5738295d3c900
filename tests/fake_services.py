"""Real local HTTP servers speaking the APIs of services we do not own (embeddings, rerank).

They are real sockets on 127.0.0.1, so the code under test runs its real HTTP client, timeouts
and retries; a test scripts the answers (status codes, delays, garbage) it wants to see.

An answer that must come too late for a client's timeout is ``held``: it is sent only when the
test lets go (``release()``, or leaving the server's ``with``), so the client times out however
slow the machine is; a fixed delay would race against the client's timeout on a loaded machine.
What the server received is read after ``wait_for_requests(n)``: the server may record a request
a moment after a client that timed out has given up on it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import CEILING_S


@dataclass
class Scripted:
    """One scripted answer: a status (200 computes real vectors), a delay, or a raw body;
    ``held``: not sent until the test releases it (a client times out waiting for it)."""

    status: int = 200
    delay_s: float = 0.0
    held: bool = False
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def fake_vector(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(digest[i % len(digest)] - 128) / 128 for i in range(dimensions)]
    norm = sum(v * v for v in raw) ** 0.5 or 1.0
    return [v / norm for v in raw]


class ScriptedServer:
    """A real HTTP server on 127.0.0.1 that answers POSTs (and GETs) and records them. Answers in
    ``script`` are used first, in order; afterwards every request gets ``default``. A scripted
    answer with a body is sent as it is; without one, the subclass's ``respond`` writes it."""

    path: str | None = None  # the one path served (any other answers 404); None: every path
    prefix = ""  # what base_url adds to the address
    default = Scripted()

    def __init__(self) -> None:
        self.script: list[Scripted] = []
        self.requests: list[dict] = []
        self._received = threading.Condition()
        self._released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._received:
                    server.requests.append(server.record(self.path, raw, self.headers))
                    answer = server.script.pop(0) if server.script else server.default
                    server._received.notify_all()
                if answer.held:
                    server._released.wait(CEILING_S)
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                if server.path is not None and self.path.rstrip("/") != server.path:
                    answer = Scripted(status=404, body=b'{"message": "not found"}')
                body = answer.body
                if body is None:
                    body = json.dumps(server.respond(answer.status, json.loads(raw or b"{}")))
                    body = body.encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    pass

            do_GET = do_POST  # a GET is answered alike (it carries no body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval makes shutdown quick (the default 0.5 s is paid by every test).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def wait_for_requests(self, count: int, timeout: float = CEILING_S) -> list[dict]:
        """The requests received, once there are at least ``count`` of them."""
        with self._received:
            if not self._received.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(
                    f"the server received {len(self.requests)} requests, not {count}, "
                    f"within {timeout:g} s"
                )
            return list(self.requests)

    def release(self) -> None:
        """Send the held answers (to clients that have most likely given up on them)."""
        self._released.set()

    def record(self, path: str, raw: bytes, headers) -> dict:
        return {
            "path": path,
            "json": json.loads(raw or b"{}"),
            "auth": headers.get("Authorization"),
        }

    def respond(self, status: int, payload: dict) -> dict | list:
        return {"error": {"message": f"status {status}"}}

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.prefix}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()


class FakeEmbeddingsServer(ScriptedServer):
    """``POST /v1/embeddings`` as OpenAI defines it; correct answers are real vectors of
    ``dimensions`` (or the request's ``dimensions``)."""

    path = "/v1/embeddings"
    prefix = "/v1"

    def __init__(self, dimensions: int = 8) -> None:
        super().__init__()
        self.dimensions = dimensions

    def respond(self, status: int, payload: dict) -> dict:
        if status != 200:
            return super().respond(status, payload)
        inputs = payload["input"]
        inputs = [inputs] if isinstance(inputs, str) else inputs
        dims = payload.get("dimensions") or self.dimensions
        return {
            "object": "list",
            "model": payload.get("model"),
            "data": [
                {"object": "embedding", "index": i, "embedding": fake_vector(text, dims)}
                for i, text in enumerate(inputs)
            ],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }


def fake_relevance(query: str, text: str) -> float:
    """A deterministic stand-in for a cross-encoder's score, in [0, 1)."""
    digest = hashlib.sha256(f"{query}\x00{text}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


class FakeRerankServer(ScriptedServer):
    """``POST /rerank`` as Cohere and Jina define it (``style="cohere"`` or ``"jina"``, served
    under ``/v1`` like the real hosts) or as text-embeddings-inference does (``style="tei"``, at
    the root). Correct answers are sorted by score, best first, as the real APIs sort them."""

    def __init__(self, style: str = "cohere") -> None:
        super().__init__()
        self.style = style
        self.prefix = "" if style == "tei" else "/v1"
        self.path = f"{self.prefix}/rerank"

    def respond(self, status: int, payload: dict) -> list | dict:
        if status != 200:
            return {"message": f"status {status}"}
        texts = payload["texts"] if self.style == "tei" else payload["documents"]
        scored = [(i, fake_relevance(payload["query"], text)) for i, text in enumerate(texts)]
        scored.sort(key=lambda pair: pair[1], reverse=True)
        if self.style == "tei":
            return [{"index": i, "score": score} for i, score in scored]
        top_n = payload.get("top_n") or len(scored)
        results = [{"index": i, "relevance_score": score} for i, score in scored[:top_n]]
        if self.style == "jina":
            return {"model": payload.get("model"), "usage": {"total_tokens": 1}, "results": results}
        return {"id": "fake", "results": results, "meta": {"api_version": {"version": "2"}}}
