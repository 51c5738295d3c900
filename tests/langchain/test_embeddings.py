"""Embedding adapters both ways: our providers as LangChain Embeddings, and a LangChain
Embeddings as a knowledge base's provider through the real ingestion pipeline and search."""

import io

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from knowledge.embeddings import EmbeddingConfig, EmbeddingError, get_embedder
from knowledge.embeddings.hashing import HashEmbedder
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.documents import create_document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from retrieval.langchain import (
    KnowledgeBaseVectorStore,
    LangChainEmbedder,
    ProviderEmbeddings,
    register_langchain_embeddings,
)
from retrieval.langchain.embeddings import model_name
from retrieval.search import RAGService
from tests.factories import KnowledgeBaseFactory, add_document
from tests.langchain.conftest import Flaky

pytestmark = pytest.mark.django_db

FAKE = "langchain_core.embeddings.fake.DeterministicFakeEmbedding"


class Named(DeterministicFakeEmbedding):
    model: str = "acme-embed-v2"


def test_a_provider_is_a_langchain_embeddings(manuals):
    embeddings = ProviderEmbeddings.for_knowledge_base(manuals)
    own = HashEmbedder(64)
    assert embeddings.embed_query("pump seal") == own.embed_query("pump seal")
    assert embeddings.embed_documents(["a valve", "a pump"]) == own.embed_documents(
        ["a valve", "a pump"]
    )


async def test_a_provider_embeds_asynchronously(manuals):
    embeddings = ProviderEmbeddings.for_knowledge_base(manuals)
    assert await embeddings.aembed_query("valve") == HashEmbedder(64).embed_query("valve")


def test_the_provider_none_makes_no_vectors():
    with pytest.raises(ValueError, match="makes no vectors"):
        ProviderEmbeddings(EmbeddingConfig(provider="none")).embed_query("anything")


def test_a_langchain_embeddings_is_our_embedder(embeddings):
    embedder = LangChainEmbedder(embeddings)
    assert (embedder.provider, embedder.model, embedder.dimensions) == ("langchain", FAKE, 6)
    assert embedder.embed_query("foo") == embeddings.embed_query("foo")
    assert embedder.embed_documents(["foo", "bar"]) == embeddings.embed_documents(["foo", "bar"])
    assert model_name(Named(size=6)) == "tests.langchain.test_embeddings.Named:acme-embed-v2"


def test_vectors_of_another_length_are_refused(embeddings):
    embedder = LangChainEmbedder(embeddings, dimensions=8)
    with pytest.raises(EmbeddingError, match="6-dimensional vector, not 8"):
        embedder.embed_query("foo")


def test_a_registered_langchain_embeddings_embeds_uploads_and_queries(tenant, embeddings):
    config = register_langchain_embeddings(embeddings)
    assert config == EmbeddingConfig(provider="langchain", model=FAKE, dimensions=6)
    kb = create_knowledge_base(tenant=tenant, name="LangChain-embedded", embedding=config)
    assert (kb.embedding_provider, kb.embedding_model, kb.embedding_dimensions) == (
        "langchain",
        FAKE,
        6,
    )
    document = add_document(kb, "valves.txt", "Valve V-7 is a gate valve.")
    add_document(kb, "pumps.txt", "The P-100 pump moves cooling water.")
    chunk = Chunk.objects.get(document=document)
    assert list(chunk.embedding) == pytest.approx(
        embeddings.embed_documents([chunk.content])[0], abs=1e-6
    )
    result = RAGService(tenant).search("Valve V-7 is a gate valve.", kb.pk, mode="vector")
    assert result.hits[0].document_id == document.pk
    assert result.hits[0].vector_similarity == pytest.approx(1.0, abs=1e-6)
    assert result.trace.vector.detail["model"] == FAKE


def test_a_failing_langchain_embeddings_fails_the_document_and_search_falls_back(tenant):
    flaky = Flaky(size=6)
    kb = create_knowledge_base(
        tenant=tenant, name="Flaky", embedding=register_langchain_embeddings(flaky)
    )
    add_document(kb, "ok.txt", "The P-100 pump moves cooling water.")
    document = create_document(
        tenant=tenant,
        knowledge_base=kb,
        name="bad.txt",
        stream=io.BytesIO(b"boom goes the pump"),
        queue=False,
    )
    assert process_document(document.pk) == Document.Status.FAILED
    document.refresh_from_db()
    assert document.error == f"the LangChain embeddings {model_name(flaky)} failed: input rejected"
    result = RAGService(tenant).search("boom pump", kb.pk)
    assert result.trace.fallbacks == ["embedding error -> keyword only"]
    assert [hit.content for hit in result.hits] == ["The P-100 pump moves cooling water."]


def test_a_knowledge_base_embedded_in_another_process_searches_by_keyword_here(tenant):
    kb = KnowledgeBaseFactory(
        tenant=tenant,
        embedding_provider=KnowledgeBase.EmbeddingProvider.LANGCHAIN,
        embedding_model="elsewhere.Embeddings",
        embedding_dimensions=6,
    )
    with pytest.raises(EmbeddingError, match="not registered in this process"):
        get_embedder(EmbeddingConfig("langchain", "elsewhere.Embeddings", 6))
    result = RAGService(tenant).search("pump", kb.pk)
    assert result.trace.fallbacks == ["embedding error -> keyword only"]
    assert "not registered in this process" in result.trace.vector.detail["error"]
    store = KnowledgeBaseVectorStore(tenant, kb)
    assert store.embeddings is None
    with pytest.raises(ValueError, match="pass them as this store's embedding"):
        store.similarity_search("pump")
    with pytest.raises(ValueError, match="pass them as this store's embedding"):
        store.add_texts(["pump"])
