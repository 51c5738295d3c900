"""``bench fairness --docs N``: how long one tenant's single document takes while another
tenant has N documents queued, against the same document alone, on real Celery workers.

Two throwaway tenants, A and B, each with a ``hash``-embedding knowledge base. ``--workers``
worker processes run with ``RAG_DISPATCH_IN_FLIGHT`` equal to their number. First B uploads one
document at a time with the workers idle (``--alone`` times; the median is the peer, and the
fastest is reported too: each ready document also queues its knowledge base's index warm-up,
which the next one can wait behind). Then A
uploads N documents in one commit, and once the workers are busy with them B uploads one more:
its time from upload to ``ready`` is compared with the peer (the issue's target: within 3x). The
clock runs from B's upload commit; A's backlog is dropped with the tenants at the end.
"""

from __future__ import annotations

import io
import os
import statistics
import time
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

from bench.ingest import _workers, documents
from bench.throwaway import throwaway_tenants
from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Document
from knowledge.services.documents import create_document
from knowledge.services.knowledge_bases import create_knowledge_base

POLL_S = 0.05


def add_fairness_arguments(parser) -> None:
    parser.add_argument("--docs", type=int, default=1000, help="tenant A's queued documents")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--alone", type=int, default=3, help="B's documents timed alone")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait at most")


def bench_fairness(options: dict[str, Any]) -> dict[str, Any]:
    n, workers = options["docs"], options["workers"]
    if n < 1 or workers < 1 or options["alone"] < 1:
        raise CommandError("--docs, --workers and --alone must be at least 1")
    texts = documents(n + options["alone"] + 1, options["seed"])
    os.environ["RAG_DISPATCH_IN_FLIGHT"] = str(workers)  # the workers' setting
    with throwaway_tenants("fairness", 2) as (tenant_a, tenant_b), _workers(workers):
        kb_a, kb_b = (_kb(t) for t in (tenant_a, tenant_b))
        alone = [
            _timed(kb_b, f"alone-{i}.md", texts[n + i], options["timeout"])
            for i in range(options["alone"])
        ]
        with transaction.atomic():
            for i in range(n):
                _upload(kb_a, f"a-{i}.md", texts[i])
        _wait(lambda: _count(kb_a, Document.Status.READY) >= workers, options["timeout"])
        before = _count(kb_a, Document.Status.READY)
        loaded = _timed(kb_b, "busy.md", texts[-1], options["timeout"])
        after = _count(kb_a, Document.Status.READY)
    peer = statistics.median(alone)
    return {
        "docs_a": n,
        "workers": workers,
        "b_alone_s": [round(s, 3) for s in alone],
        "b_alone_median_s": round(peer, 3),
        "b_with_a_queued_s": round(loaded, 3),
        "ratio": round(loaded / peer, 2),
        "ratio_to_fastest_alone": round(loaded / min(alone), 2),
        "a_done_while_b_waited": after - before,
        "a_waiting_when_b_ready": n - after,
    }


def _kb(tenant):
    return create_knowledge_base(
        tenant=tenant,
        name="fairness bench",
        embedding=EmbeddingConfig(provider="hash", dimensions=384),
        weight_mode="fixed",
    )


def _upload(kb, name: str, text: str) -> Document:
    return create_document(
        tenant=kb.tenant, knowledge_base=kb, name=name, stream=io.BytesIO(text.encode())
    )


def _count(kb, status: str) -> int:
    return Document.objects.filter(knowledge_base=kb, status=status).count()


def _wait(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise CommandError(f"gave up after {timeout:g} s")
        time.sleep(POLL_S)


def _timed(kb, name: str, text: str, timeout: float) -> float:
    """Seconds from the commit of one upload until the document is final."""
    with transaction.atomic():
        document = _upload(kb, name, text)
    started = time.perf_counter()
    final = Document.Status.final()
    _wait(lambda: Document.objects.filter(pk=document.pk, status__in=final).exists(), timeout)
    elapsed = time.perf_counter() - started
    status = Document.objects.values_list("status", flat=True).get(pk=document.pk)
    if status != Document.Status.READY:
        raise CommandError(f"B's document {name} ended {status}")
    return elapsed


def fairness_table(result: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"tenant A queued {result['docs_a']} documents on {result['workers']} workers",
            f"B's document alone:           {result['b_alone_median_s']:.3f} s (median of "
            f"{', '.join(f'{s:.3f}' for s in result['b_alone_s'])})",
            f"B's document behind A's queue: {result['b_with_a_queued_s']:.3f} s "
            f"({result['ratio']:.2f}x the median alone, {result['ratio_to_fastest_alone']:.2f}x "
            "the fastest; target <= 3x)",
            f"A's documents finished while B waited: {result['a_done_while_b_waited']}; "
            f"still waiting when B was ready: {result['a_waiting_when_b_ready']}",
        ]
    )
