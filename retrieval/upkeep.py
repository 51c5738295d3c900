"""Work that follows a change to a knowledge base, besides its BM25 index: the HNSW index for
its vector dimension, and the calibration of its fusion weights once ingestion settles.

Calibration is debounced: every change queues a task for ``RAG_CALIBRATION_DELAY_S`` later with
the version it saw; a task whose knowledge base has changed since leaves the work to the task of
the later change, so a burst of uploads calibrates once, after the last one.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection

from knowledge.models import Chunk, KnowledgeBase

logger = logging.getLogger(__name__)


def queue_settled_calibration(knowledge_base_id: int, index_version: int) -> None:
    from retrieval.tasks import calibrate_when_settled

    try:
        calibrate_when_settled.apply_async(
            (knowledge_base_id, index_version),
            countdown=settings.RAG_CALIBRATION_DELAY_S,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0.2},
        )
    except Exception as exc:  # broker down: the next change (or an admin) calibrates
        logger.warning(
            "could not queue calibration of knowledge base %s (%s)", knowledge_base_id, exc
        )


def calibrate_when_settled(knowledge_base_id: int, index_version: int) -> str:
    from retrieval.calibration import calibrate

    kb = KnowledgeBase.objects.select_related("tenant").filter(pk=knowledge_base_id).first()
    if kb is None:
        return "deleted"
    if kb.index_version != index_version:
        return "superseded"  # still changing: the task of the last change calibrates
    if kb.weight_mode != KnowledgeBase.WeightMode.CALIBRATED:
        return "fixed weights"
    chunks = Chunk.objects.filter(knowledge_base=kb).count()
    if chunks < settings.RAG_CALIBRATION_MIN_CHUNKS:
        return f"too few chunks ({chunks})"
    previous = (kb.calibration or {}).get("chunks")
    if previous and abs(chunks - previous) < 0.1 * previous:
        return "unchanged enough"
    result = calibrate(kb.tenant, kb)
    return f"calibrated: vector {result.vector_weight}, keyword {result.keyword_weight}"


def ensure_vector_index_for(kb: KnowledgeBase) -> None:
    from retrieval.vector import ensure_vector_index

    if kb.embedding_dimensions and not connection.in_atomic_block:
        ensure_vector_index(kb.embedding_dimensions)
