"""A scripted stand-in for the search API: a real HTTP server on 127.0.0.1 answering, in order,
what a test scripts (status, body, headers, delay), and recording every request. It shows the
remote retriever's side of the contract (the request it sends, its timeouts, retries and
errors) where the real API (``search_api`` fixture, under ``live_server``) cannot be made to
fail on demand."""

from __future__ import annotations

from tests.fake_services import Scripted, ScriptedServer


class ScriptedSearchAPI(ScriptedServer):
    """Every path; an unscripted request gets a 500, a scripted one without a body ``{}``."""

    default = Scripted(500, body=b"{}")

    def record(self, path: str, raw: bytes, headers) -> dict:
        return {"path": path, "body": raw, "auth": headers.get("Authorization")}

    def respond(self, status: int, payload: dict) -> dict:
        return {}

    @property
    def url(self) -> str:
        return self.base_url
