"""``python manage.py mcp --api-key-env NAME``: the MCP server over stdio, for an agent host on
this machine that starts it as a subprocess (docs/agents.md has the host configuration).

The API key is read from the environment variable NAME, never from the command line (where
other users of the machine could read it in the process list). It is checked now, so a host
shows a wrong or revoked key when it starts the server, and again on every tool call, as the
REST API checks it on every request. Standard output is the protocol's channel: whatever else
the process prints goes to standard error.
"""

from __future__ import annotations

import os
import sys
from io import TextIOWrapper

import anyio
from django.core.management.base import BaseCommand, CommandError
from mcp.server.stdio import stdio_server
from rest_framework.exceptions import AuthenticationFailed

from retrieval.mcp.server import build_server
from tenancy.api.authentication import authenticate_api_key


class Command(BaseCommand):
    help = "Serve the knowledge bases of an API key over MCP on stdin/stdout."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--api-key-env",
            required=True,
            metavar="NAME",
            help="the environment variable holding the API key (rag_...)",
        )

    def handle(self, *args, api_key_env: str, **options) -> None:
        raw_key = os.environ.get(api_key_env, "").strip()
        if not raw_key:
            raise CommandError(f"Set the API key in the environment variable {api_key_env}.")
        try:
            key = authenticate_api_key(raw_key)
        except AuthenticationFailed as exc:
            raise CommandError(f"{exc.detail} (the key in {api_key_env})") from exc
        sys.stderr.write(
            f"MCP server on stdio for tenant {key.tenant.slug!r}, key {key.prefix}; "
            "stop it by closing its input\n"
        )
        protocol_out = TextIOWrapper(sys.stdout.buffer, encoding="utf-8")
        sys.stdout = sys.stderr  # a stray print must not corrupt the protocol
        anyio.run(_serve, raw_key, protocol_out)


async def _serve(raw_key: str, protocol_out: TextIOWrapper) -> None:
    server = build_server(api_key=raw_key)
    async with stdio_server(stdout=anyio.wrap_file(protocol_out)) as (read, write):
        await server.run(read, write, server.create_initialization_options())
