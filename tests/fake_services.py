"""Real local HTTP servers speaking the APIs of services we do not own (embeddings, rerank).

They are real sockets on 127.0.0.1, so the code under test runs its real HTTP client, timeouts
and retries; a test scripts the answers (status codes, delays, garbage) it wants to see.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Scripted:
    """One scripted answer: a status (200 computes real vectors), a delay, or a raw body."""

    status: int = 200
    delay_s: float = 0.0
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def fake_vector(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(digest[i % len(digest)] - 128) / 128 for i in range(dimensions)]
    norm = sum(v * v for v in raw) ** 0.5 or 1.0
    return [v / norm for v in raw]


class FakeEmbeddingsServer:
    """``POST /v1/embeddings`` as OpenAI defines it. ``script`` answers are used first, in
    order; afterwards every request gets a correct answer."""

    def __init__(self, dimensions: int = 8) -> None:
        self.dimensions = dimensions
        self.script: list[Scripted] = []
        self.requests: list[dict] = []
        self.on_request: Callable[[dict], None] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(
                    {"path": self.path, "json": payload, "auth": self.headers.get("Authorization")}
                )
                answer = server.script.pop(0) if server.script else Scripted()
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                if self.path.rstrip("/") != "/v1/embeddings":
                    answer = Scripted(status=404, body=b'{"error": "not found"}')
                body = answer.body
                if body is None:
                    if answer.status == 200:
                        inputs = payload["input"]
                        inputs = [inputs] if isinstance(inputs, str) else inputs
                        dims = payload.get("dimensions") or server.dimensions
                        body = json.dumps(
                            {
                                "object": "list",
                                "model": payload.get("model"),
                                "data": [
                                    {
                                        "object": "embedding",
                                        "index": i,
                                        "embedding": fake_vector(text, dims),
                                    }
                                    for i, text in enumerate(inputs)
                                ],
                                "usage": {"prompt_tokens": 1, "total_tokens": 1},
                            }
                        ).encode()
                    else:
                        body = json.dumps(
                            {"error": {"message": f"status {answer.status}"}}
                        ).encode()
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

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeEmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def fake_relevance(query: str, text: str) -> float:
    """A deterministic stand-in for a cross-encoder's score, in [0, 1)."""
    digest = hashlib.sha256(f"{query}\x00{text}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


class FakeRerankServer:
    """``POST /rerank`` as Cohere and Jina define it (``style="cohere"`` or ``"jina"``, served
    under ``/v1`` like the real hosts) or as text-embeddings-inference does (``style="tei"``, at
    the root). Correct answers are sorted by score, best first, as the real APIs sort them.
    ``script`` answers are used first, in order; afterwards every request gets a correct one."""

    def __init__(self, style: str = "cohere") -> None:
        self.style = style
        self.prefix = "" if style == "tei" else "/v1"
        self.script: list[Scripted] = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(
                    {"path": self.path, "json": payload, "auth": self.headers.get("Authorization")}
                )
                answer = server.script.pop(0) if server.script else Scripted()
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                if self.path.rstrip("/") != f"{server.prefix}/rerank":
                    answer = Scripted(status=404, body=b'{"message": "not found"}')
                body = answer.body
                if body is None:
                    if answer.status == 200:
                        body = json.dumps(server.answer(payload)).encode()
                    else:
                        body = json.dumps({"message": f"status {answer.status}"}).encode()
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

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval makes shutdown quick (the default 0.5 s is paid by every test).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def answer(self, payload: dict) -> list | dict:
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

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.prefix}"

    def __enter__(self) -> FakeRerankServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
