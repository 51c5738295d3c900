"""``bench coldstart --chunks N``: a new web process's first search, warmed and cold.

A throwaway tenant gets a knowledge base of N synthetic chunks whose model is the packaged local
one (``--embedding local``, the default: its query embedding needs the model's weights, as a
real knowledge base's does; the stored vectors are the corpus's own, of the same dimension) and
its BM25 index stored (L2/L3), as a running deployment has them. Then, each with one gunicorn
worker (production settings, as ``bench load`` starts it):

1. warming on: process start -> ``/healthz`` says ``warm`` (``start_to_warm_s``), then one
   search over HTTP (``first_query_ms``);
2. warming on, a search sent as soon as ``/healthz`` first answers, while the warm-up runs
   (``during_warm_query_ms``: the target is no slower than a cold first search);
3. warming off (``RAG_WARM_ON_START=false``): the first search (``cold_first_query_ms``),
   which pays for jieba, the model, the BM25 view and the vector matrix itself.

Each process is stopped before the next starts. ``start_to_healthy_s`` is process start to the
first 200 from ``/healthz`` (Django and gunicorn's own start).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx
from django.core.management.base import CommandError
from django.test import override_settings

from bench import corpus
from bench.load import _gunicorn, _knowledge_base
from knowledge.embeddings import EmbeddingConfig
from retrieval.bm25store import get_store

WARM_CEILING_S = 600.0


def add_coldstart_arguments(parser) -> None:
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in the knowledge base")
    parser.add_argument("--embedding", choices=["local", "hash"], default="local")
    parser.add_argument("--seed", type=int, default=7)


def bench_coldstart(options: dict[str, Any]) -> dict[str, Any]:
    if options["chunks"] < 20:
        raise CommandError("--chunks must be at least 20")
    embedding = (
        EmbeddingConfig(provider="local", dimensions=corpus.DIMENSIONS)
        if options["embedding"] == "local"
        else None
    )
    result: dict[str, Any] = {"chunks": options["chunks"], "embedding": options["embedding"]}
    with _knowledge_base(options["chunks"], options["seed"], embedding) as (kb, key, queries):
        # One production key for the run: the index is stored (L2/L3, as the worker leaves it
        # after ingestion) signed with the key the web processes check it with.
        secret = secrets.token_urlsafe(64)
        with override_settings(SECRET_KEY=secret):
            get_store().warm(kb)
        search = _searcher(kb.pk, key, queries[0])
        warm_on = {"RAG_WARM_ON_START": "true", "SECRET_KEY": secret}
        warm_off = warm_on | {"RAG_WARM_ON_START": "false"}

        began = time.perf_counter()
        with _gunicorn(1, warm_on) as base_url:
            result["start_to_healthy_s"] = round(time.perf_counter() - began, 3)
            warm = _wait_warm(base_url)
            result["start_to_warm_s"] = round(time.perf_counter() - began, 3)
            result["warm_state"] = warm
            result["first_query_ms"] = search(base_url)
            result["second_query_ms"] = search(base_url)

        with _gunicorn(1, warm_on) as base_url:
            result["during_warm_query_ms"] = search(base_url)
            result["during_warm_state"] = _warm_of(base_url)["state"]

        with _gunicorn(1, warm_off) as base_url:
            result["cold_first_query_ms"] = search(base_url)
            result["cold_second_query_ms"] = search(base_url)
    return result


def _searcher(knowledge_base_id: int, key: str, query: str):
    def search(base_url: str) -> float:
        began = time.perf_counter()
        response = httpx.post(
            f"{base_url}/api/v1/knowledge-bases/{knowledge_base_id}/search",
            json={"query": query, "mode": "hybrid", "top_k": 5},
            headers={"Authorization": f"Bearer {key}"},
            timeout=WARM_CEILING_S,
        )
        elapsed = (time.perf_counter() - began) * 1000
        if response.status_code != 200 or not response.json().get("results"):
            raise CommandError(f"search failed: HTTP {response.status_code} {response.text[:200]}")
        return round(elapsed, 1)

    return search


def _warm_of(base_url: str) -> dict[str, Any]:
    return httpx.get(f"{base_url}/healthz", timeout=30).json().get("warm", {})


def _wait_warm(base_url: str) -> dict[str, Any]:
    deadline = time.monotonic() + WARM_CEILING_S
    while True:
        warm = _warm_of(base_url)
        if warm.get("state") in ("warm", "failed"):
            return warm
        if time.monotonic() > deadline:
            raise CommandError(f"the web process was not warm after {WARM_CEILING_S:g} s")
        time.sleep(0.05)


def coldstart_table(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{r['chunks']:,} chunks ({r['embedding']} model), one gunicorn worker",
            f"start -> healthy {r['start_to_healthy_s']} s, -> warm {r['start_to_warm_s']} s "
            f"({r['warm_state'].get('state')})",
            f"first search after warm: {r['first_query_ms']} ms (then {r['second_query_ms']} ms)",
            f"first search during warm-up: {r['during_warm_query_ms']} ms",
            f"first search, warming off: {r['cold_first_query_ms']} ms "
            f"(then {r['cold_second_query_ms']} ms)",
        ]
    )
