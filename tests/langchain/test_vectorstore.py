"""KnowledgeBaseVectorStore beyond LangChain's standard suite: ingestion through the real
services, ids, duplicates, replacement, scores, filters, MMR, the retrievers it gives, and
knowledge bases whose documents were uploaded otherwise."""

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import VectorStoreRetriever
from pydantic import Field

from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.langchain import KnowledgeBaseVectorStore, ProviderEmbeddings, TextNotAdded
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters
from tests.langchain.conftest import Flaky

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(tenant, embeddings):
    return KnowledgeBaseVectorStore.from_texts([], embeddings, tenant=tenant, name="Notes")


def kb_of(store) -> KnowledgeBase:
    return KnowledgeBase.objects.get(pk=store.knowledge_base_id)


def test_added_texts_are_ingested_like_uploads_and_found_by_hybrid_search(store, tenant):
    before = kb_of(store).index_version
    [lc_id] = store.add_texts(
        ["The ZX81 controller drives the conveyor belt."], [{"source": "plant.md"}]
    )
    document = Document.objects.get(knowledge_base_id=store.knowledge_base_id)
    assert document.status == Document.Status.READY
    assert document.title == "The ZX81 controller drives the conveyor belt."
    assert document.metadata == {"source": "plant.md", "langchain_id": lc_id}
    chunk = document.chunks.get()
    assert "zx81" in chunk.tokens and len(chunk.embedding) == 6
    assert kb_of(store).index_version > before  # BM25 indexes of the old version are stale
    hit = RAGService(tenant).search("ZX81", store.knowledge_base_id, mode="keyword").hits[0]
    assert hit.document_id == document.pk and hit.bm25_rank == 1


class Counting(DeterministicFakeEmbedding):
    calls: list[list[str]] = Field(default_factory=list)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return super().embed_documents(texts)


def test_texts_added_together_are_embedded_in_one_call(tenant):
    counting = Counting(size=6)
    store = KnowledgeBaseVectorStore.from_texts([], counting, tenant=tenant, name="Batched")
    store.add_texts(["  pump seal\r\n", "valve stem", "pump seal"])
    assert counting.calls == [["pump seal", "valve stem"]]
    chunks = Chunk.objects.filter(knowledge_base_id=store.knowledge_base_id)
    assert sorted(c.content for c in chunks) == ["pump seal", "pump seal", "valve stem"]
    for chunk in chunks:
        assert list(chunk.embedding) == pytest.approx(counting.embed_query(chunk.content))
    store.add_texts(["sensor casing"])
    assert counting.calls[-1] == ["sensor casing"]


def test_the_same_text_can_be_added_under_several_ids(store):
    ids = store.add_texts(["Check the seal.", "Check the seal."], [{"n": 1}, {"n": 2}])
    assert len(set(ids)) == 2
    found = store.get_by_ids(ids)
    assert [(d.page_content, d.metadata) for d in found] == [
        ("Check the seal.", {"n": 1}),
        ("Check the seal.", {"n": 2}),
    ]
    assert {d.id for d in store.similarity_search("Check the seal.", k=5)} == set(ids)


def test_adding_the_same_text_and_metadata_again_changes_nothing(store):
    store.add_texts(["Check the seal."], [{"n": 1}], ids=["seal"])
    document = Document.objects.get(knowledge_base_id=store.knowledge_base_id)
    version = kb_of(store).index_version
    assert store.add_texts(["Check the seal."], [{"n": 1}], ids=["seal"]) == ["seal"]
    assert list(Document.objects.filter(knowledge_base_id=store.knowledge_base_id)) == [document]
    assert kb_of(store).index_version == version
    store.add_texts(["Check the seal."], [{"n": 2}], ids=["seal"])
    assert store.get_by_ids(["seal"])[0].metadata == {"n": 2}
    assert Document.objects.filter(knowledge_base_id=store.knowledge_base_id).count() == 1


def test_a_failed_replacement_keeps_the_old_text_and_leaves_nothing_behind(tenant):
    store = KnowledgeBaseVectorStore.from_texts(
        ["The old procedure."], Flaky(size=6), ids=["proc"], tenant=tenant, name="Procedures"
    )
    storage = Document.objects.get(knowledge_base_id=store.knowledge_base_id).file.storage
    files = set(storage.listdir(f"documents/{tenant.pk}/{store.knowledge_base_id}")[1])
    with pytest.raises(TextNotAdded, match=r"'proc' was not added: .* input rejected"):
        store.add_texts(["The boom procedure."], ids=["proc"])
    assert [d.page_content for d in store.get_by_ids(["proc"])] == ["The old procedure."]
    assert Document.objects.filter(knowledge_base_id=store.knowledge_base_id).count() == 1
    assert set(storage.listdir(f"documents/{tenant.pk}/{store.knowledge_base_id}")[1]) == files


@pytest.mark.parametrize(
    ("texts", "metadatas", "message"),
    [
        (["ok", "  "], None, "text 1 is empty"),
        (["ok"], [{"langchain_id": "x"}], "reserved"),
        (["ok"], [{"when": object()}], "cannot be stored as JSON"),
        (["ok"], [{1: "one"}], "keys that are not strings"),
        (["ok", "ok"], [{}], "1 metadatas for 2 texts"),
    ],
)
def test_invalid_texts_are_refused_before_anything_is_written(store, texts, metadatas, message):
    with pytest.raises(ValueError, match=message):
        store.add_texts(texts, metadatas)
    assert not Document.objects.filter(knowledge_base_id=store.knowledge_base_id).exists()


def test_scores_are_cosine_similarities_best_first(store):
    store.add_texts(["pump", "valve", "sensor"])
    scored = store.similarity_search_with_score("valve", k=3)
    assert scored[0][0].page_content == "valve"
    assert scored[0][1] == pytest.approx(1.0, abs=1e-6)
    assert [s for _, s in scored] == sorted((s for _, s in scored), reverse=True)
    relevant = store.similarity_search_with_relevance_scores("valve", k=3)
    assert all(0.0 <= score <= 1.0 for _, score in relevant)
    above = store.similarity_search_with_relevance_scores("valve", k=3, score_threshold=0.99)
    assert [d.page_content for d, _ in above] == ["valve"]


def test_filters_match_metadata_values_and_lists(store):
    store.add_texts(
        ["pump seal", "pump shaft", "valve stem"],
        [{"part": "pump", "year": 2023}, {"part": "pump", "year": 2024}, {"part": "valve"}],
    )
    assert {d.page_content for d in store.similarity_search("x", k=5, filter={"part": "pump"})} == {
        "pump seal",
        "pump shaft",
    }
    found = store.similarity_search("x", k=5, filter={"year": [2024, 2025]})
    assert [d.page_content for d in found] == ["pump shaft"]
    only = SearchFilters(metadata={"part": "valve"})
    assert [d.page_content for d in store.similarity_search("x", k=5, filter=only)] == [
        "valve stem"
    ]


def test_max_marginal_relevance_prefers_diverse_texts(store):
    store.add_texts(["pump seal", "pump seal", "valve stem"])
    assert [d.page_content for d in store.similarity_search("pump seal", k=2)] == [
        "pump seal",
        "pump seal",
    ]
    diverse = store.max_marginal_relevance_search("pump seal", k=2, fetch_k=3, lambda_mult=0.25)
    assert [d.page_content for d in diverse] == ["pump seal", "valve stem"]


def test_chunks_of_documents_being_reprocessed_are_skipped_but_k_is_still_met(store):
    ids = store.add_texts(["alpha", "beta", "gamma", "delta"])
    nearest = store.similarity_search("alpha", k=1)[0]
    Document.objects.filter(metadata__langchain_id=nearest.id).update(
        status=Document.Status.PENDING
    )
    found = store.similarity_search("alpha", k=3)
    assert len(found) == 3 and nearest.id not in {d.id for d in found}
    assert store.get_by_ids([nearest.id]) == [] and len(store.get_by_ids(ids)) == 3


def test_retrievers_of_the_store(store):
    store.add_texts(["pump seal", "valve stem", "sensor casing"], [{"n": 1}, {"n": 2}, {"n": 3}])
    similar = store.as_retriever(search_kwargs={"k": 1})
    assert isinstance(similar, VectorStoreRetriever)
    assert [d.page_content for d in similar.invoke("valve stem")] == ["valve stem"]
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 3})
    assert len(mmr.invoke("valve stem")) == 2
    threshold = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.99}
    )
    assert [d.page_content for d in threshold.invoke("sensor casing")] == ["sensor casing"]
    [hybrid] = store.as_retriever(search_type="hybrid", search_kwargs={"k": 1}).invoke("valve")
    assert hybrid.page_content == "valve stem"
    assert hybrid.metadata["metadata"] == {"n": 2} and hybrid.metadata["bm25_rank"] == 1
    assert hybrid.metadata["trace"]["retrieval_path"] == ["vector", "keyword", "fusion"]


def test_texts_longer_than_a_chunk_are_found_chunk_by_chunk_and_got_whole(tenant, embeddings):
    store = KnowledgeBaseVectorStore.from_texts(
        [], embeddings, tenant=tenant, name="Small chunks", chunk_size=100, chunk_overlap=10
    )
    text = "\n\n".join(
        f"Paragraph {i} says something about part {i} of the pump." for i in range(6)
    )
    [lc_id] = store.add_texts([text])
    chunks = store.similarity_search("pump", k=20)
    assert len(chunks) == 6 and {d.id for d in chunks} == {lc_id}
    assert store.get_by_ids([lc_id])[0].page_content == text


def test_uploaded_documents_have_their_primary_key_as_id(manuals):
    store = KnowledgeBaseVectorStore(manuals.tenant, manuals)
    assert isinstance(store.embeddings, ProviderEmbeddings)
    pump = manuals.documents_by_name["pumps.md"]
    found = store.similarity_search("mechanical seal of the P-100 pump", k=1)
    assert found == [LCDocument(id=str(pump.pk), page_content=found[0].page_content, metadata={})]
    assert [d.id for d in store.get_by_ids([str(pump.pk)])] == [str(pump.pk)]
    store.delete([str(pump.pk)])
    assert not Document.objects.filter(pk=pump.pk).exists()


def test_a_store_refuses_embeddings_its_knowledge_base_does_not_use(manuals, embeddings):
    with pytest.raises(ValueError, match="embeds with its own provider"):
        KnowledgeBaseVectorStore(manuals.tenant, manuals, embeddings)
    notes = KnowledgeBaseVectorStore.from_texts([], embeddings, tenant=manuals.tenant, name="N")
    with pytest.raises(ValueError, match="is embedded by langchain_core"):
        KnowledgeBaseVectorStore(manuals.tenant, notes.knowledge_base_id, Flaky(size=6))


def test_from_texts_adds_to_an_existing_knowledge_base_or_says_what_it_needs(store, embeddings):
    again = KnowledgeBaseVectorStore.from_texts(
        ["pump"], embeddings, tenant=store.tenant, knowledge_base=store.knowledge_base_id
    )
    assert [d.page_content for d in store.similarity_search("pump", k=1)] == ["pump"]
    assert again.knowledge_base_id == store.knowledge_base_id
    with pytest.raises(TypeError, match=r"knowledge_base= .* or name="):
        KnowledgeBaseVectorStore.from_texts(["pump"], embeddings, tenant=store.tenant)


def test_deleting_everything_at_once_is_not_offered(store):
    store.add_texts(["pump"])
    with pytest.raises(ValueError, match="give the ids"):
        store.delete()
    assert len(store.similarity_search("pump")) == 1


def test_langchains_indexing_api_keeps_the_store_in_step(store):
    records = InMemoryRecordManager(namespace="notes")
    records.create_schema()
    first = [
        LCDocument(page_content="pump seal", metadata={"source": "a"}),
        LCDocument(page_content="valve stem", metadata={"source": "b"}),
    ]
    options = {"cleanup": "full", "source_id_key": "source", "key_encoder": "sha256"}
    assert index(first, records, store, **options)["num_added"] == 2
    second = [first[0], LCDocument(page_content="sensor casing", metadata={"source": "c"})]
    result = index(second, records, store, **options)
    assert (result["num_added"], result["num_skipped"], result["num_deleted"]) == (1, 1, 1)
    found = store.similarity_search("x", k=10)
    assert sorted(d.page_content for d in found) == ["pump seal", "sensor casing"]
