"""``bench mcp --clients C --seconds S``: the MCP endpoint (``/mcp``) under concurrent load, beside
the REST search it wraps, in the same run.

The knowledge base, key and gunicorn are ``bench load``'s (``--chunks`` synthetic chunks, hash
embeddings, production settings, ``--workers`` sync workers, the rate limit lifted). C client
threads each hold one session of the MCP SDK's own client over streamable HTTP and call the
``search`` tool (hybrid, ``--top-k``) with random queries as fast as answers come back, first for
``--warmup`` seconds, then for S measured seconds; a tool error, a protocol error or a transport
failure counts as an error. Then the same C clients post the same searches to
``/api/v1/knowledge-bases/<id>/search`` for S seconds: the difference is what MCP costs (its
JSON-RPC envelope, the per-request event loop of the stateless transport, the output schema the
client validates). Only 127.0.0.1 is ever targeted.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import anyio
import httpx
import numpy as np
from django.core.management.base import CommandError
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.load import _drive, _gunicorn, _knowledge_base, add_load_arguments
from bench.search import percentiles

TIMEOUT_S = 60.0


def add_mcp_arguments(parser) -> None:
    add_load_arguments(parser)
    parser.set_defaults(clients=8, seconds=30, chunks=5_000)


def bench_mcp(options: dict[str, Any]) -> dict[str, Any]:
    clients, seconds = options["clients"], options["seconds"]
    if clients < 1 or seconds <= 0 or options["chunks"] < 20:
        raise CommandError("--clients >= 1, --seconds > 0 and --chunks >= 20, please")
    # One log line per request from the clients (httpx, the SDK) would cost the clients' CPU,
    # which they share with the server on this machine.
    for name in ("httpx", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)
    with (
        _knowledge_base(options["chunks"], options["seed"]) as (kb, key, queries),
        _gunicorn(options["workers"]) as base_url,
    ):
        arguments = {"knowledge_base_ids": [kb.pk], "mode": "hybrid", "top_k": options["top_k"]}
        mcp_url = f"{base_url}/mcp"
        if options["warmup"] > 0:
            _drive_mcp(mcp_url, key, arguments, queries, clients, options["warmup"])
        mcp = _drive_mcp(mcp_url, key, arguments, queries, clients, seconds)
        rest = _drive(
            f"{base_url}/api/v1/knowledge-bases/{kb.pk}/search",
            {"Authorization": f"Bearer {key}"},
            {"mode": "hybrid", "top_k": options["top_k"]},
            queries,
            clients,
            seconds,
        )
    return {
        "clients": clients,
        "workers": options["workers"],
        "chunks": options["chunks"],
        "mcp": _summary(*mcp),
        "rest": _summary(*rest),
    }


def _summary(latencies: list[float], errors: int, elapsed: float, samples: list[str]) -> dict:
    values = latencies or [0.0]
    return {
        "seconds": round(elapsed, 2),
        "requests": len(latencies) + errors,
        "rps": round((len(latencies) + errors) / elapsed, 1),
        "errors": errors,
        "error_samples": samples,
        **{k.removeprefix("http_"): v for k, v in percentiles(values, "http").items()},
        "max_ms": round(max(values), 3),
    }


def _drive_mcp(url: str, key: str, arguments: dict, queries: list[str], clients: int, seconds):
    """C threads, one MCP session each, calling ``search`` for ``seconds``; (latencies ms,
    errors, elapsed, samples) as ``bench.load._drive`` answers."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    samples: list[str] = []
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def failed(i: int, problem: str) -> None:
        errors[i] += 1
        if len(samples) < 5:
            samples.append(problem)

    async def session(i: int) -> None:
        rng = np.random.default_rng(i)
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx.AsyncClient(headers=headers, timeout=TIMEOUT_S) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            await mcp.list_tools()  # the output schemas the client checks answers against
            await anyio.to_thread.run_sync(start.wait)
            while time.perf_counter() < deadline[0]:
                query = queries[int(rng.integers(len(queries)))]
                began = time.perf_counter()
                try:
                    result = await mcp.call_tool("search", arguments | {"query": query})
                except Exception as exc:  # counted and shown, never fatal to the run
                    failed(i, repr(exc)[:200])
                    continue
                if result.isError:
                    failed(i, f"tool error: {result.content[0].text[:200]}")
                else:
                    latencies[i].append((time.perf_counter() - began) * 1000)

    def client(i: int) -> None:
        try:
            anyio.run(session, i)
        except Exception as exc:  # a session that could not start: every client counts it
            failed(i, f"session: {exc!r}"[:200])
            start.abort()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    with contextlib.suppress(threading.BrokenBarrierError):  # a session failed to start
        start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    return [x for part in latencies for x in part], sum(errors), elapsed, samples


def mcp_table(r: dict[str, Any]) -> str:
    lines = [
        f"MCP load: {r['clients']} clients against gunicorn ({r['workers']} workers, production "
        f"settings), the search tool (hybrid) over {r['chunks']:,} chunks, beside REST search",
        "",
        f"{'':16}{'MCP /mcp':>12}{'REST search':>14}",
    ]
    mcp, rest = r["mcp"], r["rest"]
    for label, key, unit in (
        ("seconds", "seconds", ""),
        ("requests", "requests", ""),
        ("requests/s", "rps", ""),
        ("p50", "p50_ms", " ms"),
        ("p95", "p95_ms", " ms"),
        ("p99", "p99_ms", " ms"),
        ("errors", "errors", ""),
    ):
        lines.append(f"{label:16}{mcp[key]:>9}{unit:3}{rest[key]:>11}{unit}")
    lines += [f"  MCP: {s}" for s in mcp["error_samples"]]
    lines += [f"  REST: {s}" for s in rest["error_samples"]]
    return "\n".join(lines)
