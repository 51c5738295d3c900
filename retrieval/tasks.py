"""Celery tasks of ``retrieval``: thin wrappers that take ids and call one service."""

from celery import shared_task
from django.db import OperationalError

from retrieval import changes
from retrieval.vector import upkeep


@shared_task(
    name=changes.INVALIDATE_AND_WARM,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def invalidate_and_warm_bm25(knowledge_base_id: int, index_version: int | None = None) -> str:
    return changes.invalidate_and_warm(knowledge_base_id, index_version)


@shared_task(
    name=changes.MERGE_SEGMENTS,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def merge_bm25_segments(knowledge_base_id: int) -> str:
    return changes.merge_segments(knowledge_base_id)


@shared_task(name=changes.CALIBRATE_WHEN_SETTLED)
def calibrate_when_settled(knowledge_base_id: int, index_version: int) -> str:
    return changes.calibrate_when_settled(knowledge_base_id, index_version)


@shared_task(name="retrieval.reap_index_upkeep")
def reap_index_upkeep() -> dict[str, list[int]]:
    """The reaper of lost index work (beat, every 5 minutes)."""
    return changes.reap_index_upkeep()


@shared_task(name="retrieval.tidy_chunk_table")
def tidy_chunk_table() -> dict:
    """HNSW rebuild and VACUUM of the chunk table after large deletes (beat)."""
    return upkeep.tidy_chunk_table().to_dict()
