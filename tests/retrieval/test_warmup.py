"""Start-up warm-up (retrieval.warmup): what it loads, what /healthz says, and that a failure
leaves the process serving. The whole path in a real gunicorn process is `bench coldstart`
(tests/retrieval/test_bench_scale.py)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading

import pytest
from django.conf import settings
from django.test import override_settings

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from rag_project.lifecycle import WARM, process_started
from retrieval import warmup
from retrieval.bm25store import get_store
from retrieval.core.identity import identity_of
from retrieval.vector.matrix import get_matrix_cache
from tests.factories import TenantFactory, add_document

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(warmup, "_started", False)
    WARM.reset()
    yield
    WARM.reset()


@pytest.fixture(autouse=True)
def full_health_report():
    """/healthz with the warm-up's steps, as RAG_HEALTH_DETAILS=public gives it to anyone."""
    with override_settings(RAG_HEALTH_DETAILS="public"):
        yield


def knowledge_base(name: str, documents: int):
    kb = create_knowledge_base(
        tenant=TenantFactory(),
        name=name,
        embedding=EmbeddingConfig(provider="hash", dimensions=32),
    )
    for n in range(documents):
        add_document(kb, f"{n}.md", f"# Pump {n}\n\nThe pump {n} needs oil every {n} weeks.")
    return kb


def warm_one_knowledge_base(kind: str) -> int:
    """Warm a process of ``kind`` allowed one knowledge base; the objects it froze."""
    WARM.begin()
    try:
        with override_settings(RAG_WARM_KNOWLEDGE_BASES=1, RAG_GC_FREEZE_ABOVE_MS=50.0):
            warmup.warm(kind)
        return gc.get_freeze_count()
    finally:
        gc.unfreeze()


def test_warm_loads_the_analyser_and_the_largest_knowledge_bases(client):
    large, small = knowledge_base("Large", 3), knowledge_base("Small", 1)
    get_store().l1.discard(large.pk)
    get_store().l1.discard(small.pk)
    get_matrix_cache().lru.discard(large.pk)

    frozen = warm_one_knowledge_base("web")
    assert frozen > 0  # what it loaded is out of full collections

    state = client.get("/healthz").json()["warm"]
    assert state["state"] == "warm" and state["seconds"] >= 0
    assert state["loaded"]["frozen_objects"] > 0
    assert state["loaded"]["analyzer"] is True and state["loaded"]["routes"] > 0
    assert state["loaded"]["bm25_compiled"] is True  # BM25's compiled query loops
    assert state["loaded"]["vector_compiled"] is True  # the vector leg's, for IVF codes
    assert state["loaded"]["knowledge_bases"] == [large.pk]  # the largest first, one allowed
    assert get_store().l1.peek(identity_of(large)) is not None
    assert get_store().l1.peek(identity_of(small)) is None
    assert large.pk in get_matrix_cache().lru


def test_a_worker_warms_the_bm25_views_it_writes_deltas_on_but_no_vectors(client):
    large = knowledge_base("Large", 3)
    get_store().l1.discard(large.pk)
    get_matrix_cache().lru.discard(large.pk)

    warm_one_knowledge_base("worker")

    loaded = client.get("/healthz").json()["warm"]["loaded"]
    assert loaded["knowledge_bases"] == [large.pk] and loaded["bm25_compiled"] is True
    assert "vector_compiled" not in loaded and "routes" not in loaded
    held = get_store().l1.peek(identity_of(large))
    assert held is not None and held.signature  # the stored version: a delta's base
    assert large.pk not in get_matrix_cache().lru


def test_warming_a_web_process_imports_what_its_first_request_would():
    # In a fresh interpreter (this one has long imported everything): the URL configuration
    # and the views it routes to, the MCP SDK among them, are loaded before any request.
    script = (
        "import sys, django; django.setup(); from retrieval import warmup; "
        "before = 'mcp.server' in sys.modules; warmup._routes(); "
        "print(before, 'mcp.server' in sys.modules, 'retrieval.api.views' in sys.modules)"
    )
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "rag_project.settings.test"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=settings.BASE_DIR, env=env, capture_output=True,
        text=True, timeout=300, check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["False", "True", "True"]


def test_a_failing_step_is_reported_and_the_process_still_serves(client, monkeypatch):
    def broken(limit):
        raise RuntimeError("the index is unreadable")

    monkeypatch.setattr(warmup, "hottest_knowledge_bases", broken)
    WARM.begin()
    warmup.warm("web")

    response = client.get("/healthz")
    assert response.status_code == 200
    state = response.json()["warm"]
    assert state["state"] == "failed"
    assert state["errors"] == ["knowledge_bases: RuntimeError: the index is unreadable"]
    assert state["loaded"]["analyzer"] is True  # the steps before it still ran


def test_a_started_process_warms_once_and_only_when_asked(client, monkeypatch):
    runs = []

    def warm(kind: str) -> None:
        runs.append(kind)
        WARM.end()

    monkeypatch.setattr(warmup, "warm", warm)

    with override_settings(RAG_WARM_ON_START=False):
        process_started.send(sender="web")
    assert runs == [] and client.get("/healthz").json()["warm"] == {"state": "off"}

    with override_settings(RAG_WARM_ON_START=True):
        process_started.send(sender="worker")
        process_started.send(sender="worker")  # a second signal starts nothing more
    for thread in [t for t in threading.enumerate() if t.name == "rag-warmup"]:
        thread.join()
    assert runs == ["worker"]
    assert client.get("/healthz").json()["warm"]["state"] == "warm"
