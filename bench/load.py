"""``bench load --clients C --seconds S``: the HTTP search API under concurrent load.

A throwaway tenant gets a knowledge base of ``--chunks`` synthetic chunks (``hash`` embeddings,
see ``bench.corpus``) and a read API key. gunicorn then serves the project with
the production settings (``rag_project.settings.production``, ``DEBUG`` false, a SECRET_KEY
generated for the run, ``ALLOWED_HOSTS=127.0.0.1``) on a free port of 127.0.0.1, with
``--workers`` sync workers, on this command's database and Redis. C client threads (one
``httpx.Client`` each, keep-alive) post hybrid searches of random queries to
``/api/v1/knowledge-bases/<id>/search`` as fast as answers come back, first for
``--warmup`` seconds (each worker loads the BM25 index into its L1 and its connections), then
for S measured seconds. Every non-200 answer or transport error counts as an error.

The per-key rate limit (``API_THROTTLE_RATE``, 600/min by default) would turn this into a
measurement of the throttle, so the server runs with ``API_THROTTLE_RATE=1000000/min``: the
throttle's Redis round trip still runs on every request. Only 127.0.0.1 is ever targeted.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from bench import corpus
from bench.search import percentiles, vector_index_around_fill
from bench.throwaway import throwaway_tenants
from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from tenancy.models import ApiKey
from tenancy.services import create_api_key

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
START_CEILING_S = 300  # for gunicorn's workers to start and answer


def add_load_arguments(parser) -> None:
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=60, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5, help="unmeasured seconds first")
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks in the knowledge base")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)


def bench_load(options: dict[str, Any]) -> dict[str, Any]:
    clients, seconds = options["clients"], options["seconds"]
    if clients < 1 or seconds <= 0 or options["chunks"] < 20:
        raise CommandError("--clients >= 1, --seconds > 0 and --chunks >= 20, please")
    with (
        _knowledge_base(options["chunks"], options["seed"]) as (kb, key, queries),
        _gunicorn(options["workers"]) as base_url,
    ):
        url = f"{base_url}/api/v1/knowledge-bases/{kb.pk}/search"
        headers = {"Authorization": f"Bearer {key}"}
        body = {"mode": "hybrid", "top_k": options["top_k"]}
        if options["warmup"] > 0:
            _drive(url, headers, body, queries, clients, options["warmup"])
        latencies, errors, elapsed, samples = _drive(url, headers, body, queries, clients, seconds)
    result: dict[str, Any] = {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "workers": options["workers"],
        "chunks": options["chunks"],
        "requests": len(latencies) + errors,
        "rps": round((len(latencies) + errors) / elapsed, 1),
        "errors": errors,
        "error_samples": samples,
    }
    values = latencies or [0.0]
    result |= {k.removeprefix("http_"): v for k, v in percentiles(values, "http").items()}
    result["max_ms"] = round(max(values), 3)
    return result


@contextmanager
def _knowledge_base(chunks: int, seed: int, embedding: EmbeddingConfig | None = None):
    """A throwaway knowledge base of synthetic chunks (``hash`` vectors of corpus.DIMENSIONS;
    ``embedding`` may name another model of that dimension, whose queries then cost what that
    model costs), a read key, and queries."""
    with vector_index_around_fill() as build_index, throwaway_tenants("load") as (tenant,):
        kb = create_knowledge_base(
            tenant=tenant,
            name="load bench",
            embedding=embedding or EmbeddingConfig(provider="hash", dimensions=corpus.DIMENSIONS),
            weight_mode="fixed",
        )
        vocab = corpus.Vocabulary.build()
        target = corpus.Target(kb, chunks)
        corpus.create_documents(target)
        samples = corpus.fill([target], vocab, seed=seed)[kb.pk]
        build_index()
        _, key = create_api_key(tenant=tenant, name="load bench", scopes=[ApiKey.Scope.READ])
        rng = np.random.default_rng([seed, 4])
        queries = []
        for i in rng.integers(0, len(samples), size=500).tolist():
            words = list(dict.fromkeys(samples[i]))
            picks = rng.choice(len(words), size=min(3, len(words)), replace=False).tolist()
            queries.append(" ".join(vocab.words[words[p]] for p in picks))
        yield kb, key, queries


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@contextmanager
def _gunicorn(workers: int, extra_env: dict[str, str] | None = None):
    with gunicorn_process(workers, extra_env) as (base_url, _):
        yield base_url


@contextmanager
def gunicorn_process(workers: int, extra_env: dict[str, str] | None = None):
    """gunicorn serving this command's database and Redis: (base URL, the master process)."""
    port = _free_port()
    env = dict(os.environ)
    env |= {
        "DJANGO_SETTINGS_MODULE": "rag_project.settings.production",
        "SECRET_KEY": os.environ.get("BENCH_SECRET_KEY") or secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": HOST,
        "DEBUG": "false",
        "API_THROTTLE_RATE": "1000000/min",
        "RAG_HEALTH_DETAILS": "public",  # coldstart records the whole warm-up from /healthz
        "LOG_LEVEL": os.environ.get("BENCH_WEB_LOG_LEVEL", "WARNING"),  # INFO: builds, loads
        "PYTHONPATH": str(REPO),
    } | (extra_env or {})
    # The same database, Redis and vector files as this command (which may be a test
    # profile's): the workers are web processes of this host.
    if not os.environ.get("DATABASE_URL"):
        env["RAG_DB_NAME"] = connection.settings_dict["NAME"]
    env["REDIS_URL"] = settings.REDIS_URL
    env.setdefault("VECTOR_HOST_DIR", str(settings.VECTOR_HOST_DIR))
    command = [sys.executable, "-m", "gunicorn", "rag_project.wsgi:application"]
    command += ["--config", "python:rag_project.gunicorn_config"]  # as deployed
    command += ["--bind", f"{HOST}:{port}", "--workers", str(workers), "--timeout", "120"]
    command += ["--log-level", "warning"]
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL)  # logs: stderr
    base_url = f"http://{HOST}:{port}"
    try:
        # Ready when /healthz answers 200 (database and Redis reachable). Not the OpenAPI schema:
        # each worker generates it anew, which on a loaded machine can outlast every probe's
        # timeout, so a slow start would read as a failed one. The ceiling only matters if
        # gunicorn is broken.
        deadline = time.monotonic() + START_CEILING_S
        while True:
            if proc.poll() is not None:
                raise CommandError(f"gunicorn exited with {proc.returncode}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=30).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise CommandError(f"gunicorn did not answer within {START_CEILING_S:g} s")
            time.sleep(0.2)
        yield base_url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _drive(url, headers, body, queries, clients: int, seconds: float):
    """C threads posting searches for ``seconds``; (latencies ms, errors, elapsed, samples)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    samples: list[str] = []
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(i: int) -> None:
        rng = np.random.default_rng(i)
        with httpx.Client(headers=headers, timeout=30) as http:
            start.wait()
            while time.perf_counter() < deadline[0]:
                query = queries[int(rng.integers(len(queries)))]
                began = time.perf_counter()
                try:
                    response = http.post(url, json=body | {"query": query})
                    ok = response.status_code == 200
                    problem = f"HTTP {response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as exc:
                    ok, problem = False, repr(exc)
                if ok:
                    latencies[i].append((time.perf_counter() - began) * 1000)
                else:
                    errors[i] += 1
                    if len(samples) < 5:
                        samples.append(problem)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    return [x for part in latencies for x in part], sum(errors), elapsed, samples


def load_table(r: dict[str, Any]) -> str:
    return (
        f"Load: {r['clients']} clients for {r['seconds']:.0f} s against gunicorn "
        f"({r['workers']} workers, production settings), hybrid search over "
        f"{r['chunks']:,} chunks\n\n"
        f"{'requests':16}{r['requests']:>10}\n"
        f"{'requests/s':16}{r['rps']:>10.1f}\n"
        f"{'p50':16}{r['p50_ms']:>7.1f} ms\n"
        f"{'p95':16}{r['p95_ms']:>7.1f} ms\n"
        f"{'p99':16}{r['p99_ms']:>7.1f} ms\n"
        f"{'errors':16}{r['errors']:>10}" + "".join(f"\n  {s}" for s in r["error_samples"])
    )
