"""``bench churn --chunks N --docs-per-s R --seconds S``: search while the knowledge base changes.

A throwaway tenant gets a knowledge base of N synthetic chunks (fixed weights, see
``bench.corpus``) and its HNSW index, as a deployed one has. Vectors (``--vectors``), as in
``bench search``: ``realistic`` (the default) draws them like the local model's embeddings of
real text (``bench.realistic``), the knowledge base records that model, and each query's vector
is drawn near the chunk its words come from and put in the query-embedding cache (Redis, which
every web process reads) under its text; the documents uploaded during the run are embedded by
the worker with the model itself. ``hash`` stores the ``hash`` provider's embeddings, which
have no neighbourhood structure: from ``VECTOR_IVF_MIN_ROWS`` chunks the IVF then has to probe
about a fifth of its lists (227 of 1,095 at 300k) where real embeddings need 3%.

A real Celery worker (``--workers``) processes uploads and the index work each change
queues. Clients search as a deployment's do (``--serve gunicorn``, the default): over HTTP,
the REST search endpoint with a read key (the standard library's ``http.client``, the
lightest client on the cores the server shares), served by gunicorn with ``--web-workers``
sync workers (production settings, the warm-up on); ``--serve threads`` runs them as threads
calling ``RAGService`` in this process instead (one interpreter: its lock, not the index, then
sets the pace). Then:

- a quiet phase (``--quiet-seconds``): the clients search the unchanging knowledge base, the
  peer of the churn figures on the same machine in the same run (``quiet_search_*``); it
  starts once the Celery worker is done warming up (``worker_warm_s``), as in a deployment
  at steady state;
- for S seconds, the same 8 clients (``--clients``) search (hybrid, queries drawn from the
  corpus, each as fast as answers come) while every 1/R seconds one new document (with a
  unique marker word) is uploaded through the upload service and one of the original
  documents deleted through the delete service, by a process of their own
  (``bench.churn_writer``), as a deployment's uploads come from other programs;
- a probe searches (keyword, the same way as the clients) for the marker of every document
  once it is ``ready`` and records the time from its ``processed_at`` (the moment it became
  ready) to the first search that returns it: ``visible_*``.

Printed: search p50/p99 over the churn (and per 10 s window on stderr, so a cliff shows), the
same of each search's own time (``search_own_*``, ``quiet_search_own_*``: its trace's
``total_ms``, the service's time without the request around it or the queue in front of it) and
the medians of both over the slowest 1% (``slowest_1pct_ms``, ``slowest_1pct_own_ms``: a tail of
slow searches or of waiting), the churn's searches split by when they began
(``after_change_*``: within ``CHANGE_WINDOW_S``, 0.5 s, after a change began, while its work
runs; ``between_changes_*``: later) with the share of the slowest 1% that began in that window
(``slowest_1pct_after_change_share``), errors (searches that failed), visibility p50/max, BM25
merges in the run, the largest RSS of a web process (``process_rss_bytes``; each one's in
``web_rss_bytes``) and the bytes of vector matrices held on the host (``host_vector_bytes``:
the host files every web process maps, plus with ``--serve threads`` what this process holds
privately), and where the CPU went in each phase (``bench.cpu``): ``cpu_cores`` of the web
processes, the worker, PostgreSQL, Redis and the clients (this process, with ``--serve
gunicorn``) and the writer, and ``web_cpu_ms_per_search``; ``machine_gauge_ms``, the machine's
speed just before and just after the run (``bench.cpu.machine_gauge_ms``: compare runs whose
gauges agree). The tenant and its rows are removed at the end (``bench.throwaway``).
"""

from __future__ import annotations

import bisect
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management.base import CommandError
from django.db import close_old_connections, connection
from django.test import override_settings
from django.utils import timezone

from bench import corpus
from bench.cpu import CpuClock, machine_gauge_ms, postgres_server_pid, wait_until_idle
from bench.hostmem import gunicorn_workers
from bench.ingest import REPO, _workers, child_environment
from bench.load import gunicorn_process
from bench.search import (
    VECTORS,
    embedding_config,
    percentiles,
    realistic_model,
    remember_query_vectors,
    vector_index_around_fill,
)
from bench.throwaway import throwaway_tenants
from knowledge.models import Document
from knowledge.services.knowledge_bases import create_knowledge_base
from rag_project.redis_clients import shared_client
from retrieval.bm25store import get_store
from retrieval.search import RAGService
from tenancy.models import ApiKey
from tenancy.services import create_api_key

WINDOW_S = 10.0
# A change's own work (the writer's upload and deletion, the Celery worker processing the upload
# and building two BM25 versions, each web process catching up with both) runs in the first
# fraction of a second after the change begins (docs/performance.md, "Churn"): searches that
# begin within this long after a change began are reported apart from the others.
CHANGE_WINDOW_S = 0.5
PROBE_POLL_S = 0.02


def add_churn_arguments(parser) -> None:
    parser.add_argument("--chunks", type=int, default=300_000, help="chunks at the start")
    parser.add_argument("--docs-per-s", type=float, default=1.0, help="uploads (and deletes) /s")
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the churn")
    parser.add_argument("--clients", type=int, default=8, help="searching clients")
    parser.add_argument("--workers", type=int, default=1, help="Celery worker processes")
    parser.add_argument(
        "--serve",
        choices=["gunicorn", "threads"],
        default="gunicorn",
        help="clients over HTTP to gunicorn, or threads calling RAGService in this process",
    )
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument(
        "--quiet-seconds", type=float, default=20.0, help="searches before the churn starts"
    )
    parser.add_argument(
        "--vectors",
        choices=VECTORS,
        default="realistic",
        help="realistic: drawn like the local model's embeddings of real text; hash: the hash "
        "provider's",
    )
    parser.add_argument("--seed", type=int, default=7)


def bench_churn(options: dict[str, Any]) -> dict[str, Any]:
    n, rate, seconds = options["chunks"], options["docs_per_s"], options["seconds"]
    if n < corpus.CHUNKS_PER_DOCUMENT or rate <= 0 or seconds <= 0 or options["clients"] < 1:
        raise CommandError(
            f"--chunks must be at least {corpus.CHUNKS_PER_DOCUMENT}; --docs-per-s, --seconds "
            "and --clients must be positive"
        )
    if options["web_workers"] < 1 or options["quiet_seconds"] < 0:
        raise CommandError("--web-workers must be positive and --quiet-seconds at least 0")
    model = realistic_model(options["vectors"])
    with vector_index_around_fill() as build_index, throwaway_tenants("churn") as (tenant,):
        kb = create_knowledge_base(
            tenant=tenant,
            name="churn bench",
            embedding=embedding_config(model),
            weight_mode="fixed",
        )
        started = time.perf_counter()
        vocab = corpus.Vocabulary.build()
        target = corpus.Target(kb, n)
        corpus.create_documents(target)
        samples = corpus.fill(
            [target], vocab, seed=options["seed"], vectors=model.chunks if model else None
        )[kb.pk]
        build_index()
        queries, sources = _queries(vocab, samples, options["seed"])
        if model is not None:
            remember_query_vectors(kb, target, model, queries, sources, options["seed"])
        with _searchers(tenant, kb, options) as (searcher, web_pids):
            get_store().warm(kb)  # stored (L2/L3, signed with the run's key) as after ingestion
            setup_s = time.perf_counter() - started
            first = time.perf_counter()
            searcher()(queries[0], "hybrid", 5)  # the cold load, not measured below
            cold_ms = (time.perf_counter() - first) * 1000
            with _workers(options["workers"]) as workers, _writer(kb, options) as writer:
                cpu = CpuClock.of_processes(
                    web=web_pids,
                    worker=[worker.pid for worker in workers],
                    database=postgres_server_pid(connection),
                    clients=os.getpid() if options["serve"] == "gunicorn" else None,
                    writer=writer.pid,
                    redis_client=shared_client(settings.REDIS_URL),
                )
                # The quiet phase is the peer of a steady deployment: not the worker's warm-up
                # (loading the model and indexes takes much of a core for seconds).
                worker_warm_s = wait_until_idle(cpu.parts["worker"])
                run = _Run(searcher, kb, queries, options, web_pids, cpu, writer)
                gauge_before = machine_gauge_ms()
                result = run.go() | {"worker_warm_s": worker_warm_s}
                result["machine_gauge_ms"] = {"before": gauge_before, "after": machine_gauge_ms()}
        result |= {
            "chunks": n,
            "docs_per_s": rate,
            "seconds": seconds,
            "clients": options["clients"],
            "serve": options["serve"],
            "vectors": options["vectors"],
            "web_workers": options["web_workers"] if options["serve"] == "gunicorn" else 0,
            "setup_s": round(setup_s, 1),
            "first_search_ms": round(cold_ms, 1),
        }
    return result


# (query, mode, top_k) -> (the hits' document ids, the search's own time in ms: its trace's
# ``total_ms``, what the service spent, without the request around it or the queue before it)
Search = Callable[[str, str, int], tuple[list[int], float]]
PROBE_BATCH = 50  # markers per probe search (below RAG_MAX_TOP_K)


@contextmanager
def _searchers(tenant, kb, options: dict[str, Any]):
    """(a factory of per-client search functions, the web processes' pids)."""
    if options["serve"] == "threads":
        service = RAGService(tenant)

        def in_process() -> Search:
            def search(query: str, mode: str, top_k: int = 5) -> tuple[list[int], float]:
                found = service.search(query, kb.pk, mode=mode, top_k=top_k)
                return [hit.document_id for hit in found.hits], found.trace.total_ms

            return search

        yield in_process, [os.getpid()]
        return
    _, key = create_api_key(tenant=tenant, name="churn bench", scopes=[ApiKey.Scope.READ])
    # The web processes check the index payloads the Celery worker and this process sign: one
    # key for all three, and one the production profile accepts.
    secret = settings.SECRET_KEY
    if secret.startswith("django-insecure") or len(secret) < 50:
        secret = secrets.token_urlsafe(64)
    with (
        _environ(SECRET_KEY=secret),  # the Celery worker, started later, inherits it
        override_settings(SECRET_KEY=secret),
        gunicorn_process(options["web_workers"], {"SECRET_KEY": secret}) as (base_url, master),
    ):
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        path = f"/api/v1/knowledge-bases/{kb.pk}/search"
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

        def over_http() -> Search:
            def search(query: str, mode: str, top_k: int = 5) -> tuple[list[int], float]:
                # The standard library's client, a connection per request: gunicorn's sync
                # workers close each one after answering anyway, and the clients share the
                # server's cores, so the lightest client leaves the most of them to it.
                body = json.dumps({"query": query, "mode": mode, "top_k": top_k})
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                try:
                    conn.request("POST", path, body, headers)
                    response = conn.getresponse()
                    payload = response.read()
                finally:
                    conn.close()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {payload[:200]!r}")
                answer = json.loads(payload)
                hits = [hit["document_id"] for hit in answer["results"]]
                return hits, answer["trace"]["total_ms"]

            return search

        yield over_http, gunicorn_workers(master.pid, options["web_workers"])


@contextmanager
def _environ(**values: str):
    """Set environment variables for the block (child processes started in it inherit them)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _queries(
    vocab: corpus.Vocabulary, samples: list[list[int]], seed: int
) -> tuple[list[str], list[int]]:
    """500 queries of 3 distinct words of a random sampled chunk, and that chunk's index."""
    rng = np.random.default_rng([seed, 5])
    queries, sources = [], []
    for i in rng.integers(0, len(samples), size=500).tolist():
        words = list(dict.fromkeys(samples[i]))
        picks = rng.choice(len(words), size=min(3, len(words)), replace=False).tolist()
        queries.append(" ".join(vocab.words[words[p]] for p in picks))
        sources.append(i)
    return queries, sources


@contextmanager
def _writer(kb, options: dict[str, Any]):
    """``bench.churn_writer``'s process for ``kb``, started and ready (Django loaded, its
    victims chosen); ended at the end of the block."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.churn_writer", str(kb.pk), str(options["seed"])],
        cwd=REPO,
        env=child_environment(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if process.stdout.readline().strip() != "ready":
            raise CommandError(f"the churn writer did not start (exit status {process.wait()})")
        yield process
    finally:
        process.stdin.close()  # a writer that never got "go" exits on it
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class _Run:
    def __init__(
        self,
        searcher,
        kb,
        queries: list[str],
        options: dict[str, Any],
        web_pids,
        cpu: CpuClock,
        writer: subprocess.Popen,
    ):
        self.searcher, self.kb, self.queries, self.options = searcher, kb, queries, options
        self.web_pids, self.cpu, self.writer = web_pids, cpu, writer
        self.churning = threading.Event()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        # (time since the churn began, ms, the search's own ms)
        self.latencies: list[tuple[float, float, float]] = []
        self.quiet: list[tuple[float, float]] = []  # (ms, the search's own ms) before the churn
        self.errors: list[str] = []
        self.pending: dict[int, str] = {}  # uploaded document id -> marker
        self.changes: list[float] = []  # when each change began (perf_counter), ascending
        self.visible: list[float] = []
        self.not_visible: list[int] = []
        self.started = 0.0

    def go(self) -> dict[str, Any]:
        merges_before = _merges(self.kb)
        threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True)
            for i in range(self.options["clients"])
        ]
        probe = threading.Thread(target=self._probe, daemon=True)
        marks = [(time.perf_counter(), self.cpu.read())]
        self.started = marks[0][0]
        for thread in threads:
            thread.start()
        self.stop.wait(self.options["quiet_seconds"])  # the quiet phase: searches only
        marks.append((time.perf_counter(), self.cpu.read()))
        self.started = marks[1][0]
        self.churning.set()
        probe.start()
        uploaded = self._churn()
        marks.append((time.perf_counter(), self.cpu.read()))
        self.stop.set()
        for thread in [*threads, probe]:
            thread.join()
        # Documents uploaded near the end: give the probe a while to see them (not counted in
        # the search latency, which stopped with the clients).
        deadline = time.perf_counter() + 60
        while self.pending and time.perf_counter() < deadline:
            self._probe_once()
            time.sleep(PROBE_POLL_S)
        self.not_visible = list(self.pending)
        close_old_connections()
        with self.lock:  # the clients are done; a count for each phase's CPU per search
            counts = {"quiet": len(self.quiet), "churn": len(self.latencies)}
        return self._result(uploaded, _merges(self.kb) - merges_before) | _cpu(marks, counts)

    # ------------------------------------------------------------------ threads

    def _client(self, number: int) -> None:
        rng = np.random.default_rng([self.options["seed"], 6, number])
        search = self.searcher()
        try:
            while not self.stop.is_set():
                query = self.queries[int(rng.integers(len(self.queries)))]
                churning = self.churning.is_set()
                began = time.perf_counter()
                try:
                    _, own_ms = search(query, "hybrid", 5)
                except Exception as exc:  # counted, and the run goes on
                    with self.lock:
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                done = time.perf_counter()
                with self.lock:
                    ms = (done - began) * 1000
                    if churning:
                        self.latencies.append((done - self.started, ms, own_ms))
                    else:
                        self.quiet.append((ms, own_ms))
        finally:
            connection.close()

    def _churn(self) -> int:
        """The writer's churn (``bench.churn_writer``), its uploads handed to the probe."""
        seconds = self.options["seconds"] - (time.perf_counter() - self.started)
        go = time.perf_counter()
        self.writer.stdin.write(f"go {seconds} {1.0 / self.options['docs_per_s']}\n")
        self.writer.stdin.flush()
        for line in self.writer.stdout:
            kind, *values = line.split()
            if kind == "uploaded":
                with self.lock:
                    self.pending[int(values[0])] = values[1]
                    self.changes.append(go + float(values[2]))
            elif kind == "done":
                return int(values[0])
        raise CommandError(f"the churn writer exited ({self.writer.wait()}) before it was done")

    def _probe(self) -> None:
        try:
            while not self.stop.is_set():
                self._probe_once()
                time.sleep(PROBE_POLL_S)
        finally:
            connection.close()

    @cached_property
    def _probe_search(self) -> Search:
        return self.searcher()

    def _probe_once(self) -> None:
        with self.lock:
            waiting = dict(self.pending)
        if not waiting:
            return
        ready = dict(
            Document.objects.filter(pk__in=list(waiting), status=Document.Status.READY).values_list(
                "pk", "processed_at"
            )
        )
        # One keyword search for the markers of up to PROBE_BATCH ready documents (each marker
        # is in one document only): a search per document would put the probe's own queueing
        # behind the clients into every document's time to visible, times the documents.
        ids = sorted(ready)
        for start in range(0, len(ids), PROBE_BATCH):
            batch = ids[start : start + PROBE_BATCH]
            query = " ".join(waiting[document_id] for document_id in batch)
            found = set(self._probe_search(query, "keyword", len(batch))[0])
            now = timezone.now()
            for document_id in batch:
                if document_id in found:
                    lag = (now - ready[document_id]).total_seconds()
                    with self.lock:  # the probe thread and the final wait may both see it
                        if self.pending.pop(document_id, None) is not None:
                            self.visible.append(lag)

    # ------------------------------------------------------------------ result

    def _result(self, uploaded: int, merges: int) -> dict[str, Any]:
        times = [ms for _, ms, _ in self.latencies]
        for start in np.arange(0, self.options["seconds"], WINDOW_S):
            window = [ms for t, ms, _ in self.latencies if start <= t < start + WINDOW_S]
            if window:
                print(
                    f"churn {start:5.0f}-{start + WINDOW_S:.0f} s: {len(window):5d} searches, "
                    f"p50 {np.percentile(window, 50):7.1f} ms, p99 "
                    f"{np.percentile(window, 99):7.1f} ms, max {max(window):7.1f} ms",
                    file=sys.stderr,
                )
        for message in sorted(set(self.errors))[:5]:
            print(f"churn error: {message}", file=sys.stderr)
        rss = {pid: _rss_bytes(pid) for pid in self.web_pids}
        quiet = self.quiet or [(0.0, 0.0)]
        churn = [(ms, own) for _, ms, own in self.latencies] or [(0.0, 0.0)]
        return {
            "quiet_searches": len(self.quiet),
            **percentiles([ms for ms, _ in quiet], "quiet_search"),
            **percentiles([own for _, own in quiet], "quiet_search_own"),
            "searches": len(times),
            **percentiles([ms for ms, _ in churn], "search"),
            **percentiles([own for _, own in churn], "search_own"),
            **_slowest(churn),
            **self._by_change(),
            "search_max_ms": round(max(times), 1) if times else None,
            "errors": len(self.errors),
            "uploaded": uploaded,
            "visible": len(self.visible),
            "not_visible": len(self.not_visible),
            "visible_p50_s": round(statistics.median(self.visible), 3) if self.visible else None,
            "visible_max_s": round(max(self.visible), 3) if self.visible else None,
            "merges": merges,
            "process_rss_bytes": max(rss.values(), default=0),
            "web_rss_bytes": list(rss.values()),
            "host_vector_bytes": host_vector_bytes(self.options["serve"] == "threads"),
        }

    def _by_change(self) -> dict[str, Any]:
        """The churn's searches split by when they began: within ``CHANGE_WINDOW_S`` after a
        change (an upload and a deletion) began, while its work runs, or later. The share of
        the slowest 1% that began in that window says how much of the tail the changes make;
        the later searches' percentiles say what the same clients get between changes."""
        after, between, near_flags = [], [], []
        for done, ms, _ in self.latencies:
            began = self.started + done - ms / 1000
            last = bisect.bisect_right(self.changes, began) - 1
            near = last >= 0 and began - self.changes[last] < CHANGE_WINDOW_S
            (after if near else between).append(ms)
            near_flags.append(near)
        # The slowest 1% as ``_slowest`` takes them: the len // 100 longest (at least one).
        ranked = sorted(range(len(near_flags)), key=lambda i: self.latencies[i][1])
        slowest = ranked[-max(1, len(ranked) // 100) :] if ranked else []
        slowest_after = sum(near_flags[i] for i in slowest)
        return {
            "after_change_window_s": CHANGE_WINDOW_S,
            "after_change_searches": len(after),
            **_percentiles_or_none(after, "after_change_search"),
            "between_changes_searches": len(between),
            **_percentiles_or_none(between, "between_changes_search"),
            "slowest_1pct_after_change_share": (
                round(slowest_after / len(slowest), 3) if slowest else None
            ),
        }


def _percentiles_or_none(samples: list[float], prefix: str) -> dict[str, Any]:
    if samples:
        return percentiles(samples, prefix)
    return {f"{prefix}_p{p}_ms": None for p in (50, 95, 99)}


def _slowest(searches: list[tuple[float, float]]) -> dict[str, Any]:
    """Of the slowest 1% of searches (by the client's time), the median client time and the
    median of the search's own time in them: a tail made of slow searches shows as close
    figures, one made of waiting (the queue, the request around the search) as far apart."""
    ranked = sorted(searches)[-max(1, len(searches) // 100) :]
    return {
        "slowest_1pct_ms": round(statistics.median(ms for ms, _ in ranked), 1),
        "slowest_1pct_own_ms": round(statistics.median(own for _, own in ranked), 1),
    }


def _cpu(marks: list[tuple[float, dict]], counts: dict[str, int]) -> dict[str, Any]:
    """The cores each part used in the quiet and churn phases (``bench.cpu``), and the web
    processes' CPU per search in each (with ``--serve threads`` the clients are in it too)."""
    cores, per_search = {}, {}
    for phase, (start, before), (end, after) in zip(
        ("quiet", "churn"), marks[:-1], marks[1:], strict=True
    ):
        cores[phase] = CpuClock.cores(before, after, end - start)
        web = cores[phase].get("web")
        searches = counts[phase]
        known = web is not None and searches > 0
        per_search[phase] = round(web * (end - start) * 1000 / searches, 2) if known else None
    return {"cpu_cores": cores, "web_cpu_ms_per_search": per_search}


def _merges(kb) -> int:
    """BM25 merges of the knowledge base's index so far (since its last full build)."""
    from retrieval.models import BM25Manifest

    found = BM25Manifest.objects.filter(knowledge_base=kb).values_list("merges", flat=True)
    return found.first() or 0


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def host_vector_bytes(in_process: bool) -> int:
    """Bytes of vector matrices held on this host: the shared host files (once for every
    process), plus, when this process is the web process, what it holds privately (gunicorn
    workers' private rows are the changes since the file, a few MB, not counted)."""
    from retrieval.vector import hostfile
    from retrieval.vector.matrix import get_matrix_cache

    private = int(get_matrix_cache().lru.nbytes) if in_process else 0
    return hostfile.host_bytes() + private


def churn_table(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{r['chunks']:,} chunks ({r['vectors']} vectors), {r['docs_per_s']} documents/s "
            "in and out for "
            f"{r['seconds']:g} s, {r['clients']} clients searching (hybrid) through "
            f"{r['serve']}" + (f" ({r['web_workers']} workers)" if r["web_workers"] else ""),
            f"before the churn, {r['quiet_searches']:,} searches: p50 "
            f"{r['quiet_search_p50_ms']} ms, p99 {r['quiet_search_p99_ms']} ms",
            f"searches {r['searches']:,}: p50 {r['search_p50_ms']} ms, p99 {r['search_p99_ms']} "
            f"ms, max {r['search_max_ms']} ms, errors {r['errors']}",
            f"the search's own time (trace total_ms): quiet p50 {r['quiet_search_own_p50_ms']} "
            f"ms, p99 {r['quiet_search_own_p99_ms']} ms; churn p50 {r['search_own_p50_ms']} ms, "
            f"p99 {r['search_own_p99_ms']} ms; slowest 1% {r['slowest_1pct_ms']} ms, of it own "
            f"{r['slowest_1pct_own_ms']} ms (medians)",
            f"begun within {r['after_change_window_s']} s after a change: "
            f"{r['after_change_searches']:,} searches, p50 {r['after_change_search_p50_ms']} ms, "
            f"p99 {r['after_change_search_p99_ms']} ms, "
            f"{r['slowest_1pct_after_change_share']} of the slowest 1%; later: "
            f"{r['between_changes_searches']:,}, p50 {r['between_changes_search_p50_ms']} ms, "
            f"p99 {r['between_changes_search_p99_ms']} ms",
            f"new documents {r['uploaded']}: visible after ready p50 {r['visible_p50_s']} s, "
            f"max {r['visible_max_s']} s ({r['not_visible']} never seen)",
            f"machine gauge (ms of CPU for a fixed piece of Python; less is faster): before "
            f"{r['machine_gauge_ms']['before']}, after {r['machine_gauge_ms']['after']}",
            f"BM25 merges {r['merges']}; RSS {r['process_rss_bytes'] / 2**20:.0f} MiB; vectors "
            f"{r['host_vector_bytes'] / 2**20:.0f} MiB",
            *(
                f"CPU {phase} (cores): "
                + ", ".join(
                    f"{part} {cores:.2f}"
                    for part, cores in r["cpu_cores"][phase].items()
                    if cores is not None
                )
                + f"; web {r['web_cpu_ms_per_search'][phase]} ms a search"
                for phase in ("quiet", "churn")
            ),
        ]
    )
