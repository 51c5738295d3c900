"""What follows a change to a knowledge base, in one place.

``knowledge`` bumps a knowledge base's ``index_version`` in the transaction of every change to
its searchable chunks and sends ``knowledge_base_changed``; ``retrieval.signals`` hands it here,
and on commit this module queues:

- ``invalidate_and_warm``: build the new version of the BM25 index into L3 and L2 (a delta on
  the stored one: one small segment and the deletions; see ``retrieval.bm25store``), so the
  first search after an upload does not pay for it; the HNSW index for the knowledge base's
  vector dimension is made sure of on the way. (Nothing is invalidated: the old manifest and
  segments are the base of the new one.) A build that leaves segments to fold, here or in a
  search, sends ``bm25store.merge_due``, and ``queue_merge`` queues ``merge_segments``;
- ``calibrate_when_settled``: the label-free calibration of the fusion weights and the relevance
  models (for every knowledge base: fixed weights still need relevance), debounced, one waiting
  task per knowledge base. A change queues it for ``RAG_CALIBRATION_DELAY_S`` later with the
  version it saw, unless one is already waiting (a Redis key, ``CALIBRATION_PENDING``, set
  while a task waits); the task clears the key first, then, if the knowledge base has changed
  since, queues itself again for the same delay with the newer version, so a burst of uploads
  calibrates once, after the last one (a task per change would find the knowledge base changed
  and do nothing, all but the last).

Both are safe to run twice. They are queued by name (``INVALIDATE_AND_WARM``...), since their
tasks (``retrieval.tasks``) call this module. A task that could not be queued (broker down) is
found by ``reap_index_upkeep`` (beat): until then a search builds the index on demand, as it
would for a cold process. A deleted knowledge base leaves nothing behind: its L3 rows cascade,
its L2 keys and this process's L1 entries go in ``forget_knowledge_base``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from knowledge.models import Document, KnowledgeBase
from rag_project.celery import enqueue, unfold
from retrieval.bm25store import build_time_limit_s, get_store
from retrieval.bm25store.merging import MAX_DELETED_FRACTION, MERGE_FACTOR
from retrieval.calibration import calibrate
from retrieval.models import BM25Manifest, BM25Segment
from retrieval.vector import hostfile
from retrieval.vector.hnsw import ensure_vector_index
from retrieval.vector.matrix import get_matrix_cache

logger = logging.getLogger(__name__)

CALIBRATION_PENDING = "retrieval:calibration-pending:{}"  # cache key per knowledge base id
# The tasks of this module's work, by the names ``retrieval.tasks`` registers them under.
INVALIDATE_AND_WARM = "retrieval.invalidate_and_warm_bm25"
MERGE_SEGMENTS = "retrieval.merge_bm25_segments"
CALIBRATE_WHEN_SETTLED = "retrieval.calibrate_when_settled"


def on_change(knowledge_base_id: int, index_version: int) -> None:
    """Queue the work that follows a change (call it inside the changing transaction: the
    tasks are sent when it commits)."""
    enqueue(INVALIDATE_AND_WARM, knowledge_base_id, index_version=index_version)
    queue_calibration(knowledge_base_id, index_version)


def queue_merge(knowledge_base_id: int) -> None:
    """Queue ``merge_segments``: a build left segments to fold (``bm25store.merge_due``)."""
    enqueue(MERGE_SEGMENTS, knowledge_base_id)


def queue_calibration(knowledge_base_id: int, index_version: int) -> None:
    """Queue ``calibrate_when_settled`` ``RAG_CALIBRATION_DELAY_S`` after the commit, unless a
    task for the knowledge base is already waiting (it will see this change when it runs)."""
    enqueue(
        CALIBRATE_WHEN_SETTLED,
        knowledge_base_id,
        index_version,
        countdown=settings.RAG_CALIBRATION_DELAY_S,
        # Outlives the delay and a while in a busy queue; the beat reaper also finds knowledge
        # bases whose calibration is out of date.
        fold=(
            CALIBRATION_PENDING.format(knowledge_base_id),
            settings.RAG_CALIBRATION_DELAY_S + 300,
        ),
    )


def invalidate_and_warm(knowledge_base_id: int, index_version: int | None = None) -> str:
    """Build the KB's current index into L3 and L2 (a delta on the stored one when possible).

    ``index_version`` is the version the change produced: if the KB has moved past it, a later
    task is queued for the later change and this one leaves the work to it (a burst of uploads
    builds once, not once per document).
    """
    store = get_store()
    kb = KnowledgeBase.objects.filter(pk=knowledge_base_id).first()
    if kb is None:
        store.invalidate(knowledge_base_id)
        return "deleted"
    if index_version is not None and kb.index_version > index_version:
        return "superseded"
    stored = store.l3.version(kb.pk)
    if stored is not None and stored >= kb.index_version:
        return "current"  # a duplicate delivery, or a search built it first
    try:
        handle = store.warm(kb)
    except KnowledgeBase.DoesNotExist:
        return "deleted"
    ensure_vector_index_for(kb)
    how = f" ({handle.built})" if handle.built else ""
    return f"warmed v{handle.version} from {handle.tier}{how}"


def merge_segments(knowledge_base_id: int) -> str:
    """Fold the KB's small segments and drop deleted chunks (see bm25store.merging); delete
    segments dropped by earlier merges once their grace period is over."""
    kb = KnowledgeBase.objects.filter(pk=knowledge_base_id).first()
    if kb is None:
        return "deleted"
    try:
        return get_store().merge(kb)
    except KnowledgeBase.DoesNotExist:
        return "deleted"


def forget_knowledge_base(
    knowledge_base_id: int, tenant_id: int | None = None, epoch: int | None = None
) -> None:
    """A deleted KB leaves nothing behind: its rows cascade; L2, this process's L1 and the
    host's vector files go here (other hosts' files are never read again: their directory
    names the KB's creation time; they go with the host's data directory)."""
    get_store().invalidate(knowledge_base_id)
    get_matrix_cache().discard(knowledge_base_id)
    if tenant_id is not None and epoch is not None:
        hostfile.forget(tenant_id, knowledge_base_id, epoch)


def calibrate_when_settled(knowledge_base_id: int, index_version: int) -> str:
    """Calibrate the knowledge base if it has not changed since ``index_version`` (else queue
    this again, see the module docstring) and has changed enough since its last calibration."""
    unfold(CALIBRATION_PENDING.format(knowledge_base_id))  # later changes queue their own
    kb = KnowledgeBase.objects.select_related("tenant").filter(pk=knowledge_base_id).first()
    if kb is None:
        return "deleted"
    if kb.index_version != index_version:
        # Still changing: wait for it to settle (unless a change since the key was cleared
        # has already queued a task).
        queue_calibration(kb.pk, kb.index_version)
        return "superseded"
    chunks = _searchable_chunks(kb)
    if chunks < settings.RAG_CALIBRATION_MIN_CHUNKS:
        return f"too few chunks ({chunks})"
    if not _needs_calibration(kb.calibration, chunks):
        return "unchanged enough"
    result = calibrate(kb.tenant, kb)
    return f"calibrated: vector {result.vector_weight}, keyword {result.keyword_weight}"


def ensure_vector_index_for(kb: KnowledgeBase) -> None:
    if kb.embedding_dimensions and not connection.in_atomic_block:
        ensure_vector_index(kb.embedding_dimensions)


def reap_index_upkeep() -> dict[str, list[int]]:
    """Queue what a lost task would have done (beat): a BM25 build for every knowledge base
    whose stored index (L3) is older than its version, a merge for every one with segments to
    fold or old segments to delete, and a calibration for every knowledge base whose last
    calibration is missing or out of date. The tasks check again when they run, so queuing
    one too many costs a lookup."""
    stale_index = list(
        KnowledgeBase.objects.annotate(
            stored=Subquery(
                BM25Manifest.objects.filter(knowledge_base=OuterRef("pk")).values("version")[:1]
            )
        )
        .filter(Q(stored__isnull=True) | Q(stored__lt=F("index_version")))
        .filter(documents__status=Document.Status.READY)
        .distinct()
        .values_list("pk", "index_version")
    )
    for kb_id, version in stale_index:
        enqueue(INVALIDATE_AND_WARM, kb_id, index_version=version)
    grace = timezone.now() - timedelta(seconds=build_time_limit_s())
    to_merge = sorted(
        set(
            BM25Manifest.objects.filter(
                Q(segment_count__gte=MERGE_FACTOR)
                | Q(deleted_count__gte=MAX_DELETED_FRACTION * F("chunk_count"), deleted_count__gt=0)
            ).values_list("knowledge_base_id", flat=True)
        )
        | set(
            BM25Segment.objects.filter(dropped_at__lt=grace).values_list(
                "knowledge_base_id", flat=True
            )
        )
    )
    for kb_id in to_merge:
        enqueue(MERGE_SEGMENTS, kb_id)
    uncalibrated = []
    for kb in KnowledgeBase.objects.annotate(
        chunks=Sum("documents__chunk_count", filter=Q(documents__status=Document.Status.READY))
    ):
        chunks = kb.chunks or 0
        if chunks >= settings.RAG_CALIBRATION_MIN_CHUNKS and _needs_calibration(
            kb.calibration, chunks
        ):
            enqueue(CALIBRATE_WHEN_SETTLED, kb.pk, kb.index_version)
            uncalibrated.append(kb.pk)
    return {
        "bm25": [kb_id for kb_id, _ in stale_index],
        "merge": to_merge,
        "calibration": uncalibrated,
    }


def _searchable_chunks(kb: KnowledgeBase) -> int:
    return (
        Document.objects.filter(knowledge_base=kb, status=Document.Status.READY).aggregate(
            n=Sum("chunk_count")
        )["n"]
        or 0
    )


def _needs_calibration(calibration: dict | None, chunks: int) -> bool:
    """No calibration yet, or the knowledge base grew or shrank by a tenth since."""
    previous = (calibration or {}).get("chunks")
    return not previous or abs(chunks - previous) >= 0.1 * previous
