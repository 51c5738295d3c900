"""``/mcp``: the MCP server over streamable HTTP, served by Django like every other view, so the
web server of each deployment (gunicorn's sync workers, ``manage.py run``, the tests' live
server) serves it unchanged.

The transport runs stateless with JSON answers: every POST carries one JSON-RPC message and gets
its answer in the response body, no session lives between requests (any worker answers any
request), and no stream is held open. That is all four tools need: they answer at once and send
nothing unasked. ``GET`` (a server-to-client event stream) and ``DELETE`` (ending a session)
answer 405, as the specification lets a server without them do.

Each POST is one request of the REST API's kind: the ``Authorization: Bearer`` key is checked
first (401 in the API's error shape when it is missing, unknown or revoked; 429 with
``Retry-After`` from an address past its limit of failed attempts), Django's
ALLOWED_HOSTS guards the Host header, the body is read as the REST API reads JSON
(``tenancy.api.parsers.loads``: nesting too deep, a number that is not finite, or bytes that are
not UTF-8 answer 400 with the JSON-RPC parse error the SDK answers to malformed JSON, where the
SDK's own reading fails as a server error or takes ``NaN`` for null), and the SDK's transport
(``StreamableHTTPSessionManager``) runs on an event loop of its own for the request while the
tools' database work comes back to this request's thread.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework import exceptions

from retrieval.mcp.server import SCOPE_KEY, build_server
from tenancy.api.authentication import ApiKeyAuthentication
from tenancy.api.errors import describe
from tenancy.api.parsers import JSONRefused, loads
from tenancy.models import ApiKey

_CHALLENGE = 'Bearer realm="api"'


@cache
def http_server() -> Server:
    return build_server()


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        response = JsonResponse(describe(exceptions.MethodNotAllowed(request.method)), status=405)
        response["Allow"] = "POST"
        return response
    try:
        authenticated = ApiKeyAuthentication().authenticate(request)
        if authenticated is None:
            raise exceptions.NotAuthenticated()
    except exceptions.AuthenticationFailed as exc:
        return _unauthenticated(exc)
    except exceptions.NotAuthenticated as exc:
        return _unauthenticated(exc)
    except exceptions.Throttled as exc:
        response = JsonResponse(describe(exc), status=exc.status_code)
        response["Retry-After"] = str(int(exc.wait + 0.999))
        return response
    try:
        loads(request.body)
    except ValueError as exc:
        return _parse_error(exc)
    status, headers, body = async_to_sync(_serve)(_scope(request, authenticated[1]), request.body)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in ("content-length", "connection"):
            response[name] = value
    return response


def _unauthenticated(exc: exceptions.APIException) -> JsonResponse:
    response = JsonResponse(describe(exc), status=401)
    response["WWW-Authenticate"] = _CHALLENGE
    return response


def _parse_error(exc: ValueError) -> HttpResponse:
    """400 with the JSON-RPC error the SDK's transport answers to a body that is not JSON. The
    message may name a key holding an unpaired surrogate, which only escaped JSON can carry."""
    path = exc.path if isinstance(exc, JSONRefused) else ()
    where = ".".join(map(str, path)) + ": " if path else ""
    error = types.JSONRPCError(
        jsonrpc="2.0",
        id="server-error",  # as the SDK's: no request id can be read from the body
        error=types.ErrorData(code=types.PARSE_ERROR, message=f"Parse error: {where}{exc}"),
    )
    body = json.dumps(error.model_dump(by_alias=True, exclude_none=True))
    return HttpResponse(body, status=400, content_type="application/json")


def _scope(request: HttpRequest, key: ApiKey) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (request.get_host(), int(request.get_port())),
        "state": {SCOPE_KEY: key},
    }


async def _serve(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run the SDK's transport for one request: the body in, the status, headers and body out.
    A manager runs once, so each request has its own (a task group, nothing more)."""
    answer: dict[str, Any] = {"status": 500, "headers": [], "body": b""}
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()  # the client is there until the answer is sent
        raise AssertionError("unreachable")  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = [
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in message.get("headers", [])
            ]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    manager = StreamableHTTPSessionManager(app=http_server(), json_response=True, stateless=True)
    async with manager.run():
        await manager.handle_request(scope, receive, send)
    return answer["status"], answer["headers"], answer["body"]
