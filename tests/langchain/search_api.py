"""A scripted stand-in for the search API: a real HTTP server on 127.0.0.1 answering, in order,
what a test scripts (status, body, headers, delay), and recording every request. It shows the
remote retriever's side of the contract (the request it sends, its timeouts, retries and
errors) where the real API (``search_api`` fixture, under ``live_server``) cannot be made to
fail on demand."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.fake_services import Scripted


class ScriptedSearchAPI:
    def __init__(self) -> None:
        self.script: list[Scripted] = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(
                    {
                        "path": self.path,
                        "body": self.rfile.read(length),
                        "auth": self.headers.get("Authorization"),
                    }
                )
                answer = server.script.pop(0) if server.script else Scripted(500, body=b"{}")
                time.sleep(answer.delay_s)
                body = answer.body if answer.body is not None else b"{}"
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
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ScriptedSearchAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
