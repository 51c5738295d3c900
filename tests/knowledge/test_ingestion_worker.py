"""Ingestion through real Celery worker processes: uploads reach ``ready`` by themselves, and a
worker killed in the middle of a document leaves no partial chunks; the reaper and a new worker
finish the job."""

import io

import pytest
from django.test import override_settings

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document
from knowledge.services import documents as services
from knowledge.services import upkeep
from knowledge.services.knowledge_bases import create_knowledge_base
from tests.conftest import wait_until
from tests.factories import TenantFactory
from tests.fake_services import FakeEmbeddingsServer, Scripted

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def status_of(document) -> tuple[str, int]:
    return tuple(Document.objects.filter(pk=document.pk).values_list("status", "progress").get())


def test_uploads_are_processed_by_the_worker_without_anyone_asking(celery_worker_process):
    tenant = TenantFactory()
    kb = create_knowledge_base(tenant=tenant, name="KB", embedding=EmbeddingConfig(provider="hash"))
    docs = [
        services.create_document(
            tenant=tenant,
            knowledge_base=kb,
            name="a.md",
            stream=io.BytesIO(b"# Pumps\n\nThe P-100 pump moves water."),
        ),
        services.create_document(
            tenant=tenant,
            knowledge_base=kb,
            name="b.txt",
            stream=io.BytesIO("水泵每天运行八小时。".encode()),
        ),
    ]
    for document in docs:
        wait_until(lambda d=document: status_of(d)[0] in ("ready", "failed"), "processing")
        assert status_of(document) == ("ready", 100)
        assert Chunk.objects.filter(document=document).count() >= 1


def test_worker_killed_mid_document_leaves_no_partial_chunks_and_the_document_recovers(
    worker_factory, settings
):
    paragraphs = "\n\n".join(
        f"Paragraph {i} describes valve V-{i:03d} and its maintenance schedule in detail."
        for i in range(24)
    )
    with FakeEmbeddingsServer(dimensions=8) as server:
        worker_env = {"EMBEDDING_BASE_URL": server.base_url, "EMBEDDING_BATCH_SIZE": "1"}
        with override_settings(EMBEDDING_BASE_URL=server.base_url, EMBEDDING_BATCH_SIZE=1):
            tenant = TenantFactory()
            kb = create_knowledge_base(
                tenant=tenant,
                name="Slow",
                chunk_size=120,
                chunk_overlap=0,
                embedding=EmbeddingConfig(
                    provider="openai", model="m", dimensions=8, base_url=server.base_url
                ),
            )
            # One chunk per embedding request; the provider answers eight, then holds the
            # ninth: the worker is in the middle of the document, for as long as the test needs
            # (rather than a provider slow enough that the test could catch it in time).
            answered = 8
            server.script = [Scripted() for _ in range(answered)] + [Scripted(held=True)]
            first = worker_factory(**worker_env).start()
            document = services.create_document(
                tenant=tenant,
                knowledge_base=kb,
                name="valves.md",
                stream=io.BytesIO(paragraphs.encode()),
            )
            server.wait_for_requests(answered + 1)
            status, progress = status_of(document)
            assert status == "embedding" and progress > 30, (status, progress)
            first.kill()

            assert Chunk.objects.filter(document=document).count() == 0
            assert status_of(document)[0] == "embedding"  # stuck, as a dead worker leaves it

            server.script = []  # the provider answers again
            settings.RAG_STUCK_AFTER_S = 0
            assert upkeep.reap_stuck_documents() == {"requeued": 1, "failed": 0}
            worker_factory(**worker_env).start()
            wait_until(lambda: status_of(document)[0] in ("ready", "failed"), "reprocessing")

    document.refresh_from_db()
    assert (document.status, document.progress) == ("ready", 100), document.error
    positions = list(
        Chunk.objects.filter(document=document)
        .order_by("position")
        .values_list("position", flat=True)
    )
    assert positions == list(range(document.chunk_count)) and len(positions) >= 10
