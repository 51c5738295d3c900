"""Fixtures for the MCP server: the project served by ``live_server`` (``/mcp`` and the REST API
of the same process), and the SDK's own client over streamable HTTP or over stdio (a real
``manage.py mcp`` subprocess on this test's database)."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import CEILING_S, REPO, subprocess_env

T = TypeVar("T")
KEY_ENV = "RAG_MCP_TEST_KEY"


class Live:
    """The live server: ``.mcp_url``, ``.rest(key, path, body)``, and the MCP client over either
    transport: ``.over_http(key, fn)`` / ``.over_stdio(key, fn)`` run ``await fn(session)``."""

    def __init__(self, url: str, database: str) -> None:
        self.url, self.database = url, database
        self.mcp_url = f"{url}/mcp"

    def rest(self, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.url}/api/v1{path}",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=CEILING_S,
        )

    def over_http(self, key: str, fn: Callable[[ClientSession], Awaitable[T]]) -> T:
        headers = {"Authorization": f"Bearer {key}"}

        @asynccontextmanager
        async def connect():
            async with (
                httpx.AsyncClient(headers=headers, timeout=CEILING_S) as http,
                streamable_http_client(self.mcp_url, http_client=http) as (read, write, _),
            ):
                yield read, write

        return anyio.run(_session, connect, fn)

    def over_stdio(self, key: str, fn: Callable[[ClientSession], Awaitable[T]]) -> T:
        env = subprocess_env(
            DJANGO_SETTINGS_MODULE="rag_project.settings.test",
            RAG_TEST_DB_NAME=self.database,
            **{KEY_ENV: key},
        )
        parameters = StdioServerParameters(
            command=sys.executable,
            args=[str(REPO / "manage.py"), "mcp", "--api-key-env", KEY_ENV],
            env=env,
            cwd=str(REPO),
        )

        @asynccontextmanager
        async def connect():
            with open(os.devnull, "w") as quiet:
                async with stdio_client(parameters, errlog=quiet) as (read, write):
                    yield read, write

        return anyio.run(_session, connect, fn)


async def _session(connect, fn):
    async with (
        connect() as (read, write),
        ClientSession(read, write, read_timeout_seconds=timedelta(seconds=CEILING_S)) as session,
    ):
        await session.initialize()
        return await fn(session)


@pytest.fixture
def live(live_server) -> Live:
    """The project over HTTP (its tests commit their data: ``transactional_db``)."""
    from django.db import connection

    return Live(live_server.url, connection.settings_dict["NAME"])


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    """A tool's error: a result flagged isError whose text is the API's message."""
    assert result.isError, result
    error = result.structuredContent["error"]
    assert [block.text for block in result.content] == [error["message"]]
    return error


def answer_of(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.isError, result.content
    return result.structuredContent
