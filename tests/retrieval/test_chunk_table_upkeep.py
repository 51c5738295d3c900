"""Upkeep of the chunk table after large deletes (retrieval.vector.upkeep): past the thresholds
the HNSW indexes are rebuilt concurrently and the table vacuumed, what an interrupted rebuild
left is dropped, and the vector leg still answers through the rebuilt index."""

import contextlib

import pytest
from django.db import DataError, connection, connections, transaction

from knowledge.embeddings import EmbeddingConfig, config_for_knowledge_base, get_embedder
from knowledge.services.documents import delete_document
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.search.types import SearchFilters
from retrieval.vector import upkeep
from retrieval.vector.hnsw import ensure_vector_index, index_name, vector_search
from tests.factories import add_document

pytestmark = pytest.mark.django_db(transaction=True)  # REINDEX/VACUUM refuse transactions

DIMS = 24  # no other test uses it: this test's own HNSW index
LEFTOVER = f"{index_name(DIMS)}_ccnew"


@pytest.fixture
def purge_queue():
    yield
    from rag_project.celery import app

    app.control.purge()  # tasks queued by these commits are not left for other tests


@pytest.fixture
def kb(tenant, purge_queue):
    kb = create_knowledge_base(
        tenant=tenant, name="Upkeep", embedding=EmbeddingConfig(provider="hash", dimensions=DIMS)
    )
    yield kb
    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX IF EXISTS "{LEFTOVER}"')


def _long(topic: str, paragraphs: int) -> str:
    sentence = f"The {topic} needs attention in section {{i}} of the maintenance plan. "
    return "\n\n".join(sentence.format(i=i) * 25 for i in range(paragraphs))


def _leave_an_invalid_index():
    """What an interrupted REINDEX CONCURRENTLY leaves: an invalid index that PostgreSQL keeps
    (a concurrent build failing on a row leaves one the same way)."""
    failing = f'CREATE INDEX CONCURRENTLY "{LEFTOVER}" ON knowledge_chunk ((1 / (id - id)))'
    with connection.cursor() as cursor, contextlib.suppress(DataError):  # division by zero
        cursor.execute(failing)
    assert LEFTOVER in upkeep.hnsw_indexes(valid=False)


def test_a_large_delete_rebuilds_the_hnsw_index_and_vacuums(kb, settings):
    settings.RAG_VACUUM_MIN_DEAD_ROWS = 20
    settings.RAG_VACUUM_DEAD_RATIO = 0.1
    kept = add_document(kb, "kept.txt", "The gearbox bearing grease is changed every spring.")
    doomed = add_document(kb, "doomed.txt", _long("cooling tower", 60))
    assert doomed.chunk_count >= 20
    ensure_vector_index(DIMS)
    assert index_name(DIMS) in upkeep.hnsw_indexes(valid=True)

    quiet = upkeep.tidy_chunk_table()
    assert not quiet.vacuumed and quiet.reindexed == [] and "below" in quiet.reason

    delete_document(tenant=kb.tenant, document=doomed)
    _leave_an_invalid_index()
    health = upkeep.table_health()
    assert health.dead >= doomed.chunk_count and upkeep.needs_upkeep(health)

    report = upkeep.tidy_chunk_table()
    assert report.vacuumed and report.dead >= doomed.chunk_count
    assert index_name(DIMS) in report.reindexed
    assert report.dropped_invalid == [LEFTOVER]
    assert upkeep.hnsw_indexes(valid=False) == []
    assert upkeep.table_health().dead < settings.RAG_VACUUM_MIN_DEAD_ROWS
    assert not upkeep.tidy_chunk_table().vacuumed  # nothing left to do

    # The vector search still finds the chunk that was kept.
    embedder = get_embedder(config_for_knowledge_base(kb))
    found = vector_search(
        tenant_id=kb.tenant_id,
        knowledge_base_id=kb.pk,
        model=kb.embedding_model,
        dimensions=DIMS,
        query_vector=embedder.embed_query("gearbox bearing grease"),
        limit=5,
        filters=SearchFilters(),
    )
    assert [chunk_id for chunk_id, _ in found] == list(kept.chunks.values_list("pk", flat=True))


def test_force_runs_below_the_thresholds_and_one_process_at_a_time(kb):
    add_document(kb, "small.txt", "A small document.")
    assert upkeep.tidy_chunk_table(force=True).vacuumed
    other = connections.create_connection("default")  # another session holds the lock
    try:
        with other.cursor() as held:
            held.execute("SELECT pg_advisory_lock(%s)", [upkeep.LOCK_KEY])
        skipped = upkeep.tidy_chunk_table(force=True)
        assert not skipped.vacuumed and "another process" in skipped.reason
        # Released explicitly: closing the connection would release it too, but only once the
        # server's backend has noticed and exited, after close() returns (a race under load).
        with other.cursor() as held:
            held.execute("SELECT pg_advisory_unlock(%s)", [upkeep.LOCK_KEY])
    finally:
        other.close()
    assert upkeep.tidy_chunk_table(force=True).vacuumed


def test_upkeep_refuses_to_run_inside_a_transaction(kb):
    with transaction.atomic(), pytest.raises(RuntimeError, match="outside a transaction"):
        upkeep.tidy_chunk_table(force=True)
