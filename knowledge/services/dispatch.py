"""Fair dispatch of document processing between tenants, over the existing Celery workers.

Documents to process wait in the database (``pending``, ``dispatched_at`` empty) instead of in
the broker. The dispatcher keeps at most ``RAG_DISPATCH_IN_FLIGHT`` documents sent to workers
and not yet final, and fills free places round-robin across tenants: the tenant with the fewest
documents in flight goes first (ties: the tenant whose oldest waiting document is oldest), and
within a tenant the oldest document first. So a tenant with one document waiting is served at
the next free place, before the next of another tenant's thousand.

What stays true:

- One dispatcher at a time (a PostgreSQL transaction-level advisory lock); it runs on every
  upload or retry (``enqueue_processing``), after every document a worker finishes, and on the
  reaper's beat, so a free place is filled within one of those. Requests are folded: while one
  dispatch task is queued and not started (a Redis key it deletes as it starts), further
  requests send nothing, so a thousand uploads queue one dispatch, not a thousand messages
  ahead of everyone's documents in the broker.
- Nothing is lost: a document is marked dispatched in the transaction that queues its task; if
  the task is lost, the reaper finds the dispatched document that stopped moving and puts it
  back to wait. A dispatcher that dies leaves documents waiting for the next one.
- A document's place in the queue (``queue_position``) is computed from the same order: how
  many documents would be sent before it if nothing else arrived.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from knowledge.models import Document
from rag_project.celery import app, enqueue, unfold

logger = logging.getLogger(__name__)
LOCK_KEY = 0x6B62_6469_7370  # "kbdisp": the advisory lock of the dispatcher
REQUEST_KEY = "knowledge:dispatch-requested"
# A lost dispatch message folds requests for at most this long; the beat dispatches meanwhile.
REQUEST_TTL_S = 60
PENDING = Document.Status.PENDING.value
WAITING = Q(status=PENDING, dispatched_at__isnull=True)
IN_FLIGHT = Q(dispatched_at__isnull=False) & ~Q(status__in=Document.Status.final())

_local = threading.local()


# ------------------------------------------------------------------ the order (pure)


@dataclass(frozen=True)
class TenantQueue:
    """One tenant's side of the queue: documents in flight, documents waiting (oldest first),
    and its tie-break key (its oldest waiting document's creation time, then its id)."""

    tenant_id: int
    in_flight: int
    waiting: Sequence[int]
    oldest: tuple


def round_robin(queues: Iterable[TenantQueue], limit: int | None = None) -> list[int]:
    """Waiting document ids in the order they are sent: always to the tenant with the least
    load (in flight plus sent in this order), ties by ``oldest``; at most ``limit``."""
    heap = [(q.in_flight, q.oldest, q.tenant_id, 0, q) for q in queues if q.waiting]
    heapq.heapify(heap)
    order: list[int] = []
    while heap and (limit is None or len(order) < limit):
        load, oldest, tenant_id, taken, queue = heapq.heappop(heap)
        order.append(queue.waiting[taken])
        if taken + 1 < len(queue.waiting):
            heapq.heappush(heap, (load + 1, oldest, tenant_id, taken + 1, queue))
    return order


@dataclass(frozen=True)
class TenantLoad:
    in_flight: int
    waiting: int
    oldest: tuple


def position(loads: Mapping[int, TenantLoad], tenant_id: int, ahead_in_tenant: int) -> int:
    """The 1-based place in ``round_robin`` order of the tenant's document with
    ``ahead_in_tenant`` of its own waiting documents before it, from per-tenant counts alone:
    another tenant U is sent min(waiting, load_T + k - load_U (+1 when U wins ties)) first."""
    own = loads[tenant_id]
    reach = own.in_flight + ahead_in_tenant
    before = ahead_in_tenant
    for other_id, other in loads.items():
        if other_id == tenant_id or not other.waiting:
            continue
        wins_tie = (other.oldest, other_id) < (own.oldest, tenant_id)
        before += max(0, min(other.waiting, reach - other.in_flight + wins_tie))
    return before + 1


# ------------------------------------------------------------------ the dispatcher


def request_dispatch() -> None:
    """Ask for a dispatch once the current transaction commits (folded into one already
    queued and not started)."""
    enqueue("knowledge.dispatch_documents", fold=(REQUEST_KEY, REQUEST_TTL_S))


def dispatch() -> list[int]:
    """Send waiting documents to the workers while there is room; returns their ids. With
    tasks run inline (``task_always_eager``) it goes on until nothing waits, iteratively
    (a document's completion asks for a dispatch, which is this one)."""
    if getattr(_local, "active", False):
        return []
    _local.active = True
    try:
        unfold(REQUEST_KEY)  # requests from now on need a dispatch after this one
        sent: list[int] = []
        while True:
            batch = _dispatch_once()
            sent.extend(batch)
            if not batch or not app.conf.task_always_eager:
                return sent
    finally:
        _local.active = False


def _dispatch_once() -> list[int]:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        in_flight = dict(
            Document.objects.filter(IN_FLIGHT)
            .values_list("tenant_id")
            .annotate(n=Count("pk"))
            .order_by()
        )
        room = settings.RAG_DISPATCH_IN_FLIGHT - sum(in_flight.values())
        if room <= 0:
            return []
        chosen = round_robin(_queues(in_flight, room), room)
        now = timezone.now()
        Document.objects.filter(WAITING, pk__in=chosen).update(dispatched_at=now, updated_at=now)
        for document_id in chosen:
            enqueue("knowledge.process_document", document_id)
    if chosen:
        logger.debug("dispatched documents %s", chosen)
    return chosen


def _queues(in_flight: dict[int, int], room: int) -> list[TenantQueue]:
    """Each tenant's first ``room`` waiting documents (no tenant can get more this round)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tenant_id, id, created_at FROM ("
            "  SELECT tenant_id, id, created_at, ROW_NUMBER() OVER ("
            "    PARTITION BY tenant_id ORDER BY created_at, id) AS n"
            "  FROM knowledge_document"
            "  WHERE status = %s AND dispatched_at IS NULL"
            ") w WHERE n <= %s ORDER BY tenant_id, created_at, id",
            [PENDING, room],
        )
        rows = cursor.fetchall()
    waiting: dict[int, list[tuple[int, datetime]]] = {}
    for tenant_id, document_id, created_at in rows:
        waiting.setdefault(tenant_id, []).append((document_id, created_at))
    return [
        TenantQueue(
            tenant_id,
            in_flight.get(tenant_id, 0),
            [document_id for document_id, _ in docs],
            (docs[0][1], docs[0][0]),
        )
        for tenant_id, docs in waiting.items()
    ]


# ------------------------------------------------------------------ places in the queue


def queue_positions(documents: Sequence[Document]) -> dict[int, int | None]:
    """Each document's place in the queue: None unless it is pending; 0 once it was sent to a
    worker (it starts when one is free); else 1 + how many documents, of every tenant, would
    be sent before it. Two queries whatever the number of documents."""
    waiting = [d for d in documents if d.status == Document.Status.PENDING and not d.dispatched_at]
    result: dict[int, int | None] = {
        d.pk: (0 if d.status == Document.Status.PENDING else None) for d in documents
    }
    if not waiting:
        return result
    loads = _loads()
    ahead = _ahead_in_tenant([d.pk for d in waiting])
    for document in waiting:
        if document.tenant_id in loads and document.pk in ahead:
            result[document.pk] = position(loads, document.tenant_id, ahead[document.pk])
    return result


def _loads() -> dict[int, TenantLoad]:
    """Per tenant with documents waiting or in flight: both counts and its tie-break key."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tenant_id,"
            " count(*) FILTER (WHERE NOT waiting),"
            " count(*) FILTER (WHERE waiting),"
            " min(created_at) FILTER (WHERE waiting),"
            " (array_agg(id ORDER BY created_at, id) FILTER (WHERE waiting))[1]"
            " FROM (SELECT tenant_id, id, created_at,"
            "   (status = %s AND dispatched_at IS NULL) AS waiting FROM knowledge_document"
            "   WHERE (status = %s AND dispatched_at IS NULL)"
            "   OR (dispatched_at IS NOT NULL AND NOT status = ANY(%s))) d"
            " GROUP BY tenant_id",
            [PENDING, PENDING, list(Document.Status.final())],
        )
        rows = cursor.fetchall()
    return {
        tenant_id: TenantLoad(in_flight, waiting, (oldest, first))
        for tenant_id, in_flight, waiting, oldest, first in rows
    }


def _ahead_in_tenant(document_ids: list[int]) -> dict[int, int]:
    """For each waiting document, how many of its tenant's waiting documents are older."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, n FROM ("
            "  SELECT id, ROW_NUMBER() OVER (PARTITION BY tenant_id ORDER BY created_at, id) - 1"
            "  AS n FROM knowledge_document"
            "  WHERE status = %s AND dispatched_at IS NULL"
            "  AND tenant_id IN (SELECT tenant_id FROM knowledge_document WHERE id = ANY(%s))"
            ") w WHERE id = ANY(%s)",
            [PENDING, document_ids, document_ids],
        )
        return dict(cursor.fetchall())
