"""Re-analysis from stored chunk text, and re-embedding with a one-step switch."""

import pytest

from knowledge.analysis import ANALYZER_VERSION, Analyzer
from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document, KnowledgeBase, StagedEmbedding
from knowledge.services import knowledge_bases, reindex, upkeep
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.search import RAGService
from tests.factories import TenantFactory, add_document

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb():
    return create_knowledge_base(
        tenant=TenantFactory(), name="KB", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )


def version(kb) -> int:
    return KnowledgeBase.objects.get(pk=kb.pk).index_version


def test_outdated_chunks_are_reanalysed_from_their_stored_text(kb):
    document = add_document(kb, "pumps.md", "# Pumps\n\nThe pump P-100 runs daily.")
    expected = list(Chunk.objects.get(document=document).tokens)
    Chunk.objects.filter(document=document).update(tokens=["stale"], analyzer_version=0)
    Document.objects.filter(pk=document.pk).update(analyzer_version=0)
    before = version(kb)

    assert reindex.reanalyze_knowledge_base(kb.pk) == 1
    chunk = Chunk.objects.get(document=document)
    assert chunk.tokens == expected and chunk.analyzer_version == ANALYZER_VERSION
    assert version(kb) == before + 1
    assert reindex.reanalyze_knowledge_base(kb.pk) == 0  # nothing outdated any more
    assert version(kb) == before + 1


def test_chunks_analysed_before_script_folding_are_found_by_traditional_queries_after_upkeep(kb):
    traditional = add_document(kb, "calibration.txt", "傳感器的校準週期是十二個月。")
    simplified = add_document(kb, "wiring.txt", "传感器的接线说明：红线接电源。")
    for name in ("pump.txt", "valve.txt", "seal.txt"):  # so that BM25 weighs the rarer terms
        add_document(kb, name, f"The {name[:-4]} runs daily.")
    # As the previous analyser stored them: Traditional characters kept as they were.
    for document in (traditional, simplified):
        chunk = Chunk.objects.get(document=document)
        old = Analyzer().tokens(document.title, fold=False) + Analyzer().tokens(
            chunk.content, fold=False
        )
        Chunk.objects.filter(pk=chunk.pk).update(tokens=old, analyzer_version=ANALYZER_VERSION - 1)
        Document.objects.filter(pk=document.pk).update(analyzer_version=ANALYZER_VERSION - 1)

    def first_hit(query: str) -> int | None:
        hits = RAGService(kb.tenant).search(query, kb.pk, mode="keyword").hits
        return hits[0].document_id if hits else None

    assert first_hit("接线说明") == simplified.pk  # searchable while outdated
    assert first_hit("校準週期") != traditional.pk  # folded query, unfolded stored tokens

    assert upkeep.queue_outdated_reanalysis() == [kb.pk]  # beat's upkeep finds it...
    assert reindex.reanalyze_knowledge_base(kb.pk) == 2  # ...and its task re-analyses
    assert set(
        Chunk.objects.filter(knowledge_base=kb).values_list("analyzer_version", flat=True)
    ) == {ANALYZER_VERSION}
    assert first_hit("校準週期") == traditional.pk
    assert first_hit("校准周期") == traditional.pk
    assert first_hit("接线说明") == simplified.pk
    assert upkeep.queue_outdated_reanalysis() == []


def test_user_words_change_segmentation_after_reanalysis(kb):
    document = add_document(kb, "battery.txt", "石墨烯电池的寿命很长。")
    assert "石墨烯电池" not in Chunk.objects.get(document=document).tokens
    knowledge_bases.set_user_words(tenant=kb.tenant, knowledge_base=kb, words=["石墨烯电池", " "])
    assert KnowledgeBase.objects.get(pk=kb.pk).user_words == ["石墨烯电池"]
    reindex.reanalyze_knowledge_base(kb.pk, all_chunks=True)
    tokens = Chunk.objects.get(document=document).tokens
    assert "石墨烯电池" in tokens and "电池" in tokens


def test_reembedding_stages_then_switches_every_chunk_at_once(kb):
    first = add_document(kb, "a.md", "# A\n\nalpha pump")
    knowledge_bases.change_embedding(
        tenant=kb.tenant, knowledge_base=kb, config=EmbeddingConfig(provider="hash", dimensions=32)
    )
    # A document processed during the migration still gets the current model...
    second = add_document(kb, "b.md", "# B\n\nbeta valve")
    assert {len(c.embedding) for c in Chunk.objects.filter(knowledge_base=kb)} == {64}
    kb.refresh_from_db()
    assert kb.embedding_model == "hash-64" and kb.embedding_migration["model"] == "hash-32"
    before = version(kb)

    assert reindex.reembed_knowledge_base(kb.pk) == "switched"
    kb.refresh_from_db()
    assert (kb.embedding_model, kb.embedding_dimensions, kb.embedding_migration) == (
        "hash-32",
        32,
        None,
    )
    chunks = Chunk.objects.filter(knowledge_base=kb)
    assert {c.document_id for c in chunks} == {first.pk, second.pk}
    # ...and is moved with the rest: no chunk is left on the old model.
    assert {(c.embedding_model, c.embedding_dimensions, len(c.embedding)) for c in chunks} == {
        ("hash-32", 32, 32)
    }
    assert not StagedEmbedding.objects.filter(knowledge_base=kb).exists()
    assert version(kb) == before + 1
    assert reindex.reembed_knowledge_base(kb.pk) == "nothing to do"


def test_moving_to_no_embeddings_clears_the_vectors(kb):
    add_document(kb, "a.md", "# A\n\nalpha")
    knowledge_bases.change_embedding(
        tenant=kb.tenant, knowledge_base=kb, config=EmbeddingConfig(provider="none")
    )
    assert reindex.reembed_knowledge_base(kb.pk) == "switched"
    assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {""}
    assert Chunk.objects.filter(embedding__isnull=False).count() == 0
    assert KnowledgeBase.objects.get(pk=kb.pk).embedding_provider == "none"


def test_an_unloadable_target_model_is_refused_before_anything_starts(kb):
    from knowledge.embeddings import EmbeddingError

    with pytest.raises(EmbeddingError):
        knowledge_bases.change_embedding(
            tenant=kb.tenant,
            knowledge_base=kb,
            config=EmbeddingConfig(provider="local", model="/nowhere"),
        )
    assert KnowledgeBase.objects.get(pk=kb.pk).embedding_migration is None
