"""Warm processes: what a first search would load, loaded at start-up in the background.

Without it a new web process pays for everything on its first search: jieba's dictionary, the
local embedding model, the knowledge base's BM25 index and vector matrix, each many times what
a warm search costs (figures: docs/performance.md, "Cold start").
``rag_project.lifecycle.process_started`` (sent by the WSGI module after gunicorn's fork and by
each Celery worker process) starts ``warm`` in a daemon thread when ``RAG_WARM_ON_START`` is
on:

1. the analyser: jieba's dictionary and the default analyser;
2. every embedding model a knowledge base uses (local models load their weights; remote
   providers hold no model and cost nothing);
3. in a second thread from the start (see ``warm``): the ``RAG_WARM_KNOWLEDGE_BASES``
   largest knowledge bases with ready documents (largest first: their cold load costs the
   most), each one's BM25 view into this process's L1 and, in a web process, its vector matrix
   into the matrix cache, within those caches' budgets; then BM25's compiled loops
   (``retrieval.bm25.kernels``) and, in a web process, the vector leg's
   (``retrieval.vector.kernels``, for IVF bases' int8 codes), which a search needs and would
   otherwise load itself. A Celery worker process warms the BM25 views because it
   writes each change's version as a delta on the view it holds: without one, its first
   change to a knowledge base would load every segment first (CPU taken from the searches
   beside it, and that document's visibility waits for it); and BM25's loops because they
   spare that writer a pass over a large segment's postings per change (``SegmentedIndex``);
4. web processes only, then: the URL configuration and every view module it routes to (else
   Django imports them on the first request, the MCP SDK above all);
5. last, the heap: one full garbage collection, then everything loaded is frozen out of later
   full collections (``rag_project.heap``: a warm process's heap makes each full collection a
   long stall).

A search arriving meanwhile waits for nothing it does not need, and for what it needs no longer
than a cold load: each load is single-flight in its cache (the analyser's and local models'
locks, the BM25 store's per-knowledge-base flight, the matrix cache's load lock), so the search
shares the load already under way instead of starting a second one. A step that fails is logged
and named in ``/healthz`` (``warm.state`` ``failed``); the process serves, and that part loads
on first use, as in a process that does not warm.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Q, Sum

from knowledge.analysis import get_analyzer
from knowledge.analysis.chinese import load_jieba
from knowledge.embeddings import config_for_knowledge_base, get_embedder
from knowledge.models import Document, KnowledgeBase
from rag_project import heap
from rag_project.lifecycle import WARM, process_started
from retrieval.bm25 import kernels as bm25_kernels
from retrieval.bm25store import bm25_available, get_store
from retrieval.vector import kernels as vector_kernels
from retrieval.vector.matrix import get_matrix_cache

logger = logging.getLogger(__name__)

_started = False
_start_lock = threading.Lock()


def on_process_started(sender: str, **kwargs) -> None:
    if settings.RAG_WARM_ON_START:
        start(kind=sender)


def start(kind: str = "web") -> threading.Thread | None:
    """Warm this process in a daemon thread, once per process (None if already started)."""
    global _started
    with _start_lock:
        if _started:
            return None
        _started = True
    WARM.begin()
    thread = threading.Thread(target=warm, args=(kind,), name="rag-warmup", daemon=True)
    thread.start()
    return thread


def warm(kind: str = "web") -> None:
    """Load what first searches need (see the module's doc), noting each step in ``WARM``.

    Two threads: the analyser then the embedding models in this one; the knowledge bases'
    indexes (and in a web process the routes) in a second, at the same time. The model and the
    indexes are independent and each takes seconds, and a search sent meanwhile needs both:
    loaded one after the other, it would wait for their sum, longer than a cold process loading
    them itself (figures: docs/performance.md, "Cold start")."""
    started = time.perf_counter()
    second = None
    try:
        steps = _web_steps if kind == "web" else _worker_steps
        second = threading.Thread(target=steps, name="rag-warmup-indexes", daemon=True)
        second.start()
        _step("analyzer", _analyzer)
        _step("embedding_models", _models)
    finally:
        if second is not None:
            second.join()
        # What was loaded lives as long as the process: out of full collections, before the
        # process says warm (the one full collection this takes lands in the warm-up).
        _step("frozen_objects", heap.freeze)
        WARM.end()
        connection.close()
    logger.info(
        "warm-up (%s) done in %.1f s: %s", kind, time.perf_counter() - started, WARM.as_dict()
    )


def _web_steps() -> None:
    try:
        _step("knowledge_bases", _knowledge_bases)
        # After them: a search sent meanwhile loads its index first, then waits for these.
        _step("bm25_compiled", _bm25_compiled)
        _step("vector_compiled", _vector_compiled)
        _step("routes", _routes)
    finally:
        connection.close()


def _worker_steps() -> None:
    try:
        _step("knowledge_bases", lambda: _knowledge_bases(vectors=False))
        _step("bm25_compiled", _bm25_compiled)
    finally:
        connection.close()


def _step(name: str, load) -> None:
    began = time.perf_counter()
    try:
        value = load()
    except Exception as exc:  # warming must never stop the process from serving
        logger.exception("warm-up step %s failed", name)
        WARM.fail(f"{name}: {type(exc).__name__}: {exc}")
        return
    finally:
        close_old_connections()
    WARM.note(name, value)
    WARM.note(f"{name}_s", round(time.perf_counter() - began, 3))


def _analyzer() -> bool:
    load_jieba()
    get_analyzer().tokens("预热分词词典 warming the analyser")
    return True


def _models() -> list[str]:
    seen, loaded = set(), []
    for kb in KnowledgeBase.objects.order_by("pk"):
        config = config_for_knowledge_base(kb)
        if config.provider != "local" or (config.provider, config.model) in seen:
            continue
        seen.add((config.provider, config.model))
        embedder = get_embedder(config)
        if embedder is not None:
            embedder.embed_query("warm-up")
            loaded.append(f"{config.provider}:{config.model}")
    return loaded


def _bm25_compiled() -> bool:
    """BM25's compiled query loops (``retrieval.bm25.kernels``)."""
    bm25_kernels.get()
    return True


def _vector_compiled() -> bool:
    """The vector leg's compiled loops (``retrieval.vector.kernels``), for IVF bases' codes:
    whether they are in use."""
    vector_kernels.get()
    return True


def _routes() -> int:
    """Import the URL configuration (and so the views) as the first request would; the number
    of top-level routes."""
    from django.urls import get_resolver

    return len(get_resolver().url_patterns)


def hottest_knowledge_bases(limit: int):
    """The knowledge bases worth loading first: those with the most ready chunks."""
    return list(
        KnowledgeBase.objects.annotate(
            ready_chunks=Sum(
                "documents__chunk_count", filter=Q(documents__status=Document.Status.READY)
            )
        )
        .filter(ready_chunks__gt=0)
        .order_by("-ready_chunks", "-updated_at")[:limit]
    )


def _knowledge_bases(vectors: bool = True) -> list[int]:
    warmed = []
    for kb in hottest_knowledge_bases(settings.RAG_WARM_KNOWLEDGE_BASES):
        if bm25_available():
            get_store().get(kb, fresh=True)
        if vectors and settings.VECTOR_L1_MAX_BYTES > 0 and kb.embedding_dimensions:
            get_matrix_cache().get(kb)
        warmed.append(kb.pk)
    return warmed


process_started.connect(on_process_started, dispatch_uid="retrieval.warmup")
