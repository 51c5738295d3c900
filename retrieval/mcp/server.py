"""The MCP server: four read-only tools over the knowledge bases an API key may search, on the
official SDK's low-level ``Server`` (the tools' schemas and error results are ours to state).

Every tool call is a REST request in all but transport: the key is checked by
``tenancy.api.authentication.authenticate_api_key`` (revoked: refused at once), its rights are
``tenancy.api.access.access_for_key`` (the ``read`` scope is needed; a restricted key sees only
its knowledge bases), and it counts on the key's own rate-limit counter
(``tenancy.api.throttling.api_key_wait``). A call that cannot be answered comes back as a tool
result with ``isError`` and the REST API's message (``tenancy.api.errors`` maps it; the
structured content holds the same ``{"error": {code, message, details}}`` body), never as a
protocol or transport failure, so the agent can read it and act.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp import types
from mcp.server.lowlevel import Server
from pydantic import ValidationError
from rest_framework import exceptions

from retrieval.mcp.tools import TOOLS, Tool
from tenancy.api.access import access_for_key
from tenancy.api.authentication import authenticate_api_key
from tenancy.api.errors import describe, error_body, translate
from tenancy.api.throttling import api_key_wait
from tenancy.models import ApiKey
from tenancy.roles import Permission

logger = logging.getLogger(__name__)

NAME = "rag-knowledge-base"
INSTRUCTIONS = (
    "Search the knowledge bases of this API key. Start with list_knowledge_bases; then search "
    "(hits to judge) or get_context (prompt-ready text with numbered citations); get_document "
    "reads the chunks around a hit. Cite passages by their numbers."
)
# Where the HTTP endpoint leaves the key it authenticated, in the ASGI scope's state.
SCOPE_KEY = "rag_api_key"
_BY_NAME = {tool.name: tool for tool in TOOLS}
_NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_definitions() -> list[types.Tool]:
    return [
        types.Tool(
            name=tool.name,
            description=tool.description,
            inputSchema=tool.arguments.model_json_schema() if tool.arguments else _NO_ARGUMENTS,
            outputSchema=tool.answer.model_json_schema(),
            annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False),
        )
        for tool in TOOLS
    ]


def build_server(api_key: str | None = None) -> Server:
    """The server for stdio (``api_key``: the raw key, checked again on every call, which also
    starts and ends like a request: stale database connections are dropped) or for the HTTP
    endpoint (None: the key that endpoint authenticated for the request)."""
    server: Server = Server(NAME, instructions=INSTRUCTIONS)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return tool_definitions()

    # Arguments are checked in ``call`` against the tool's pydantic model (its inputSchema),
    # after the key as REST does, not by the SDK's per-call jsonschema pass (which also
    # re-checks the schema itself on every call).
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        tool = _BY_NAME.get(name)
        if tool is None:
            return _error_result(error_body("unknown_tool", f"There is no tool named {name!r}."))
        if api_key is not None:
            return await sync_to_async(_stdio_call, thread_sensitive=True)(tool, arguments, api_key)
        key = server.request_context.request.scope["state"][SCOPE_KEY]
        return await sync_to_async(call, thread_sensitive=True)(tool, arguments, key)

    return server


def _stdio_call(tool: Tool, arguments: Mapping[str, Any], raw_key: str) -> Any:
    close_old_connections()
    try:
        return call(tool, arguments, raw_key)
    finally:
        close_old_connections()


def call(tool: Tool, arguments: Mapping[str, Any], key: ApiKey | str) -> types.CallToolResult:
    """Run ``tool`` for ``key`` (an authenticated key, or a raw one to authenticate) as the REST
    API runs a request: authentication, permission, rate limit, then the work. The answer is
    structured content (what the outputSchema describes, which our tests hold the answers to
    through the SDK client's own check) and the same JSON as text; or an error result."""
    try:
        if isinstance(key, str):
            key = authenticate_api_key(key)
        access = access_for_key(key)
        access.require(Permission.READ)
        wait = api_key_wait(key)
        if wait is not None:
            raise exceptions.Throttled(wait)
        _check_arguments(tool, arguments)
        answer = tool.run(access, arguments)
    except Exception as exc:  # every failure becomes the agent's to read, as REST answers it
        translated = translate(exc)
        if isinstance(translated, exceptions.APIException):
            return _error_result(describe(translated))
        logger.exception("MCP tool %s failed", tool.name)
        return _error_result(
            error_body("server_error", "The server failed to answer; the error was logged.")
        )
    text = json.dumps(answer, ensure_ascii=False, separators=(",", ":"), default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structuredContent=answer
    )


def _check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> None:
    """Types against the tool's model (its inputSchema); the REST serializers check the rest.
    Raises DRF's ValidationError, so the error reads as the REST API's 400 does."""
    if tool.arguments is None:
        if arguments:
            raise exceptions.ValidationError({name: ["Unexpected argument."] for name in arguments})
        return
    try:
        tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        raise exceptions.ValidationError(
            {".".join(map(str, e["loc"])) or "arguments": [e["msg"]] for e in exc.errors()}
        ) from exc


def _error_result(body: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=body["error"]["message"])],
        structuredContent=body,
        isError=True,
    )
