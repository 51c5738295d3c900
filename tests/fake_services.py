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
