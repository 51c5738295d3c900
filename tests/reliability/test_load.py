"""Load with concurrent change: 8 writers upload, replace and delete documents while 16 readers
search, against a live gunicorn, a real worker and their own PostgreSQL and Redis, for
``RAG_LOAD_SECONDS`` (60 in ``make reliability``; 5 by default, a smoke run)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from tests.reliability.faults.stack import Stack, wait_for

pytestmark = pytest.mark.reliability

WRITERS, READERS = 8, 16
WORDS = ["pump", "valve", "seal", "sensor", "bearing", "motor", "filter", "gasket"]

CHECK = """
import json
from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.bm25store import get_store

kb = KnowledgeBase.objects.get(pk=KB)
bad_counts = [
    (d.pk, d.chunk_count, d.chunks.count())
    for d in Document.objects.filter(knowledge_base=kb)
    if d.status == "ready" and d.chunk_count != d.chunks.count()
]
ready_chunks = set(
    Chunk.objects.filter(knowledge_base=kb, document__status="ready").values_list("pk", flat=True)
)
non_ready_chunks = Chunk.objects.filter(knowledge_base=kb).exclude(document__status="ready").count()
index = set(int(i) for i in get_store().get(kb).index.doc_ids)
statuses = sorted(set(Document.objects.filter(knowledge_base=kb).values_list("status", flat=True)))
print("RESULT " + json.dumps({
    "bad_counts": bad_counts, "missing": sorted(ready_chunks - index),
    "extra": sorted(index - ready_chunks), "ready_chunks": len(ready_chunks),
    "non_ready_chunks": non_ready_chunks, "statuses": statuses,
}))
"""


def text_for(writer: int, serial: int) -> str:
    rng = random.Random(writer * 100_000 + serial)
    body = " ".join(rng.choice(WORDS) for _ in range(120))
    return f"# W{writer} doc {serial}\n\nwriter{writer} serial{serial} {body}"


def test_writers_and_readers_at_once():
    """8 writers and 16 readers: no 5xx, deleted documents never returned, index = database"""
    seconds = float(os.environ.get("RAG_LOAD_SECONDS", "5"))
    errors: list[str] = []
    deleted: dict[int, float] = {}  # document id -> when its delete had committed
    searches: list[tuple[float, set[int]]] = []
    lock = threading.Lock()
    with Stack(chunk_size=200, RAG_STUCK_AFTER_S="30") as stack:
        stack.start_web(workers=2, threads=12)
        stack.start_worker()
        stop = time.monotonic() + seconds

        def writer(number: int) -> None:
            rng = random.Random(number)
            mine: dict[str, int] = {}  # file name -> document id
            serial = 0
            with stack.client() as client:
                while time.monotonic() < stop:
                    action = rng.choice(["upload", "upload", "replace", "delete"])
                    if action != "upload" and not mine:
                        action = "upload"
                    try:
                        if action == "delete":
                            name = rng.choice(sorted(mine))
                            document_id = mine.pop(name)
                            response = client.delete(f"/documents/{document_id}")
                            if response.status_code == 204:
                                with lock:
                                    deleted[document_id] = time.monotonic()
                        else:
                            serial += 1
                            name = (
                                rng.choice(sorted(mine))
                                if action == "replace"
                                else f"w{number}-{serial}.md"
                            )
                            response = client.post(
                                f"/knowledge-bases/{stack.kb}/documents",
                                files={"files": (name, text_for(number, serial))},
                            )
                            if response.status_code == 202:
                                mine[name] = response.json()["documents"][0]["id"]
                    except Exception as exc:  # a dropped connection is a failure too
                        response = None
                        errors.append(f"{action}: {exc!r}")
                    if response is not None and response.status_code >= 500:
                        errors.append(f"{action}: {response.status_code} {response.text[:200]}")
                    time.sleep(rng.uniform(0.05, 0.3))

        def reader(number: int) -> None:
            rng = random.Random(1000 + number)
            with stack.client() as client:
                while time.monotonic() < stop:
                    query = " ".join(rng.sample(WORDS, 2))
                    started = time.monotonic()
                    try:
                        response = client.post(
                            f"/knowledge-bases/{stack.kb}/search",
                            json={
                                "query": query,
                                "top_k": 50,
                                "mode": rng.choice(["keyword", "hybrid"]),
                            },
                        )
                    except Exception as exc:
                        errors.append(f"search: {exc!r}")
                        continue
                    if response.status_code != 200:
                        errors.append(f"search: {response.status_code} {response.text[:200]}")
                        continue
                    found = {h["document_id"] for h in response.json()["results"]}
                    with lock:
                        searches.append((started, found))

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        threads += [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 300)

        assert not errors, errors[:10]
        assert len(searches) > READERS and deleted, (len(searches), len(deleted))
        stale = [
            (document_id, started - committed)
            for started, found in searches
            for document_id, committed in deleted.items()
            if document_id in found and started > committed
        ]
        assert not stale, stale[:10]

        with stack.client() as client:
            wait_for(
                lambda: (
                    not client.get(
                        f"/knowledge-bases/{stack.kb}/documents",
                        params={"status": "pending,parsing,chunking,embedding,indexing"},
                    ).json()["count"]
                ),
                timeout=300,
                what="every document final",
            )
        result = stack.shell(CHECK.replace("KB", str(stack.kb)))
        assert result["statuses"] == ["ready"], result
        assert not result["bad_counts"], result
        assert not result["missing"] and not result["extra"], result
        assert result["non_ready_chunks"] == 0 and result["ready_chunks"] > 0, result
